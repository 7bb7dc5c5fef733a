"""How quiet the real machine was while a lab host ran: the CPU time that
went to anything but that lab host's outer QEMU (a build, another lab
run, the machine's own kernel threads) and the time the machine's own
hypervisor stole from it (the `steal` column of /proc/stat, nonzero when
the machine is itself a VM). Everything in the lab is emulated on two
CPUs, so either one slows the lab host's guests by as much as it takes:
a boot that ran beside it is flagged (judge.py) so its cells are read
with that in mind, and so is each guest phase (PhaseClock): this
machine's hypervisor steals in bursts of seconds, which land on single
phases."""

from __future__ import annotations

import os
import re
import resource
import time
from dataclasses import dataclass, field

# /proc/stat's clock ticks per second.
HZ = os.sysconf("SC_CLK_TCK")
# Above these a boot's record earns a warning: CPU taken by other work, in
# % of one CPU over the boot, and stolen time, in % of all CPUs' time.
# Sampled every 10 s through a quiet 68-minute lab run on our machine (a
# Firecracker VM with a DAMON pageout thread): others 1.0% on average
# (kernel threads, the runner's children); steal 1.9% on average, in
# bursts: 11 of 413 windows over 10%, the worst 25%.
OTHERS_WARN_PCT = 15.0
STEAL_WARN_PCT = 10.0


@dataclass(frozen=True)
class Snapshot:
    """The machine's CPU counters at one moment: /proc/stat's idle and
    stolen ticks over its CPUs, and this process's (and its waited-for
    children's) CPU seconds."""
    wall: float
    cpus: int
    idle_ticks: int
    steal_ticks: int
    own_cpu_s: float
    # With a PID: its threads' (run, run-queue wait) nanoseconds by kind
    # (outer_threads()).
    threads: dict = field(default_factory=dict)

    @staticmethod
    def take(stat_text: str | None = None, pid: int | None = None) -> "Snapshot":
        """Now (STAT_TEXT: /proc/stat's text, read if not given). Ours is
        this process's CPU and its waited-for children's, or with PID (a
        child still running: the outer QEMU) this process's and PID's."""
        if stat_text is None:
            with open("/proc/stat") as f:
                stat_text = f.read()
        cpus, idle, steal = cpu_ticks(stat_text)
        own = resource.getrusage(resource.RUSAGE_SELF)
        if pid is None:
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            theirs = kids.ru_utime + kids.ru_stime
        else:
            theirs = process_cpu_s(pid)
        return Snapshot(time.monotonic(), cpus, idle, steal, own.ru_utime + own.ru_stime + theirs,
                        outer_threads(pid) if pid is not None else {})


