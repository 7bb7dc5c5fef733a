"""The lab host's machine: the outer emulator (QEMU TCG, this machine's or
a Debian 13 root's), its emulated IOMMU and NVMe, the lab host's own
kernels, the TSC rate it is given, and the outer QEMU's command line."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from pathlib import Path

from .base import LAB_DIR, LabError

# The lab host's emulated IOMMU (--host-iommu): what the outer QEMU adds,
# the lab host's kernel (build-image.sh --host-kernel) and its command line.
# vtd is the default and the lab's first results used it;
# its IOTLB (1024 entries, emptied when full) misses on every page once more
# than 1024 pages are in flight behind a vIOMMU (docs/lab.md).
# The outer QEMU's virtio-iommu has no IOTLB (each DMA looks its mapping up
# in a tree), but its lab host needs a kernel of ours (Debian's have no
# CONFIG_VIRTIO_IOMMU) and, with no interrupt remapping on it, VFIO's and
# iommufd's allow_unsafe_interrupts (a lab, not a multi-tenant host;
# without iommufd's, binding the device to an iommufd fails with EPERM).
HOST_IOMMUS = {
    "vtd": {"device": "intel-iommu,intremap=on", "kernel": "debian", "cmdline": "intel_iommu=on"},
    "virtio": {"device": "virtio-iommu-pci", "kernel": "labhost", "cmdline": "vfio_iommu_type1.allow_unsafe_interrupts=1 iommufd.allow_unsafe_interrupts=1"},
}
# The lab host's own kernel behind --host-iommu virtio (--host-kernel): 6.12
# (iommufd and VFIO cdevs built in, what Fedora, RHEL and Ubuntu hosts have)
# or 6.1; both built by guest-patches/linux-X.Y/build.sh labhost, cached.
HOST_KERNELS = ["6.12", "6.1"]


# The lab host's RAM in MiB. Its guests have viommu-bench's default 1 GiB
# (the lab passes no --guest-memory), one at a time.
HOST_RAM_MIB = 4096
GUEST_RAM_MIB = 1024
# --hugepages: the lab host reserves one guest's RAM in 2 MiB pages at boot
# (hugepages=N on its command line, before anything fragments its memory),
# and HUGEPAGES_MARGIN pages more, so that a page the kernel has not yet
# given back when the next VMM maps its RAM does not fail that guest. The
# pool is out of the lab host's other use even while no guest runs; a
# guest's RAM took as much before, from the same RAM, while it ran. The
# lab host gets the margin's RAM on top (host_ram_mib()), so the rest of
# it has the room it had without huge pages.
HUGEPAGES_MARGIN = 64


def hugepages_at_boot(guest_mib: int = GUEST_RAM_MIB) -> int:
    """The 2 MiB pages the lab host reserves at boot for guests of GUEST_MIB."""
    return guest_mib // 2 + HUGEPAGES_MARGIN


def host_ram_mib(hugepages: bool) -> int:
    """The lab host's RAM in MiB (HUGEPAGES: with the pool's margin)."""
    return HOST_RAM_MIB + (2 * HUGEPAGES_MARGIN if hugepages else 0)


def nvme_device(ioqpairs: int = 0, mdts: int = -1, lbs: int = 0) -> str:
    """The lab host's emulated NVMe controller as a QEMU -device value.
    IOQPAIRS I/O queue pairs (0: QEMU's default, 64), maximum transfer
    2^MDTS pages (-1: QEMU's default, 7 = 512 KiB), logical block size LBS
    bytes (0: QEMU's default, 512)."""
    dev = "nvme,serial=lab0,drive=nv0"
    if ioqpairs:
        dev += f",max_ioqpairs={ioqpairs}"
    if mdts >= 0:
        dev += f",mdts={mdts}"
    if lbs:
        dev += f",logical_block_size={lbs},physical_block_size={lbs}"
    return dev


# The outer emulator (--outer-qemu): the QEMU that emulates the lab host.
# "7.2" is the build machine's own (Debian 12); the others run from a Debian
# 13 root that ci/lab/debian-root makes and caches.
OUTER_QEMUS = ["7.2", "10.0", "11.1"]
# The outer emulator's TCG threading (--outer-tcg): multi, one host thread
# per lab host vCPU (the default); single, every vCPU on one host thread
# in turn (half the CPU, no two vCPUs ever run at once: a way to ask
# whether a lab fault needs two emulated CPUs running concurrently; it
# does not help: 2-vCPU guests then hang in boot, spinning in their timer
# interrupt).
OUTER_TCG = ["multi", "single"]
# The outer emulator's clock (--outer-icount SHIFT): without it the lab
# host's clocks (TSC, timers) are the machine's, so a guest's IOPS is the
# machine's CPU over what TCG spends per I/O, and that price moves from boot
# to boot and hour to hour (docs/lab.md, "Spread"). With it QEMU's
# instruction counting (-icount shift=SHIFT,sleep=on) drives the lab host's
# clocks: each emulated instruction advances them 2^SHIFT ns, whatever the
# machine's speed, and time the lab host spends idle (halted, waiting for
# the emulated NVMe) passes at the machine's rate. A phase's IOPS then
# counts the instructions its I/O costs the lab host and its guest (the
# VMM's, KVM's, the guest's, exits included) rather than TCG's price for
# them. Icount needs single-threaded TCG (the lab host's vCPUs in turn on
# one host thread: a one-core host in time, see docs/lab.md; 2-vCPU guests
# boot under it, unlike under --outer-tcg single alone), and its TSC runs
# at 1 GHz (the virtual clock in ns). Tested: a lab host's, a guest's and a
# phase's noise 2%, 2%, 3% against 7-26% on the machine's clock
# (benches/results/current/icount-polling-6rounds-2026-12-04/).
OUTER_ICOUNT_TSC_KHZ = 1_000_000


def icount_shift_problem(value: str) -> str | None:
    """Why VALUE is no instruction counter shift QEMU takes (a whole
    number 0-10), or None when it is one."""
    if value.isdigit() and int(value) <= 10:
        return None
    return f"{value!r}: the shift is a whole number 0-10 (each instruction 2^SHIFT ns; 3 runs the lab at about its usual pace)"

# The lab host's transparent huge pages (--host-thp: its kernel's
# transparent_hugepage=; without the flag the kernel's own: madvise on our
# 6.12 lab host, always on Debian's 6.1 cloud kernel). Both VMMs madvise
# their guest RAM for them. Tested as a source of a guest's own noise (a
# guest page behind a 2 MiB nested page is a large page to TCG's
# software TLB, whose invalidation flushes it whole): under madvise every
# guest got 100% of its resident RAM in huge pages, under never 0%, and
# neither run was quieter or consistently faster
# (benches/results/current/host-thp-ab-2026-12-03/).
HOST_THP = ["always", "madvise", "never"]
# What the machine under the lab may do to the lab's memory (--outer-mem).
# "plain" (the default): the outer QEMU's RAM and the drive's page cache
# are ordinary memory. This machine runs a DAMON pageout scheme (paddr,
# pageout of what it saw idle for a minute); with no swap it cannot take
# anonymous memory (no huge page of the outer QEMU was split: thp_split_page
# 0), but it evicts file pages, the drive image's cached blocks among them,
# which the next read fetches from disk. "locked": the outer QEMU locks its
# memory as it faults it in (-overcommit mem-lock=on-fault: huge pages
# still form on the first fault) and the run's directory, the drive image
# with it, lives in tmpfs (/dev/shm: without swap, never evicted). Tested
# as a source of the lab's noise: not quieter (a guest's own 26%, a phase's
# 22% against the plain run's 13% and 20% the same day), so not the default
# (benches/results/current/outer-mem-locked-6rounds-2026-12-03/).
OUTER_MEMS = ["plain", "locked"]
# Where --outer-mem locked keeps its runs' directories.
TMPFS_RUNS = Path("/dev/shm/viommu-lab-runs")
# The lab host's NIC (--nic, a scenario's "nic"): none, or QEMU's emulated
# igb (an 82576 with SR-IOV; QEMU 8.0 and later, so not the build
# machine's 7.2): the lab host drives its PF (igb, built into our 6.12 lab
# host kernel) and hands a VF (igbvf) to a VM. The PF and its VFs talk
# through the NIC's internal switch, so it has no backend: nothing leaves
# the lab. On the root bus at slot 8: its VFs come at devfn 0xc0 and up
# (SR-IOV offset 0x80, stride 2), each in an IOMMU group of its own.
NICS = {"none": [], "igb": ["-device", "igb,addr=0x8,mac=52:54:00:1a:b0:01"]}
# The outer emulators that have an igb.
IGB_OUTER_QEMUS = ["10.0", "11.1", "10.0-fixed", "11.1-fixed"]
# Those of them a Debian 13 root holds (ci/lab/debian-root).
SUITE_QEMUS = ["10.0", "11.1"]
# Outer emulators only (--outer-qemu VERSION-fixed): Debian 13's QEMU
# VERSION built from Debian's source package with the patches in
# ci/lab/outer-qemu/patches (the TCG race that crashes lab hosts; docs/lab.md,
# "Lab host crashes"), run with that root's libraries and firmware. Built
# once and cached (about 10 minutes; ci/prebuild-kernels.sh builds it
# ahead in CI). 11.1-fixed needs Debian's mirror to serve trixie-backports'
# qemu source.
FIXED_OUTER_QEMUS = [f"{v}-fixed" for v in SUITE_QEMUS]
# The lab host's emulator unless a scenario or --outer-qemu says otherwise.
DEFAULT_OUTER_QEMU = "10.0-fixed"


@functools.lru_cache(maxsize=None)
def outer_qemu(version: str) -> str:
    """The binary of QEMU VERSION (building its Debian 13 root once), for
    the outer emulator and for the lab host's stock VMM alike: asked once
    per version and run (ci/lab/debian-root reads Debian's index)."""
    if version == "7.2":
        return "qemu-system-x86_64"
    if version in FIXED_OUTER_QEMUS:
        return fixed_outer_qemu(version.removesuffix("-fixed"))
    return debian_root("--qemu", version)


def fixed_outer_qemu(version: str) -> str:
    """The wrapper of QEMU VERSION with our patches that
    ci/lab/outer-qemu/build prints last (building it once: about 10 min)."""
    cmd = [str(LAB_DIR / "outer-qemu" / "build"), "--qemu", version]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise LabError(f"building the patched outer QEMU failed ({' '.join(cmd[1:])})")
    return out.stdout.strip().splitlines()[-1]


def debian_root(*args: str) -> str:
    """The QEMU wrapper ci/lab/debian-root ARGS prints last (making and
    caching the root it belongs to)."""
    cmd = [str(LAB_DIR / "debian-root"), *args]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise LabError(f"making the Debian 13 root failed (ci/lab/debian-root {' '.join(args)})")
    return out.stdout.strip().splitlines()[-1]


@functools.lru_cache(maxsize=None)
def userland_root(version: str, packages: tuple[str, ...]) -> str:
    """The QEMU wrapper of a Debian 13 root with QEMU VERSION and PACKAGES
    (ci/lab/debian-root --with, built once and cached): the userland a
    scenario chroots into (build-image.sh --userland)."""
    return debian_root("--qemu", version, "--with", ",".join(packages))


def outer_version(binary: str) -> str:
    """What BINARY says of itself (recorded in the results)."""
    out = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "unknown"


def nvme_args(ioqpairs: int = 0, mdts: int = -1, lbs: int = 0, multipath: bool = False) -> list[str]:
    """The QEMU arguments of the lab host's NVMe, on the drive nv0: one
    controller (nvme_device()), or with MULTIPATH a dual-port drive as
    QEMU 7.2 emulates one: an NVMe subsystem (nvme-subsys) with two
    controllers (two PCI functions, each in an IOMMU group of its own),
    both serving namespace 1 (nvme-ns shared=on), so that the lab host's
    kernel (native multipath, CONFIG_NVME_MULTIPATH=y) shows it as the
    subsystem's nvmeXnY with one path device nvmeXcYnZ per controller.
    IOQPAIRS, MDTS as nvme_device() for each controller, LBS on the
    namespace."""
    if not multipath:
        return ["-device", nvme_device(ioqpairs, mdts, lbs)]
    ctrl = "nvme,serial=lab0,subsys=subsys0"
    if ioqpairs:
        ctrl += f",max_ioqpairs={ioqpairs}"
    if mdts >= 0:
        ctrl += f",mdts={mdts}"
    ns = "nvme-ns,drive=nv0,nsid=1,shared=on"
    if lbs:
        ns += f",logical_block_size={lbs},physical_block_size={lbs}"
    return ["-device", "nvme-subsys,id=subsys0,nqn=lab-subsys0",
            "-device", f"{ctrl},id=nvme-port0", "-device", f"{ctrl},id=nvme-port1",
            "-device", ns]


def tsc_khz_of(kernel_log: str) -> int | None:
    """The TSC rate in kHz a kernel log gives: its refined calibration,
    else its first ("Detected N MHz TSC", else "... processor")."""
    for pattern in (r"Refined TSC clocksource calibration: ([0-9.]+) MHz", r"tsc: Detected ([0-9.]+) MHz TSC",
                    r"tsc: Detected ([0-9.]+) MHz processor"):
        m = re.search(pattern, kernel_log)
        if m:
            return round(float(m.group(1)) * 1000)
    return None


@functools.lru_cache(maxsize=None)
def tsc_khz() -> int | None:
    """This machine's TSC rate in kHz: a TCG guest's TSC runs at it (QEMU's
    TCG reads the host's TSC). None where the kernel log is unreadable or
    has rotated past its boot (then the lab host calibrates on its own and
    host-init's check catches a bad calibration)."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return tsc_khz_of(out)


def host_command(image: dict[str, str], disk: Path, cmdline: str, cpus: int, host_iommu: str = "vtd", nvme: list[str] | None = None,
                 qemu: str = "qemu-system-x86_64", tcg_thread: str = "multi", ram_mib: int = HOST_RAM_MIB,
                 nic: str = "none", outer_mem: str = "plain", icount: str = "") -> list[str]:
    """The QEMU TCG command line of the lab host (L2); NVME the arguments
    of its drive's controller(s) (nvme_args()); QEMU the outer emulator's
    binary (outer_qemu()); TCG_THREAD its TCG threading (OUTER_TCG);
    RAM_MIB its RAM (host_ram_mib()); NIC its network card (NICS);
    OUTER_MEM what the machine may reclaim of it (OUTER_MEMS); ICOUNT
    the instruction counter's shift ("": the machine's clock; see
    OUTER_ICOUNT_TSC_KHZ), which forces single-threaded TCG;
    $LAB_QEMU_ARGS adds flags (e.g. "-trace dma_map_wait -D
    /tmp/l1.trace" to look inside the emulated NVMe and VT-d)."""
    return [
        qemu,
        "-accel", f"tcg,thread={'single' if icount else tcg_thread}", "-M", "q35", "-cpu", "max",
        *(["-icount", f"shift={icount},sleep=on"] if icount else []),
        "-smp", str(cpus), "-m", str(ram_mib),
        "-nodefaults", "-display", "none", "-monitor", "none", "-serial", "stdio",
        "-no-reboot", "-net", "none",
        *(["-overcommit", "mem-lock=on-fault"] if outer_mem == "locked" else []),
        "-device", HOST_IOMMUS[host_iommu]["device"],
        "-drive", f"file={disk},if=none,id=nv0,format=raw,cache=unsafe",
        *(nvme or nvme_args()),
        *NICS[nic],
        "-kernel", image["HOST_KERNEL"], "-initrd", image["HOST_INITRD"],
        "-append", cmdline,
    ] + shlex.split(os.environ.get("LAB_QEMU_ARGS", ""))



