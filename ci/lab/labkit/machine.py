"""How quiet the real machine was while a lab host ran: the CPU time that
went to anything but that lab host's outer QEMU (a build, another lab
run, the machine's own kernel threads) and the time the machine's own
hypervisor stole from it (the `steal` column of /proc/stat, nonzero when
the machine is itself a VM). Everything in the lab is emulated on two
CPUs, so either one slows the lab host's guests by as much as it takes:
a boot that ran beside it is flagged (judge.py) so its cells are read
with that in mind."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

# /proc/stat's clock ticks per second.
HZ = os.sysconf("SC_CLK_TCK")
# Above these a boot's record earns a warning: CPU taken by other work, in
# % of one CPU over the boot, and stolen time, in % of all CPUs' time.
# Sampled every 10 s through a quiet lab run on 2026-12-03 (a Firecracker
# VM with a DAMON pageout thread): others 1-8% (kernel threads, the
# runner's children), steal 0.1-3%.
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

    @staticmethod
    def take(stat_text: str | None = None) -> "Snapshot":
        """Now (STAT_TEXT: /proc/stat's text, read if not given)."""
        if stat_text is None:
            with open("/proc/stat") as f:
                stat_text = f.read()
        cpus, idle, steal = cpu_ticks(stat_text)
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return Snapshot(time.monotonic(), cpus, idle, steal,
                        own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime)


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
    return {
        "seconds": round(wall, 1),
        "others_cpu_pct": round(max(capacity_s - idle_s - steal_s - ours_s, 0.0) / wall * 100, 1),
        "steal_pct": round(steal_s / capacity_s * 100, 1),
    }


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
