"""The building blocks of the scenario catalogue: the guest kernels and
their parameters the scenarios name, the run specs of the README's
comparison, and the demo's settings with the reason for each (DEMO_WHY,
which the demo prints)."""

from __future__ import annotations

BLOCK_SIZES = "4k,16k,64k,128k"
# The patched guest with only the flush queue, and with the bounce pool for
# every measured size (its default threshold is 64 KiB).
FQ_ONLY = "lazy+iommu.bounce_threshold=0"
FQ_POOL = "lazy+iommu.bounce_threshold=128K"
NO_POOL = "iommu.bounce_threshold=0"
# The 6.12 and later series' reuse cache off (it is on by default in their
# lazy domains, with a 10 ms window): the flush queue's own path.
NO_REUSE = "iommu.reuse_window_ms=0"
# The stock guest of the scenarios that test the VMM, the lab and the bench
# tool with an unpatched kernel (smoke, vmm-smoke, hostile, bench-tool,
# multipath): stock 6.12, today's LTS, lazy by default on x86. It is also
# what CI boots for them, so CI builds no stock 6.1 kernel (a cold CI run
# stays under an hour); the comparisons of 6.1 guests keep baseline.
STOCK = "baseline-6.12"
# The patched guest of the smoke scenarios CI runs with our VMM (smp-smoke,
# smp-smoke-1qp, vmm-exits): patched 6.12, the maintained series, so that
# CI builds no 6.1 kernel at all (its build was about 470 s of a cold
# run's background chain, though dropping it alone did not shorten a cold
# run). The frozen 6.1 series keeps its own scenarios, run by hand: patched-smoke,
# lazy-smoke, compare-6.1, guest-patches.
SMOKE_PATCHED = "patched-6.12"

# Debian 13's own 6.12 kernel (linux-image-6.12.*-amd64-unsigned from
# trixie, fetched and unpacked by ci/lab/debian-kernel): its drivers are
# modules, which the bench tool loads from the package's tree.
DEBIAN_KERNEL = "debian-6.12"


def compare_runs(version: str, lazy_opts: str = "") -> list[str]:
    """The six columns of the README's table with the guest kernels of
    VERSION (6.1: baseline/patched; else baseline-VERSION, patched-VERSION);
    LAZY_OPTS ("+"-joined guest parameters) go to the patched guests that
    run lazy (stock QEMU's, whose default is lazy, and ours in lazy mode)."""
    v = "" if version == "6.1" else f"-{version}"
    return [
        f"qemu+stock:qemu:viommu:baseline{v}",
        f"qemu+patched:qemu:viommu:patched{v}" + (f":{lazy_opts}" if lazy_opts else ""),
        f"ours+stock:vmm:viommu:baseline{v}",
        f"ours+patched-strict:vmm:viommu:patched{v}:strict",
        f"ours+patched-lazy:vmm:viommu:patched{v}:lazy" + (f"+{lazy_opts}" if lazy_opts else ""),
        f"no-viommu:qemu:none:baseline{v}",
    ]


# Guest parameters every 7.x guest of the lab boots with. noxsave: QEMU's
# TCG (the outer emulator) does not intercept XSETBV for the lab host's
# KVM (its helper_xsetbv has no SVM intercept check), so a guest's XCR0
# never reaches KVM, which then reports CPUID 0xD's size for XCR0=x87
# (576 bytes) while the guest enabled AVX and PKRU (2696). Every guest
# kernel fails its XSAVE size check on that ("XSAVE consistency problem",
# a WARN that `quiet` hides) and falls back to FXSAVE: 6.1 and 6.12 boot
# on, 7.3 crashes in copy_creds() right after (seen in smoke-7.3).
# noxsave makes the same choice up front. Not for real hosts.
LAB_7X_PARAMS = "noxsave"

def user_runs() -> list[str]:
    """The setup an x86 user compares against, first so that it is the
    table's baseline: a distribution's own kernel (Debian 13's 6.12
    package) behind stock QEMU's emulated VT-d (caching mode, interrupt
    remapping), and the same kernel behind our virtio-iommu."""
    return [
        f"qemu-vtd+debian:qemu:vtd:{DEBIAN_KERNEL}",
        f"ours+debian:vmm:viommu:{DEBIAN_KERNEL}",
    ]


# The demo's patched lazy guests' parameters (DEMO_WHY says why).
DEMO_LAZY_OPTS = "iommu.reuse_window_ms=1000"


