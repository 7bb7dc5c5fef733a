"""Scenarios that check our programs as programs: the VMM (boot, bad
input, clean exits, a hostile guest), its VFIO backends against the real
kernel, and the bench tool as users run it (binding and giving back the
drive, a run killed and its drive restored with its data, NVMe
multipath, a kernel of their own, a Debian 13 userland).

Each entry: the scenario's name -> what the lab host runs (scenarios.py
describes the fields)."""

from __future__ import annotations

from .presets import POLL_US, SMOKE_PATCHED, STOCK, USERLAND_PACKAGES

PROGRAM_SCENARIOS = {
    "hostile": {
        "help": "a hostile guest behind our VMM: while its 2-job mixed-size write+verify and 128k/4k randreads run, other processes read the NVMe's MSI-X PBA and table, write its config space and flood the virtio-iommu's config space; before them the NVMe's Memory Space is turned off, its BAR read, and on again, 20 times; after the reads, with the NVMe removed, the virtio-iommu is reset and activated with a queue set up wrong 1000 times (each must be refused) (lab.hostile=2 also corrupts its request queue's avail index; not in this scenario); the VMM must stay up, its memory apart from guest RAM and its log lines stay within a calm guest's plus the bounds, the verify pass and the release log no error; the calm guest runs after it on the same NVMe",
        "script": "guest-runs",
        # The stock guest (STOCK), strict so that every DMA unmap is a
        # request too (stock 6.12 is lazy by default), and a calm twin,
        # run after it: its write+verify goes through the NVMe the hostile
        # guest's VMM released. 32 MiB per job: the attacks run through
        # the write+verify for longer.
        "runs": [
            f"ours-hostile:vmm:viommu:{STOCK}:strict+lab.hostile=1+lab.verify=32M",
            f"ours-calm:vmm:viommu:{STOCK}:strict+lab.verify=32M",
        ],
        "mode": "mixed",
        "bs": "128k,4k",
        "runtime": 4,
        "guest_cpus": 2,
        "numjobs": 2,
        "timeout": 1800,
        "expect": {"ours-hostile": ["map_requests"], "ours-calm": ["map_requests"]},
        "hostile": {
            "column": "ours-hostile",
            "control": "ours-calm",
            # operations each attacker must have made (under the nested
            # emulation an MMIO access costs tens of microseconds or more)
            # The corrupt avail index (lab.hostile=2) is left out: from the
            # guest's userspace it hung the guest's own driver (see
            # tools/viommu-bench/guest/init, hostile_start).
            # nvme-config's writes go through VFIO to the lab host's
            # emulated NVMe's config space, the slowest: 1075-1921 in 48 s
            # in the lab's warm runs, 802 in a cold CI run with kernels
            # building beside it; a few
            # hundred still show it ran the whole time.
            # mem-decode (before the I/O): each of its 20 cycles a read
            # of the NVMe's BAR0 with Memory Space off answered all-ones
            # (the BAR's memory slot removed, not a failed KVM_RUN) and
            # the BAR back after; activation (after the I/O, the NVMe
            # removed): each of its 1000 resets and activations with a
            # queue set up wrong refused with DEVICE_NEEDS_RESET.
            "attacks": {"msix-pba": 1000, "msix-table": 1000, "nvme-config": 400, "viommu-config": 1000,
                        "mem-decode": 20, "activation": 1000},
            # the VMM's resident memory apart from guest RAM: at most this
            # much above the calm guest's VMM, and this much at all
            "rss_growth_mib": 32,
            "rss_mib": 256,
            # log lines: the calm guest's VMM's, plus the rate limiter's
            # budget (viommu_device::ratelimit::PER_SECOND = 10 a second,
            # and its one report a second of what it dropped) over the
            # cell's wall-clock time, plus this many
            "log_per_s": 11,
            "log_slack": 50,
        },
    },
    "multipath": {
        "help": "a dual-port NVMe (QEMU's nvme-subsys: two controllers sharing namespace 1, the lab host's native multipath shows nvmeXcYnZ paths): viommu-bench finds the namespace through the controller and its subsystem, refuses while it is mounted, then runs with one controller passed through while the other stays on nvme, and gives the drive back",
        "script": "multipath",
        "runs": [f"ours+stock:vmm:viommu:{STOCK}"],
        "mode": "smoke",
        "bs": "4k",
        "runtime": 2,
        "nvme_multipath": True,
        "checks": True,
        "timeout": 900,
        "expect": {"ours+stock": ["map_requests"]},
    },
    "own-kernel": {
        "help": "a guest kernel brought from outside the tree's cache: the lab's bzImage copied to another path with no config file of its own (a stale one beside it), read by its embedded config (CONFIG_IKCONFIG) before anything is bound, and booted; a kernel whose embedded config lacks the NVMe driver is refused before binding",
        "script": "own-kernel",
        "runs": ["ours+stock:vmm:viommu:baseline"],
        "mode": "smoke",
        "bs": "4k",
        "runtime": 2,
        "checks": True,
        "timeout": 900,
    },
    "debian13-userland": {
        "help": "viommu-bench on a Debian 13 userland: chrooted into a Debian 13 root in the lab host (its fio, busybox-static, glibc and QEMU; --vmm-qemu 11.1, the default, or 10.0), the tool builds its guest image from that fio and busybox and runs stock QEMU (that QEMU) and our VMM, one write+verify and randread at 4k and 128k each; checks that the image's fio, busybox and libc are the root's, the guests report that fio and busybox, and results.json records that QEMU",
        "script": "debian13-userland",
        "runs": ["qemu+stock:qemu:viommu:baseline", "ours+stock:vmm:viommu:baseline"],
        "mode": "smoke",
        "bs": "4k,128k",
        "runtime": 2,
        "checks": True,
        # the root's QEMU (trixie-backports' 11.1, or trixie's 10.0 with
        # --vmm-qemu 10.0) is the stock column's; the root also holds
        # these packages (ci/lab/debian-root --with)
        "userland": USERLAND_PACKAGES,
        "vmm_qemu": "11.1",
        "timeout": 1500,
        "expect": {"ours+stock": ["map_requests"]},
    },
    "distro-vm": {
        "help": "a user's VM: a Debian 13 root (ci/lab/debian-vm: linux-image-amd64 6.12, its initramfs-tools initramfs with virtio_iommu and nvme in /etc/initramfs-tools/modules, systemd, a serial getty, fio) on the lab host's NVMe from the start; our VMM boots the root's /boot/vmlinuz and initrd.img with root= on the NVMe behind our virtio-iommu and a VF of the lab host's igb (SR-IOV; --nic none: without) as a second endpoint; the scenario logs in on the serial console, runs fio with verify on a file of the root filesystem, pings the lab host's PF over the VF and sends 8 MiB each way with checksums while fio writes and verifies again, checks both endpoints' host map calls in GET /metrics, reboots it in place three times while fio writes (the guest's reset register through the VMM's reset vector stub, vmmctl reboot, a triple fault with --on-triple-fault restart), each boot verifying what fio wrote before the reboot (fio --verify_only), then writing and verifying again, with every host mapping gone at the reset and the VMM's memory apart from guest RAM where the first boot left it, and powers the VM off; then Debian 12's cloud kernel (no virtio-iommu driver: the VMM's one-line warning) and Debian's own initramfs (no virtio_iommu: it gives up waiting for the root) on the same root; each step a check with its time",
        "script": "distro-vm",
        "runs": [],
        "cargo_bins": [("vmm", "vmm")],
        # The lab host's NVMe is this drive from the start (its image
        # copied for each lab host boot); its kernel and initramfs go to
        # /lab/distro.
        "distro_vm": True,
        # The igb and its VF (the lab's default outer QEMU, 10.0 with our
        # fix, has one; stock 11.1 crashed its lab hosts here), and our
        # 6.12 lab host kernel (igb, igbvf, PCI_IOV; behind the outer
        # virtio-iommu).
        "nic": "igb",
        "host_iommu": "virtio",
        "host_kernel": "6.12",
        "checks": True,
        "timeout": 3000,
    },
    "vmm-boot": {
        "help": "our VMM boots the guest to its init and powers off (no devices)",
        "script": "vmm-boot",
        "runs": [],
        "guest_kernels": ["baseline"],
        "cargo_bins": [("vmm", "vmm")],
        "checks": True,
        "timeout": 600,
    },
    "vmm-smoke": {
        "help": "our VMM: NVMe behind our virtio-iommu, fio write+verify passes",
        "script": "guest-runs",
        "runs": [f"ours-viommu:vmm:viommu:{STOCK}"],
        "mode": "smoke",
        "bs": "4k,128k",
        "timeout": 900,
    },
    "vmm-errors": {
        "help": "our VMM: bad flags, a missing and a busy VFIO device each give exit 2 and one clear line; a system call its seccomp filter denies ends it with exit 159 and a line naming the thread and the call",
        "script": "vmm-errors",
        "runs": [],
        "cargo_bins": [("vmm", "vmm")],
        "checks": True,
        "timeout": 600,
    },
    "bench-tool": {
        "help": "viommu-bench as a user runs it: refuses without --destroy-data, binds the NVMe from nvme, one round at 4k, gives it back to nvme",
        "script": "bench-tool",
        "runs": [f"ours+stock:vmm:viommu:{STOCK}"],
        "mode": "fio",
        "bs": "4k",
        "runtime": 3,
        "checks": True,
        "timeout": 900,
        "expect": {"ours+stock": ["map_requests", "vfio_calls"]},
    },
    "restore": {
        "help": "nothing lost when a run dies: the NVMe on nvme with 4 MiB of known data beyond what the guest writes; viommu-bench refuses while a process holds the namespace open (named) and while one holds it O_EXCL with no descriptor in /proc (the kernel's EBUSY); with both gone it starts, binds the drive and boots a guest (ours, stock 6.12) and is killed with SIGKILL mid-I/O: its VMM must go with it, the drive stay on vfio-pci with its state file, a rerun refuse offering --restore, viommu-bench --restore give it back to nvme and the known data read back intact",
        "script": "restore",
        # The script picks its own column (ours+stock:vmm:viommu:stock):
        # the run it kills leaves no cell to judge, so the scenario is
        # judged by its checks only.
        "runs": [],
        "guest_kernels": [STOCK],
        "cargo_bins": [("vmm", "vmm")],
        "c_bins": [("helpers/hold-excl.c", "hold-excl")],
        "mode": "fio",
        "bs": "4k",
        "runtime": 20,
        "checks": True,
        "timeout": 1200,
    },
    "vmm-exits": {
        "help": "our VMM exits cleanly (no VFIO error, right exit code) on power-off, reset, triple fault and SIGTERM, and restarts a rebooting guest in place (its default, --on-reboot restart) up to its --reboot-limit with the NVMe live behind the virtio-iommu; the crash test: our VMM and stock QEMU killed with SIGKILL mid 128k randread; after each, a fresh guest writes and verifies through the same NVMe; a guest's reboots must leave no DMA fault at the lab host's IOMMU (the patched guest shuts the NVMe down before the virtio-iommu)",
        "script": "vmm-exits",
        "runs": [],
        "cargo_bins": [("vmm", "vmm"), ("vmm", "vmmctl")],
        "guest_kernels": [SMOKE_PATCHED],
        "checks": True,
        "timeout": 1800,
    },
    "vfio-backend": {
        "help": "our VFIO DMA backend against the real kernel: map, coalesced unmap, split refusal",
        "script": "vfio-backend",
        "runs": [],
        "cargo_bins": [("vfio-lab-check", "vfio-lab-check")],
        "checks": True,
        "timeout": 600,
    },
    "iommufd": {
        "help": "our VMM's iommufd backend on our 6.12 lab host (iommufd and VFIO cdevs built in): vfio-backend's checks through an IOAS and with maps copied from memory pinned once, then guests behind our VMM with --vfio-backend iommufd, and with --pin-guest-ram and request-queue polling (stock 6.12: every DMA map a request; 2 vCPUs, 2 jobs, mixed sizes verified)",
        "script": "iommufd",
        # The second guest also polls (--viommu-poll-us, poll-smoke's
        # window; its vCPUs hand over to the thread's polling), the first
        # does not: CI's one run of polling on and off.
        "runs": [
            "ours-iommufd:vmm:viommu:baseline-6.12:--vfio-backend=iommufd+--viommu-poll-us=0",
            f"ours-pinned+poll:vmm:viommu:baseline-6.12:--vfio-backend=iommufd+--pin-guest-ram+--viommu-poll-us={POLL_US}",
        ],
        "cargo_bins": [("vfio-lab-check", "vfio-lab-check")],
        "checks": True,
        "no_skipped_checks": True,
        "host_iommu": "virtio",
        "host_kernel": "6.12",
        "mode": "mixed",
        "bs": "128k,4k",
        "runtime": 3,
        "guest_cpus": 2,
        "numjobs": 2,
        "timeout": 1800,
        # Not polls_found on the polling guest: under the lab's emulation a
        # stock guest's requests come further apart than the VMM's 1 ms
        # limit, so the adaptive window stays 0 (first lab run of this
        # scenario: verify passed, polls_found 0); the polling's mechanics
        # are the property tests', the lab checks the flag breaks nothing.
        "expect": {"ours-iommufd": ["map_requests", "vfio_calls"], "ours-pinned+poll": ["map_requests", "vfio_calls"]},
        "expect_zero": {"ours-iommufd": ["poll_ns", "polls_found", "polls_busy", "vcpu_handovers"]},
    },
    "tcg-race": {
        "help": "the outer QEMU's TCG race behind the lab host crashes (docs/lab.md, \"Lab host crashes\"), no guest OS: ci/lab/repro/tcg-race.c runs a 1-vCPU KVM guest looping on CPUID on one lab host CPU while the other loops on FXRSTOR/XRSTOR, first with the guest on CPU 1 (control), then on CPU 0 (the race: QEMU writes CPU 0's hflags2 from the other CPU's thread); lab.race_seconds (default 300) each; a lab host crash is reported as host_crash; compare --outer-qemu 11.1 (or 10.0) with 10.0-fixed/11.1-fixed",
        "script": "tcg-race",
        "runs": [],
        "c_bins": [("repro/tcg-race.c", "tcg-race")],
        "checks": True,
        "outer_qemu": "11.1",
        "timeout": 1500,
    },
}
