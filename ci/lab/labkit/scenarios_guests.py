"""Scenarios of the guests' DMA paths: guests behind stock QEMU's and our
virtio-iommu (and none), smoke-tested (write+verify at every size, the
lazy and reuse paths' counters) and measured (the README's comparison,
the VMM's levers, scaling, where requests spend their time).

Each entry: the scenario's name -> what the lab host runs (scenarios.py
describes the fields)."""

from __future__ import annotations

from .presets import (BLOCK_SIZES, DEBIAN_KERNEL, DEMO_LAZY_OPTS, FQ_ONLY, FQ_POOL, LAB_7X_PARAMS, NO_POOL, NO_REUSE, POLL_US,
                      SMOKE_PATCHED, STOCK, compare_runs)

GUEST_SCENARIOS = {
    "smoke": {
        "help": "guest boots behind virtio-iommu, NVMe appears, fio write+verify passes",
        "script": "guest-runs",
        "runs": [f"qemu-viommu:qemu:viommu:{STOCK}"],
        "mode": "smoke",
        "bs": "4k,128k",
        "timeout": 900,
    },
    "qemu-baseline": {
        "help": "stock QEMU: virtio-iommu vs plain passthrough, randread at 4 block sizes",
        "script": "guest-runs",
        "runs": ["qemu-viommu:qemu:viommu:baseline", "no-viommu:qemu:none:baseline"],
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "timeout": 1800,
    },
    "compare": {
        "help": "the README's table with 6.12 guests: stock QEMU + stock 6.12 (upstream lazy), stock QEMU + patched 6.12, ours + stock 6.12, ours + patched 6.12 strict and lazy, vs no vIOMMU",
        "script": "guest-runs",
        # Every guest as shipped: stock 6.12 is lazy by default on x86 (the
        # flush queue upstream has had since 6.8); the patched guest is lazy
        # by default and takes its bounce threshold from the device's pool
        # hint where it has one (ours), else from its own default (64 KiB).
        "runs": compare_runs("6.12"),
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "timeout": 4800,
        # The lazy path must really be taken: deferred UNMAPs and FLUSHes.
        "expect": {"ours+patched-lazy": ["deferred_unmaps", "flush_requests"]},
    },
    "compare-6.1": {
        "help": "the same six columns with the 6.1 guests (stock 6.1 is strict: no flush queue in its virtio-iommu)",
        "script": "guest-runs",
        "runs": compare_runs("6.1"),
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "timeout": 4800,
        "expect": {"ours+patched-lazy": ["deferred_unmaps", "flush_requests"]},
    },
    "compare-stock": {
        "help": "one run, stock guest: stock QEMU vs our VMM (both with virtio-iommu) vs no vIOMMU",
        "script": "guest-runs",
        "runs": [
            "qemu-viommu:qemu:viommu:baseline",
            "ours-viommu:vmm:viommu:baseline",
            "no-viommu:qemu:none:baseline",
        ],
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "timeout": 2400,
    },
    "guest-patches": {
        "help": "stock QEMU: baseline guest vs flush queue only vs flush queue + bounce pool",
        "script": "guest-runs",
        "runs": [
            "stock-guest:qemu:viommu:baseline",
            f"fq-only:qemu:viommu:patched:{FQ_ONLY}",
            f"fq+pool:qemu:viommu:patched:{FQ_POOL}",
            "no-viommu:qemu:none:baseline",
        ],
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "timeout": 2400,
    },
    "patched-smoke": {
        "help": "the patched guest (flush queue + pool) behind stock QEMU's virtio-iommu: verify at every size",
        "script": "guest-runs",
        "runs": [f"fq+pool:qemu:viommu:patched:{FQ_POOL}"],
        "mode": "smoke",
        "bs": BLOCK_SIZES,
        "timeout": 900,
    },
    "lazy-smoke": {
        "help": "the patched guest in lazy mode behind our VMM (lazy-unmap contract): verify at every size, pool off and on, and the pool with the reuse cache",
        "script": "guest-runs",
        "runs": [
            f"ours-lazy:vmm:viommu:patched:{FQ_ONLY}",
            "ours-lazy+pool:vmm:viommu:patched:lazy",
            # the 6.1 port of the reuse cache (patches 13-15) with the pool,
            # a window longer than a queue's turn under emulation
            "ours-lazy+reuse:vmm:viommu:patched:lazy+iommu.reuse_window_ms=500",
        ],
        "mode": "smoke",
        "bs": BLOCK_SIZES,
        "timeout": 1500,
        # as smoke-6.12: the cache must empty, and the host lose what it held
        "idle_ms": 3000,
        "idle_check": ["ours-lazy+reuse"],
        "expect": {
            "ours-lazy": ["deferred_unmaps", "flush_requests"],
            "ours-lazy+pool": ["hits"],
            "ours-lazy+reuse": ["deferred_unmaps", "flush_requests", "promoted"],
        },
    },
    "smp-smoke": {
        "help": "2-vCPU guests, 2 fio jobs, behind our VMM: the patched 6.12 guest strict (pool off and on), lazy with the flush queue only and as shipped (pool and reuse cache); verify (mixed 4k-256k) + 128k and 4k randreads",
        "script": "guest-runs",
        "runs": [
            f"ours-strict:vmm:viommu:{SMOKE_PATCHED}:strict+{NO_POOL}",
            f"ours-strict+pool:vmm:viommu:{SMOKE_PATCHED}:strict",
            f"ours-lazy:vmm:viommu:{SMOKE_PATCHED}:{FQ_ONLY}+{NO_REUSE}",
            f"ours-lazy+pool:vmm:viommu:{SMOKE_PATCHED}:lazy",
        ],
        "mode": "mixed",
        "bs": "128k,4k",
        "runtime": 4,
        "guest_cpus": 2,
        "numjobs": 2,
        "timeout": 1800,
        "expect": {
            "ours-lazy": ["deferred_unmaps", "flush_requests"],
            "ours-lazy+pool": ["hits"],
        },
    },
    "icount-smoke": {
        "help": "the lab's instruction clock (--outer-icount 3: the lab host's clocks count the outer QEMU's instructions, its TSC at 1 GHz, single-threaded TCG): a 2-vCPU stock guest behind stock QEMU and behind ours (polling off, as that clock wants) boots, verifies at 4k and reads",
        "script": "guest-runs",
        "runs": [f"qemu+stock:qemu:viommu:{STOCK}", f"ours-nopoll:vmm:viommu:{STOCK}:--viommu-poll-us=0"],
        "mode": "fio",
        "bs": "4k",
        "runtime": 2,
        "guest_cpus": 2,
        "outer_icount": "3",
        "timeout": 1200,
    },
    "smp-smoke-1qp": {
        "help": "smp-smoke with the lab host's NVMe given one I/O queue pair and a 32 KiB maximum transfer: both guest vCPUs share one queue and its interrupt, every large I/O is split",
        "script": "guest-runs",
        "runs": [
            f"ours-strict:vmm:viommu:{SMOKE_PATCHED}:strict+{NO_POOL}",
            f"ours-lazy:vmm:viommu:{SMOKE_PATCHED}:{FQ_ONLY}+{NO_REUSE}",
            f"ours-lazy+pool:vmm:viommu:{SMOKE_PATCHED}:lazy",
        ],
        "mode": "mixed",
        "bs": "128k,4k",
        "runtime": 4,
        "guest_cpus": 2,
        "numjobs": 2,
        "nvme_ioqpairs": 1,
        "nvme_mdts": 3,
        "timeout": 1800,
        "expect": {
            "ours-lazy": ["deferred_unmaps", "flush_requests"],
            "ours-lazy+pool": ["hits"],
        },
    },
    "poll-smoke": {
        "help": "our device thread's request-queue polling (--viommu-poll-us) off and on, 2-vCPU guests with 2 fio jobs that still send requests (stock 6.12: every DMA map a request; patched 6.12 strict): verify (mixed 4k-256k) + 128k and 4k randreads; on, with the vCPUs serving kicks (the default) they must hand over to the polling or find no spare CPU for it, and with --viommu-kicks thread the thread must poll or find no spare CPU; off, none of it may happen",
        "script": "guest-runs",
        "runs": [
            "ours-stock:vmm:viommu:baseline-6.12:--viommu-poll-us=0",
            f"ours-stock+poll:vmm:viommu:baseline-6.12:--viommu-poll-us={POLL_US}",
            f"ours-strict+poll:vmm:viommu:patched-6.12:strict+--viommu-poll-us={POLL_US}",
            f"ours-stock+tpoll:vmm:viommu:baseline-6.12:--viommu-kicks=thread+--viommu-poll-us={POLL_US}",
        ],
        "mode": "mixed",
        "bs": "128k,4k",
        "runtime": 3,
        "guest_cpus": 2,
        "numjobs": 2,
        "timeout": 1800,
        # The polling guests' window must open and then a vCPU hand over
        # to the thread's polling (vcpu_handovers) or find no spare CPU
        # for it (polls_busy); the thread that serves the kicks itself
        # polls (polls_found) or finds none spare: with two fio jobs on the
        # lab host's two CPUs either happens, run to run (seen: 0 found and 3838 busy in
        # one run, found in the next).
        "expect": {"ours-stock+poll": ["vcpu_kicks", "vcpu_handovers|polls_busy"], "ours-strict+poll": ["vcpu_kicks", "vcpu_handovers|polls_busy"], "ours-stock+tpoll": ["polls_found|polls_busy"]},
        "expect_zero": {"ours-stock": ["poll_ns", "polls_found", "polls_busy", "vcpu_handovers"], "ours-stock+tpoll": ["vcpu_kicks", "vcpu_handovers"]},
    },
    "vcpu-kicks": {
        "help": "who serves our virtio-iommu's request-queue notifications (--viommu-kicks): the device thread woken through an ioeventfd (ours+stock, ours+strict: thread) against the vCPU that made the notification (vcpu, the default), with the guests that still send requests (stock 6.12: every DMA map one; patched 6.12 strict), polling off in every column (--viommu-poll-us 0), beside stock QEMU with the stock guest and the ceiling; the demo's stack (the fixed outer QEMU, QEMU 11.1 as the stock VMM, 6.12 lab host behind a virtio-iommu), 2-vCPU guests, 1 and 2 fio jobs, 4k and 128k; the vcpu columns must serve kicks on their vCPUs and the thread columns never; a measurement with --rounds N (columns in balanced order)",
        "script": "guest-runs",
        "runs": [
            "qemu+stock:qemu:viommu:baseline-6.12",
            "ours+stock:vmm:viommu:baseline-6.12:--viommu-kicks=thread+--viommu-poll-us=0",
            "ours+stock+vcpu:vmm:viommu:baseline-6.12:--viommu-kicks=vcpu+--viommu-poll-us=0",
            "ours+strict:vmm:viommu:patched-6.12:strict+--viommu-kicks=thread+--viommu-poll-us=0",
            "ours+strict+vcpu:vmm:viommu:patched-6.12:strict+--viommu-kicks=vcpu+--viommu-poll-us=0",
            "no-viommu:qemu:none:baseline-6.12",
        ],
        "mode": "fio",
        "bs": "4k,128k",
        "numjobs": "1,2",
        "guest_cpus": 2,
        "runtime": 3,
        "ramp": 2,
        "host_iommu": "virtio",
        "vmm_qemu": "11.1",
        "timeout": 3600,
        "expect": {"ours+stock+vcpu": ["vcpu_kicks"], "ours+strict+vcpu": ["vcpu_kicks"]},
        "expect_zero": {"ours+stock": ["vcpu_kicks"], "ours+strict": ["vcpu_kicks"]},
    },
    "levers": {
        "help": "our VMM's levers for guests that still send requests, one column each (--vfio-backend auto: iommufd on the 6.12 lab host): our defaults (the vCPUs serve kicks and hand over to the device thread's polling when a lab host CPU is spare), the same without polling (nopoll, --viommu-poll-us 0), the device thread woken per kick without polling (thread), the device thread serving kicks and polling when a CPU is spare (tpoll), guest RAM pinned once with maps copied from it (--pin-guest-ram), VFIO's type1 container instead of iommufd; with the stock 6.12 guest, the defaults also with the patched strict guest; beside stock QEMU with the stock guest and the ceiling; the demo's stack, 2-vCPU guests, 1 and 2 fio jobs, 4k and 128k; a measurement with --rounds N (columns in balanced order)",
        "script": "guest-runs",
        "runs": [
            "qemu+stock:qemu:viommu:baseline-6.12",
            "ours+stock:vmm:viommu:baseline-6.12",
            "ours+stock+nopoll:vmm:viommu:baseline-6.12:--viommu-poll-us=0",
            "ours+stock+thread:vmm:viommu:baseline-6.12:--viommu-kicks=thread+--viommu-poll-us=0",
            f"ours+stock+tpoll:vmm:viommu:baseline-6.12:--viommu-kicks=thread+--viommu-poll-us={POLL_US}",
            "ours+stock+pinned:vmm:viommu:baseline-6.12:--viommu-kicks=vcpu+--pin-guest-ram",
            "ours+stock+type1:vmm:viommu:baseline-6.12:--viommu-kicks=vcpu+--vfio-backend=container",
            "ours+strict:vmm:viommu:patched-6.12:strict+--viommu-kicks=vcpu",
            "no-viommu:qemu:none:baseline-6.12",
        ],
        "mode": "fio",
        "bs": "4k,128k",
        "numjobs": "1,2",
        "guest_cpus": 2,
        "runtime": 3,
        "ramp": 2,
        "host_iommu": "virtio",
        "host_kernel": "6.12",
        "vmm_qemu": "11.1",
        "timeout": 3600,
        "expect": {"ours+stock": ["vcpu_kicks", "vcpu_handovers|polls_busy"], "ours+strict": ["vcpu_kicks"], "ours+stock+tpoll": ["polls_found|polls_busy"]},
        "expect_zero": {"ours+stock+nopoll": ["vcpu_handovers", "poll_ns"], "ours+stock+thread": ["vcpu_kicks", "poll_ns"], "ours+stock+tpoll": ["vcpu_kicks"]},
    },
    "reuse-7.3": {
        "help": "the lazy guest with the reuse cache on 7.3 against 6.12 (the 7.3 series' lazy reuse columns within the spread of 6.12's): the patched 6.12 and 7.3 guests lazy behind ours with the demo's reuse window, beside stock QEMU with the stock 7.3 guest and the ceiling; the demo's stack, 2-vCPU guests, 1 and 2 fio jobs, 4k and 128k; every guest boots with " + LAB_7X_PARAMS + " (6.12 ends up without XSAVE in the lab anyway: docs/lab.md); a measurement with --rounds N (columns in balanced order)",
        "script": "guest-runs",
        "runs": [
            f"qemu+stock-7.3:qemu:viommu:baseline-7.3:{LAB_7X_PARAMS}",
            f"ours+lazy-6.12:vmm:viommu:patched-6.12:lazy+{LAB_7X_PARAMS}+{DEMO_LAZY_OPTS}",
            f"ours+lazy-7.3:vmm:viommu:patched-7.3:lazy+{LAB_7X_PARAMS}+{DEMO_LAZY_OPTS}",
            f"no-viommu:qemu:none:baseline-7.3:{LAB_7X_PARAMS}",
        ],
        "mode": "fio",
        "bs": "4k,128k",
        "numjobs": "1,2",
        "guest_cpus": 2,
        "runtime": 3,
        "ramp": 2,
        "host_iommu": "virtio",
        "vmm_qemu": "11.1",
        "timeout": 3600,
        # 7.3: the 128k reads take the IOVA link API (guest patch 17)
        "expect": {"ours+lazy-6.12": ["hits"], "ours+lazy-7.3": ["hits", "link_hits"]},
    },
    "lbs4k-smoke": {
        "help": "a 4096-byte-block NVMe (QEMU's logical_block_size=4096): stock QEMU + stock guest and ours + patched (strict, lazy) verify at 4k-256k and mixed sizes, the smallest block from the namespace's own",
        "script": "guest-runs",
        "runs": [
            "qemu+stock:qemu:viommu:baseline",
            "ours-strict:vmm:viommu:patched:strict",
            "ours-lazy:vmm:viommu:patched:lazy",
        ],
        "mode": "mixed",
        "bs": "4k,128k",
        "runtime": 2,
        "nvme_lbs": 4096,
        "timeout": 1500,
    },
    "scaling": {
        "help": "1 vs 2 fio jobs on 2-vCPU guests, every column of compare-6.1 (the baseline of the device thread's scaling), with where our device's time goes",
        "script": "guest-runs",
        "runs": compare_runs("6.1"),
        "mode": "fio",
        "bs": BLOCK_SIZES,
        "guest_cpus": 2,
        "numjobs": "1,2",
        "timeout": 5400,
    },
    "vtd-smoke": {
        "help": "stock QEMU's emulated VT-d (intel-iommu, caching mode, interrupt remapping) in front of the NVMe: the stock and the patched 6.12 guest and Debian 13's own kernel package (the demo's baseline), write+verify at 4k and 128k, a 2 s 4k read; each guest records dmar0 and a strict (DMA) domain",
        "script": "guest-runs",
        "runs": [
            f"qemu-vtd+stock:qemu:vtd:{STOCK}",
            f"qemu-vtd+patched:qemu:vtd:{SMOKE_PATCHED}",
            f"qemu-vtd+debian:qemu:vtd:{DEBIAN_KERNEL}",
        ],
        "mode": "smoke",
        "bs": "4k,128k",
        "timeout": 1500,
        # VT-d with caching mode makes every guest strict (docs/distro-kernels.md).
        "expect_iommu": {"qemu-vtd+stock": ("dmar", "DMA"), "qemu-vtd+patched": ("dmar", "DMA"),
                         "qemu-vtd+debian": ("dmar", "DMA")},
    },
    "distro-smoke": {
        "help": "Debian 13's own 6.12 kernel package (linux-image-*-amd64-unsigned, drivers as modules, loaded from its package by the guest image) as the guest behind our virtio-iommu: write+verify at 4k and 128k, a 2 s 4k read; the guest records virtio-iommu and a lazy (DMA-FQ) domain",
        "script": "guest-runs",
        "runs": [f"ours+debian:vmm:viommu:{DEBIAN_KERNEL}"],
        "mode": "smoke",
        "bs": "4k,128k",
        "timeout": 1500,
        "expect_iommu": {"ours+debian": ("virtio", "DMA-FQ")},
        "expect": {"ours+debian": ["map_requests"]},
    },
    "smoke-6.12": {
        "help": "the patched 6.12 guest under both VMMs: write+verify at 4k-256k and mixed sizes (stock QEMU with its pool; ours strict and lazy with the lazy IOTLB flush)",
        "script": "guest-runs",
        "runs": [
            "qemu+patched:qemu:viommu:patched-6.12",
            "ours+strict:vmm:viommu:patched-6.12:strict",
            "ours+lazy:vmm:viommu:patched-6.12:lazy",
            # the pool and the reuse cache together, with a window longer
            # than a queue's turn under emulation (about 12 ms at 4k qd64):
            # buffers the pool served that come back are promoted to
            # cached mappings (guest patch 14)
            "ours+lazy+reuse:vmm:viommu:patched-6.12:lazy+iommu.reuse_window_ms=500",
            # a 1 ms window: entries expire during the run, so evicted
            # mappings go to the host as deferred unmaps while I/O goes on;
            # admission (guest patch 16) would keep nothing this short-lived,
            # so it is off here
            "ours+lazy+reuse-1ms:vmm:viommu:patched-6.12:lazy+iommu.bounce_threshold=0+iommu.reuse_window_ms=1+iommu.reuse_admission=0",
        ],
        # After the runs every guest idles 3 s (the window plus the flush
        # queue's 10 ms, with room for emulation): the reuse cache must be
        # empty and what it held gone from the host (idle_problems).
        "idle_ms": 3000,
        "idle_check": ["ours+lazy+reuse", "ours+lazy+reuse-1ms"],
        # guest patch 15: with the reuse cache nvme's requests may exceed
        # the IOVA caches' 128 KiB (a 256k read is one command), without
        # it (strict) they may not
        "max_hw_kb": {"ours+lazy+reuse": (256, None), "ours+lazy+reuse-1ms": (256, None), "ours+strict": (None, 128)},
        "mode": "smoke",
        "bs": "4k,16k,64k,128k,256k",
        "timeout": 1500,
        "expect": {
            "ours+lazy": ["deferred_unmaps", "flush_requests"],
            # counters are matched by the end of their name: "promoted" is
            # iommu-dma-reuse/promoted, the pool's buffers mapped for reuse;
            # the 1 ms guest has the pool off (iommu.bounce_threshold=0), so
            # its cache serves every size
            "ours+lazy+reuse": ["deferred_unmaps", "flush_requests", "promoted"],
            "ours+lazy+reuse-1ms": ["deferred_unmaps", "flush_requests", "evict_expired"],
        },
    },
    "smoke-7.3": {
        "help": "the 7.3 series (guest-patches/linux-7.3, the mainline-facing one) under both VMMs: stock 7.3 and patched 7.3 behind stock QEMU, patched 7.3 behind ours strict, lazy, and lazy with the reuse cache; write+verify at 4k-256k and mixed sizes; then every guest idles 3 s and the reuse cache must have let go of what it held",
        "script": "guest-runs",
        "runs": [
            f"qemu+stock:qemu:viommu:baseline-7.3:{LAB_7X_PARAMS}",
            f"qemu+patched:qemu:viommu:patched-7.3:{LAB_7X_PARAMS}",
            f"ours+strict:vmm:viommu:patched-7.3:strict+{LAB_7X_PARAMS}",
            f"ours+lazy:vmm:viommu:patched-7.3:lazy+{LAB_7X_PARAMS}",
            # smoke-6.12's window: long enough under emulation for buffers
            # to come back to the cache
            f"ours+lazy+reuse:vmm:viommu:patched-7.3:lazy+iommu.reuse_window_ms=500+{LAB_7X_PARAMS}",
        ],
        "idle_ms": 3000,
        "idle_check": ["ours+lazy+reuse"],
        "mode": "smoke",
        "bs": "4k,16k,64k,128k,256k",
        "timeout": 1500,
        "expect": {
            "ours+lazy": ["deferred_unmaps", "flush_requests"],
            # guest patch 17: NVMe's IOVA link API requests (16k and up)
            # served from kept ranges
            "ours+lazy+reuse": ["deferred_unmaps", "flush_requests", "promoted", "link_hits"],
        },
    },
    "fault-census": {
        "help": "the lab's own faults, counted: 8 guests behind our VMM and 8 behind stock QEMU, alternating, the same patched 6.12 guest (lazy, 2 vCPUs, 2 fio jobs) doing a short write+verify and randread; run it under each --outer-qemu and count with ci/lab/fault-census",
        "script": "guest-runs",
        "runs": [run for i in range(1, 9) for run in (f"ours{i}:vmm:viommu:patched-6.12:lazy", f"qemu{i}:qemu:viommu:patched-6.12:lazy")],
        "mode": "smoke",
        "bs": "4k",
        "runtime": 2,
        "guest_cpus": 2,
        "numjobs": 2,
        "timeout": 3000,
    },
    "breakdown": {
        "help": "where a stock 6.12 guest's virtio-iommu requests spend their time in the VMM: stock QEMU and our VMM with the stock guest, and ours with the patched guest strict, 2-vCPU guests, 4k and 128k, 1 and 2 fio jobs, one round; viommu-bench --breakdown: after the timed runs every guest runs each fio job again, untimed, while the lab host's tracefs records only its VMM's threads (wake-ups and their latency, run time, VFIO ioctls, page pinning, MMIO and port write exits)",
        "script": "guest-runs",
        "runs": [
            "qemu+stock:qemu:viommu:baseline-6.12",
            "ours+stock:vmm:viommu:baseline-6.12",
            "ours+patched-strict:vmm:viommu:patched-6.12:strict",
        ],
        "mode": "fio",
        "bs": "4k,128k",
        "numjobs": "1,2",
        "guest_cpus": 2,
        "runtime": 3,
        "ramp": 2,
        "rounds": 1,
        # The demo's stack (DEMO, DEMO_WHY): our 6.12 lab host behind the
        # outer QEMU's virtio-iommu (its kernel has the syscall trace
        # events and kprobes: host-config-fragment-6.12), QEMU 11.1 inside
        # and outside.
        "host_iommu": "virtio",
        "host_kernel": "6.12",
        "vmm_qemu": "11.1",
        "breakdown": True,
        "timeout": 3600,
        "expect": {"ours+stock": ["map_requests", "vfio_calls"], "ours+patched-strict": ["map_requests"]},
    },
}
