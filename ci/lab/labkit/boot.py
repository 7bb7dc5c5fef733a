"""One lab host boot: its drive, its kernel command line and outer QEMU,
and the watch over its console (progress, the wall-clock bound, a wedge,
a teardown that hangs), how quiet the machine was meanwhile; the
runner's signal handler that kills the lab hosts still running."""

from __future__ import annotations

import os
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

from .base import LabError
from .console import BENCH_LINE, HOST_STALL, MARK, TEARDOWN_GRACE, Collector
from .host import HOST_IOMMUS, OUTER_ICOUNT_TSC_KHZ, host_command, host_ram_mib, hugepages_at_boot, nvme_args, tsc_khz
from .knobs import host_knobs
from .machine import PhaseClock, Snapshot, quiet_of
from .outer_profile import OuterProfiler


def boot_host(args, sc: dict, k: dict, specs: list[str], round_no: int, image: dict, run_dir: Path, log_path: Path) -> Collector:
    """Boot one lab host, run the scenario's script for SPECS in round
    ROUND_NO, collect what it reports."""
    disk = fresh_drive(run_dir, k.get("nvme_image"))
    icount = outer_icount_of(k, round_no)
    cmdline = host_cmdline(k, host_knobs(sc, k, specs, round_no), icount)
    cmd = host_command(image, disk, cmdline, args.cpus, k["host_iommu"],
                       nvme_args(k["nvme_ioqpairs"], k["nvme_mdts"], k["nvme_lbs"], k["nvme_multipath"]),
                       outer_qemu_of(k, round_no), k["outer_tcg"], host_ram_mib(k.get("hugepages") == "1"),
                       k.get("nic", "none"), k.get("outer_mem", "plain"), icount)
    timeout = args.timeout or sc["timeout"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    col = Collector(len(specs))
    col.log = str(log_path)
    rounds = f" round {round_no}/{k['rounds']}" if k["rounds"] > 1 else ""
    print(f"[lab] {args.scenario}{rounds}: booting a lab host for {len(specs) or 'its'} guest(s) (bound {timeout} s); log {log_path}", file=sys.stderr)
    before = Snapshot.take()
    with open(log_path, "w") as log, subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        LIVE_HOSTS.add(proc)
        log.write("# " + shlex.join(cmd) + "\n")
        clock = PhaseClock(proc.pid)
        # LAB_OUTER_PROFILE_AB=1: profile B rounds only (ab_round()), to
        # see what the sampling itself costs
        profile = os.environ.get("LAB_OUTER_PROFILE") and (
            os.environ.get("LAB_OUTER_PROFILE_AB") != "1" or ab_round(round_no))
        profiler = OuterProfiler.start(proc.pid, os.environ["LAB_OUTER_PROFILE"], log_path) if profile else None
        try:
            watch(proc, col, log, timeout, verbose=args.verbose, demo=args.cmd == "demo", clock=clock)
            clock.annotate(col.cells)
            # The lab host powers itself off after @@LAB-DONE@@; bound that too.
            try:
                proc.wait(timeout=0 if col.teardown_hung or col.stalled or col.timed_out else 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            # perf outlives an interrupted run otherwise
            if profiler:
                col.outer_profile = profiler.stop()
        LIVE_HOSTS.discard(proc)
        col.finish(proc.returncode)
    if col.outer_profile:
        for c in col.cells:
            c["outer_profile"] = col.outer_profile
    col.machine = quiet_of(before, Snapshot.take())
    return col


def fresh_drive(run_dir: Path, image: str | None) -> Path:
    """The lab host's NVMe drive for one boot, in RUN_DIR: a fresh sparse
    1 GiB drive, or a sparse copy of IMAGE (a drive that holds something
    from the start, e.g. ci/lab/debian-vm's Debian 13 root), so that what
    a boot writes never reaches the cached image or the next boot."""
    disk = run_dir / "nvme.img"
    disk.unlink(missing_ok=True)
    if image:
        if subprocess.run(["cp", "--sparse=always", image, str(disk)]).returncode != 0:
            raise LabError(f"copying the NVMe's drive image {image} failed")
        return disk
    with open(disk, "wb") as f:
        f.truncate(1 << 30)
    return disk


def host_cmdline(k: dict, knobs: dict[str, str], icount: str = "") -> str:
    """The lab host's kernel command line: its console, its IOMMU's
    parameters, the huge pages it reserves (--hugepages), its transparent
    huge pages (--host-thp), its TSC's rate (the machine's, or ICOUNT's:
    outer_icount_of()), and the lab.NAME=VALUE knobs."""
    # loglevel=5: warnings and backtraces (a soft lockup's) reach the log.
    host_iommu = HOST_IOMMUS[k["host_iommu"]]
    cmdline = f"console=ttyS0 {host_iommu['cmdline']} loglevel=5 panic=-1 " + " ".join(f"lab.{n}={v}" for n, v in knobs.items())
    if k.get("hugepages") == "1":
        cmdline += f" hugepages={hugepages_at_boot()}"
    if k.get("host_thp"):
        cmdline += f" transparent_hugepage={k['host_thp']}"
    # The lab host's first TSC calibration is KVM's guest TSC rate (KVM is
    # built into our lab host kernels): give it the right one (host-init's
    # tsc_check() says why and checks it). Under icount it is the virtual
    # clock's, not the machine's.
    if icount:
        cmdline += f" tsc_early_khz={OUTER_ICOUNT_TSC_KHZ}"
    elif tsc_khz() and os.environ.get("LAB_TSC_EARLY_KHZ", "1") != "0":  # LAB_TSC_EARLY_KHZ=0: let it calibrate (A/B)
        cmdline += f" tsc_early_khz={tsc_khz()}"
    if os.environ.get("LAB_HOST_APPEND"):  # e.g. "tsc_early_khz=1800000" to try a lab host kernel parameter
        cmdline += " " + os.environ["LAB_HOST_APPEND"]
    if os.environ.get("LAB_HOST_APPEND_AB") and ab_round(int(knobs.get("round", "1"))):
        cmdline += " " + os.environ["LAB_HOST_APPEND_AB"]
    return cmdline


def outer_qemu_of(k: dict, round_no: int) -> str:
    """The outer QEMU binary of round ROUND_NO: the run's, or in a B round
    of an interleaved A/B of outer QEMUs (LAB_OUTER_QEMU_AB, resolved by
    run.qemus_of() into K's outer_qemu_ab_bin) the other one."""
    if k.get("outer_qemu_ab_bin") and ab_round(round_no):
        return k["outer_qemu_ab_bin"]
    return k.get("outer_qemu_bin", "qemu-system-x86_64")


def outer_icount_of(k: dict, round_no: int) -> str:
    """The outer QEMU's instruction counter shift in round ROUND_NO ("":
    the machine's clock): the run's (--outer-icount), or in a B round of
    an interleaved A/B of the lab's clock (LAB_OUTER_ICOUNT_AB=SHIFT,
    checked and resolved by run.qemus_of() into K's outer_icount_ab)
    that one."""
    if k.get("outer_icount_ab") and ab_round(round_no):
        return k["outer_icount_ab"]
    return str(k.get("outer_icount") or "")


def ab_round(round_no: int) -> bool:
    """Whether round ROUND_NO is a B round of an interleaved A/B of a lab
    host kernel parameter (LAB_HOST_APPEND_AB: the parameters B rounds
    add), of the outer QEMU (LAB_OUTER_QEMU_AB, outer_qemu_of()) or of its
    clock (LAB_OUTER_ICOUNT_AB, outer_icount_of()): rounds 3-4, 7-8, ... are B and 1-2, 5-6, ... A, so that each
    side gets both of the balanced order's directions (a round pair runs
    the columns forwards, then backwards) and the machine's drift through
    the run lands on both alike."""
    return (round_no - 1) // 2 % 2 == 1


def watch(proc: subprocess.Popen, col: Collector, log, timeout: int, verbose: bool, demo: bool,
          clock: PhaseClock | None = None) -> None:
    """Read the lab host's console into COL and LOG until the scenario is
    done, the console ends, or a bound is reached (TIMEOUT seconds in all,
    HOST_STALL without progress, TEARDOWN_GRACE after the last cell);
    echo its markers and the bench tool's lines (VERBOSE: every line; the
    demo: no cells); CLOCK times each guest phase's window."""
    start = time.monotonic()
    last = start
    buf = b""
    while True:
        now = time.monotonic()
        if now - start > timeout:
            col.timed_out = f"wall-clock bound of {timeout} s reached"
            break
        if now - last > HOST_STALL:
            col.stalled = f"no progress for {HOST_STALL} s (the lab host is wedged)"
            break
        if col.all_cells_in() and now - col.last_cell > TEARDOWN_GRACE:
            col.teardown_hung = True
            break
        ready, _, _ = select.select([proc.stdout], [], [], 5.0)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            log.write(line + "\n")
            cells = len(col.cells)
            if col.feed(line):
                last = time.monotonic()
            if clock is not None:
                clock.line(line, len(col.cells) > cells)
            echo(line, col, verbose, demo)
        log.flush()
        if col.done_rc is not None:
            break


def echo(line: str, col: Collector, verbose: bool, demo: bool) -> None:
    """Print a console line as the runner shows it: every line (VERBOSE),
    else markers (not cells, none in the demo) and the bench tool's lines
    outside a guest's dump."""
    if verbose:
        print(f"[lab] {line}", file=sys.stderr)
    elif MARK.search(line):
        if not demo and "@@LAB-CELL@@" not in line:
            print(f"[lab] {line}", file=sys.stderr)
    elif BENCH_LINE.search(line) and not col.in_guest_dump and "[viommu-bench] wrote " not in line:
        print(BENCH_LINE.search(line).group(0), file=sys.stderr)


# The lab hosts' QEMUs running now: killed when the runner is stopped
# (SIGTERM, SIGINT), which would otherwise leave one running beside the
# next run (seen: a stopped vcpu-kicks run's lab host kept going 13 min).
LIVE_HOSTS: set[subprocess.Popen] = set()


def stop_lab_hosts(signum, _frame) -> None:
    """Signal handler: kill the lab hosts, then exit as the signal would."""
    for p in list(LIVE_HOSTS):
        p.kill()
    sys.exit(128 + signum)