def seven_three_runs(lazy_opts: str = "") -> list[str]:
    """--with-7.3: the 7.3 guest beside a run's own: the stock 7.3 kernel
    behind stock QEMU and behind ours, and the 7.3 series lazy behind ours
    (with LAZY_OPTS, "+"-joined)."""
    lazy = "+".join(o for o in ("lazy", LAB_7X_PARAMS, lazy_opts) if o)
    return [
        f"qemu+stock-7.3:qemu:viommu:baseline-7.3:{LAB_7X_PARAMS}",
        f"ours+stock-7.3:vmm:viommu:baseline-7.3:{LAB_7X_PARAMS}",
        f"ours+patched-lazy-7.3:vmm:viommu:patched-7.3:{lazy}",
    ]


# What a Debian 13 userland holds beside QEMU for the bench tool to build
# its guest image from (debian13-userland; the tool suggests busybox-static
# on Debian when busybox is missing).
USERLAND_PACKAGES = ["fio", "busybox-static"]

# The poll window poll-smoke gives our device thread (--viommu-poll-us): the
# VMM's limit, 1 ms. Under the lab's emulation a stock guest's requests come
# about 1-2 ms apart (3049 MAPs in a 5 s 128k run): with 50 us (the value
# the polling's property tests use, right for hardware) the window shrank to
# 0 during boot and no measured phase polled at all (seen in poll-smoke).
# The VMM's default is 0 (off) until a lab run shows what it gains and costs.
POLL_US = 1000


# The default demo (the compare scenario: the user's setup, then 6.12 guests): 2-vCPU guests, 1
# and 2 fio jobs, 3 rounds (one lab host boot each, columns in balanced
# order), 3 s per measured run; meant to stay under about 25 minutes with a
# warm cache. --runtime, --rounds, --bs and --numjobs ask for longer runs.
# The rest is the configuration the README's standing is measured in, each
# setting with its reason (DEMO_WHY, printed by the demo); the flags of the
# same names override them.
DEMO = {"bs": "4k,128k", "numjobs": "1,2", "guest_cpus": 2, "runtime": 3, "rounds": 3,
        "host_iommu": "virtio", "ramp": 2, "vmm_qemu": "11.1", "outer_qemu": "10.0-fixed",
        "runs": user_runs() + compare_runs("6.12", DEMO_LAZY_OPTS),
        "lead": "ours+patched-lazy",
        # With the window at 1 s the reuse cache may serve every I/O after
        # the ramp (no deferred UNMAP reaches the device): the path under
        # test is the cache's, so its hits must move.
        "expect": {"ours+patched-lazy": ["hits"]},
        # Which vIOMMU each user-setup guest found and how its NVMe's domain
        # ran, read from its sysfs: VT-d in caching mode makes Debian's
        # kernel strict (docs/distro-kernels.md); behind ours it stays lazy.
        "expect_iommu": {"qemu-vtd+debian": ("dmar", "DMA"), "ours+debian": ("virtio", "DMA-FQ")}}
DEMO_WHY = [
    "--outer-qemu 10.0-fixed: the lab host runs under Debian 13's QEMU 10.0 built from Debian's source with our "
    "fix of the TCG race that crashed lab hosts (ci/lab/outer-qemu/, built once, about 10 min): stock 11.1 lost 3 "
    "lab hosts in a row in one demo round, the fixed 10.0 none in three one-round demos of the same tree (few "
    "boots, but the race's reproducer agrees: docs/lab.md)",
    "--vmm-qemu 11.1: stock QEMU is the newest Debian ships (11.1, trixie-backports), untraced in timed phases, "
    "not the build machine's 7.2",
    "--host-kernel 6.12: the lab host runs our 6.12 build (iommufd and VFIO cdevs built in, as Fedora's, RHEL's "
    "and Ubuntu's kernels have), not Debian 12's 6.1",
    "--host-iommu virtio: the lab host sits behind the outer QEMU's virtio-iommu, not its emulated VT-d, whose "
    "1024-entry IOTLB misses on every page once more than 1024 pages are in flight behind any vIOMMU "
    "(128k at iodepth 64) and would bury what the VMMs under test do (docs/lab.md)",
    "--ramp 2: each measured run goes 2 s unmeasured first, so IOPS and counts are the steady state's, "
    "not fio's first maps of its buffers",
    "iommu.reuse_window_ms=1000 on the patched lazy guests: a buffer comes back to the reuse cache after one "
    "trip through the queue, which the emulated NVMe makes 10-100 times slower than hardware, past the 10 ms "
    "default; 1000 ms is the most the guest accepts: the flush queue's own timeout, the longest a lazy domain "
    "may defer an unmap anyway (docs/lazy-unmap-contract.md)",
    "the baseline column (the first): Debian 13's own 6.12 kernel behind stock QEMU's emulated VT-d "
    "(intel-iommu, caching mode, interrupt remapping), what an x86 user runs today; the same kernel behind "
    "ours beside it (docs/distro-kernels.md)",
    "the headline row: ours with the patched lazy guest against that baseline and against the no-vIOMMU "
    "ceiling, round by round; p50/p99/p99.9 completion latency for every column in the latency table",
]