def outer_threads(pid: int, proc: str = "/proc") -> dict[str, tuple[int, int]]:
    """Process PID's threads' time running and waiting to run (their
    `schedstat`, nanoseconds), summed by kind: "main" (the thread that
    is the process: the outer QEMU's main loop, which serves the lab
    host's NVMe and IOMMU), "vcpus" (threads named "CPU ...", with
    -name ...,debug-threads=on), "other". A thread that ends between two
    snapshots takes its time with it; empty once the process is gone."""
    out: dict[str, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{proc}/{pid}/task/{tid}/schedstat") as f:
                run, wait = (int(x) for x in f.read().split()[:2])
            with open(f"{proc}/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except (OSError, ValueError):
            continue
        kind = "main" if tid == str(pid) else "vcpus" if comm.startswith("CPU") else "other"
        r, w = out.get(kind, (0, 0))
        out[kind] = (r + run, w + wait)
    return out


def process_cpu_s(pid: int) -> float:
    """Process PID's user and system CPU seconds so far (0 once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0.0
    # The fields after the command's closing parenthesis: utime and
    # stime are the 12th and 13th of them.
    rest = text[text.rfind(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / HZ


def cpu_ticks(stat_text: str) -> tuple[int, int, int]:
    """(CPUs, idle, steal) of /proc/stat: idle counts iowait too. Busy
    time is what is left of the wall clock: /proc/stat's busy columns are
    sampled at ticks and read 10-20% of a CPU below the outer QEMU's own
    CPU time on the machine we run on, while idle is kept exactly."""
    lines = stat_text.splitlines()
    line = next((ln for ln in lines if ln.startswith("cpu ")), None)
    if line is None:
        raise ValueError("/proc/stat has no 'cpu ' line")
    cpus = sum(1 for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit())
    v = [int(x) for x in line.split()[1:]] + [0] * 10
    idle, iowait, steal = v[3], v[4], v[7]
    return max(cpus, 1), idle + iowait, steal


def quiet_of(before: Snapshot, after: Snapshot) -> dict:
    """What the machine did between BEFORE and AFTER besides this process
    and the children it waited for (the lab host's outer QEMU): others'
    CPU in % of one CPU, stolen time in % of all CPU time."""
    wall = max(after.wall - before.wall, 1e-9)
    capacity_s = wall * after.cpus
    idle_s = (after.idle_ticks - before.idle_ticks) / HZ
    steal_s = (after.steal_ticks - before.steal_ticks) / HZ
    ours_s = after.own_cpu_s - before.own_cpu_s
    quiet = {
        "seconds": round(wall, 1),
        "others_cpu_pct": round(max(capacity_s - idle_s - steal_s - ours_s, 0.0) / wall * 100, 1),
        "steal_pct": round(steal_s / capacity_s * 100, 1),
    }
    # The outer QEMU's threads by kind, % of the window spent running and
    # waiting on the machine's run queue (a main loop that waits behind
    # busy TCG threads serves the lab host's drive late).
    kinds = before.threads.keys() & after.threads.keys()
    if kinds:
        quiet["outer_threads"] = {
            k: {"run_pct": round(max(after.threads[k][0] - before.threads[k][0], 0) / 1e7 / wall, 1),
                "wait_pct": round(max(after.threads[k][1] - before.threads[k][1], 0) / 1e7 / wall, 1)}
            for k in sorted(kinds)}
    return quiet


def loud(quiet: dict | None) -> str | None:
    """Why a boot's machine record QUIET says the machine was not quiet,
    or None."""
    if not quiet:
        return None
    why = []
    if quiet["others_cpu_pct"] > OTHERS_WARN_PCT:
        why.append(f"other work used {quiet['others_cpu_pct']:.0f}% of a CPU (over {OTHERS_WARN_PCT:.0f}%: a build or another lab run?)")
    if quiet["steal_pct"] > STEAL_WARN_PCT:
        why.append(f"the machine's hypervisor stole {quiet['steal_pct']:.0f}% of its CPU time (over {STEAL_WARN_PCT:.0f}%)")
    return "; ".join(why) or None


# The bench tool's progress line as a guest's phase starts:
# "[viommu-bench] cell 2/5 round 2 ours+strict: randread-4k (ETA 6m23s)".
PHASE_START = re.compile(r"\[viommu-bench\] cell \d+/\d+ round \S+ (?P<column>[^\s:]+): (?P<phase>[\w.+-]+)")


@dataclass
class PhaseClock:
    """How quiet the machine was during each guest phase of one lab host:
    a window from each phase's progress line to the next progress line or
    the guest's cell, measured as quiet_of() measures a boot, with the
    outer QEMU (PID) as ours, and its monotonic start and end (t0, t1)."""
    pid: int
    windows: dict[tuple[str, str], dict] = field(default_factory=dict)
    open_at: tuple[tuple[str, str], Snapshot] | None = None

    def line(self, text: str, new_cell: bool, snap=None) -> None:
        """One console line TEXT; NEW_CELL when it brought a guest's cell
        (which closes that guest's last phase). SNAP: the snapshot taker
        (tests)."""
        m = PHASE_START.search(text)
        if not (m or new_cell):
            return
        now = (snap or (lambda: Snapshot.take(pid=self.pid)))()
        if self.open_at is not None:
            key, before = self.open_at
            # t0/t1: the window's monotonic ends, to find its samples in
            # an outer QEMU profile (outer_profile.py)
            self.windows[key] = {**quiet_of(before, now), "t0": round(before.wall, 3), "t1": round(now.wall, 3)}
            self.open_at = None
        if m:
            self.open_at = ((m["column"], m["phase"]), now)

    def annotate(self, cells: list[dict]) -> None:
        """Give each cell's phases their window (`machine` in the phase)."""
        for c in cells:
            for name, ph in (c.get("phases") or {}).items():
                if isinstance(ph, dict) and (w := self.windows.get((c.get("column"), name))):
                    ph["machine"] = w


DAMON_ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"


def reclaim_schemes(admin: str = DAMON_ADMIN) -> list[str]:
    """The machine's running DAMON schemes, "ACTION on OPS" each (e.g.
    "pageout on paddr": the kernel reclaims what it sees idle, the lab's
    memory included; --outer-mem locked keeps the lab out of it). Empty
    where DAMON is absent, off, or unreadable."""
    found = []
    try:
        kdamonds = sorted(e for e in os.listdir(admin) if e.isdigit())
    except OSError:
        return found
    for kd in kdamonds:
        base = f"{admin}/{kd}"
        try:
            with open(f"{base}/state") as f:
                if f.read().strip() != "on":
                    continue
            for ctx in sorted(e for e in os.listdir(f"{base}/contexts") if e.isdigit()):
                with open(f"{base}/contexts/{ctx}/operations") as f:
                    ops = f.read().strip()
                schemes = f"{base}/contexts/{ctx}/schemes"
                for sch in sorted(e for e in os.listdir(schemes) if e.isdigit()):
                    with open(f"{schemes}/{sch}/action") as f:
                        found.append(f"{f.read().strip()} on {ops}")
        except OSError:
            continue
    return found
