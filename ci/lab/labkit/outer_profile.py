"""Where the outer QEMU spends its CPU while each guest phase runs: a
developer's aid for the lab's per-boot noise (docs/lab.md, "How precise
the lab is").

With LAB_OUTER_PROFILE=DIR the runner samples the machine with `perf
record` (cpu-clock, 199 Hz on every CPU, monotonic timestamps) while
each lab host runs, into DIR, one file per lab host boot, and records
the file and the outer QEMU's PID in the boot's record and its cells'
(`outer_profile`). LAB_QEMU_ARGS="-name lab,debug-threads=on" names the
outer QEMU's threads ("CPU 0/TCG", "worker"), so that the samples tell
them apart. Each guest phase's `machine` window carries its
monotonic start and end (`t0`, `t1`), so `ci/lab/outer-profile RESULTS`
can split the samples by phase and set each guest's outer CPU per I/O,
by function and by thread, against its factor (how much slower than its
column's usual it ran): which of the outer emulator's work grows in a
slow boot.

Sampling costs every column the same (the whole machine, all the time);
perf's own CPU shows in the machine records' `others_cpu_pct` (1-6% of
a CPU in the committed runs). It is off unless asked for, and needs
perf (Debian: linux-perf).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import shutil
import signal
import statistics as st
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .base import phase_windows, timed_iops, usual_log_iops

RATE_HZ = 199


class OuterProfiler:
    """A `perf record` of one outer QEMU process, from its start to its end."""

    def __init__(self, pid: int, out: Path):
        self.pid = pid
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        # System-wide, the outer QEMU's samples picked out by its PID
        # afterwards: `perf record -p` missed the vCPU threads QEMU starts
        # after it attaches.
        self.proc = subprocess.Popen(
            ["perf", "record", "-q", "-a", "-F", str(RATE_HZ), "-e", "cpu-clock", "--clockid", "monotonic",
             "-o", str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @staticmethod
    def start(pid: int, out_dir: str, log_path: Path) -> "OuterProfiler | None":
        """Sample PID into OUT_DIR (named after the boot's LOG_PATH), or
        None, with a note, where perf is not installed."""
        if not shutil.which("perf"):
            print("[lab] LAB_OUTER_PROFILE: perf is not installed (apt-get install linux-perf); not profiling",
                  file=sys.stderr)
            return None
        return OuterProfiler(pid, Path(out_dir) / (log_path.stem + ".perf.data"))

    def stop(self) -> dict:
        """End the recording (perf writes its file on SIGINT); its file
        and the outer QEMU's PID in it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return {"data": str(self.out), "pid": self.pid}


def samples(data: str, pid: int) -> list[tuple[float, str, str]]:
    """(time, thread kind, function) of process PID's samples in perf
    file DATA (parse_script())."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,comm,ip,sym,dso", "--ns", "--pid", str(pid)],
                         capture_output=True, text=True, check=False).stdout
    return parse_script(out)


def parse_script(text: str) -> list[tuple[float, str, str]]:
    """(time, thread kind, function) of each sample in `perf script -F
    pid,time,comm,ip,sym,dso` output TEXT; the function is "[dso]" where
    perf found no symbol, and "[unknown]" in code with no file (the
    outer QEMU's translated blocks)."""
    found = []
    for line in text.splitlines():
        # "CPU 0/TCG 31619 12345.678901234:  55d0c0ffee helper_foo+0x1c (/path/qemu)":
        # the thread's name may hold spaces, the time ends the head
        head, sep, rest = line.partition(": ")
        parts = head.split()
        if not sep or len(parts) < 3:
            continue
        try:
            when = float(parts[-1])
        except ValueError:
            continue
        comm = " ".join(parts[:-2])
        rest = rest.strip().partition(" ")[2]  # past the address
        sym, _, dso = rest.rpartition(" (")
        sym = sym.split("+0x")[0].strip() or f"[{Path(dso.rstrip(')')).name}]"
        found.append((when, thread_kind(comm), sym))
    return found


def thread_kind(comm: str) -> str:
    """A thread's kind: "CPU 0/TCG" stays, QEMU's worker threads fold
    into one name."""
    if comm.startswith("CPU"):
        return comm
    if comm.startswith("worker"):
        return "worker"
    return comm or "?"


def guest_costs(doc: dict) -> list[dict]:
    """Per guest (cell with timed phases on a profiled lab host): its
    column, round, factor, and outer samples per 1000 I/Os over its timed
    phases, by function and by thread."""
    per_file: dict[str, tuple[list, list]] = {}  # each lab host's samples and their times, read once
    factors = guest_factors(doc)
    out = []
    for i, c in enumerate(doc["cells"]):
        prof = c.get("outer_profile")
        if not prof or i not in factors:
            continue
        if prof["data"] not in per_file:
            found = sorted(samples(prof["data"], prof["pid"]))
            per_file[prof["data"]] = (found, [s[0] for s in found])
        found, times = per_file[prof["data"]]
        by_fn: Counter = Counter()
        by_thread: Counter = Counter()
        ios = seconds = 0.0
        for _, iops, t0, t1 in phase_windows(c):
            ios += iops * (t1 - t0)
            seconds += t1 - t0
            for _, thread, fn in found[bisect.bisect_left(times, t0):bisect.bisect_left(times, t1)]:
                by_fn[fn] += 1
                by_thread[thread] += 1
        if ios:
            k = 1000 / ios
            out.append({"column": c["column"], "round": c["round"], "factor": factors[i],
                        "fn": {f: n * k for f, n in by_fn.items()},
                        "thread": {f: n * k for f, n in by_thread.items()},
                        "total": sum(by_fn.values()) * k,
                        # the outer QEMU's CPUs busy over the windows
                        "busy_cpus": sum(by_fn.values()) / seconds / RATE_HZ})
    return out


def guest_factors(doc: dict) -> dict[int, float]:
    """Each cell's factor (by its index): the mean over its timed phases
    of its log IOPS less its column's usual in that phase, exp'd."""
    cells = [(i, c, t) for i, c in enumerate(doc["cells"]) if (t := timed_iops(c))]
    usual = usual_log_iops([(c, t) for _, c, t in cells])
    return {i: math.exp(st.fmean(math.log(v) - usual[(c["column"], ph)] for ph, v in t.items())) for i, c, t in cells}


def report(rows: list[dict], top: int) -> str:
    """Per column: the correlation of each guest's outer samples per
    1000 I/Os with its factor, and the functions and threads whose cost
    per I/O differs most between its slower and faster half."""
    lines = []
    for col in sorted({r["column"] for r in rows}):
        rs = sorted((r for r in rows if r["column"] == col), key=lambda r: r["factor"])
        if len(rs) < 4:
            continue
        half = len(rs) // 2
        slow, fast = rs[:half], rs[-half:]
        r_total = corr([r["factor"] for r in rs], [r["total"] for r in rs])
        busy = [r["busy_cpus"] for r in rs if "busy_cpus" in r]
        lines.append(f"{col}: {len(rs)} guests, factors {rs[0]['factor']:.2f}-{rs[-1]['factor']:.2f}; "
                     f"outer samples per 1000 I/Os {st.fmean(r['total'] for r in slow):.1f} slow half, "
                     f"{st.fmean(r['total'] for r in fast):.1f} fast half (r with factor {r_total:+.2f})"
                     + (f"; the outer QEMU busy {min(busy):.2f}-{max(busy):.2f} CPUs" if busy else ""))
        for what in ("thread", "fn"):
            keys = {k for r in rs for k in r[what]}
            diff = []
            for k in keys:
                s = st.fmean(r[what].get(k, 0.0) for r in slow)
                f = st.fmean(r[what].get(k, 0.0) for r in fast)
                diff.append((s - f, k, s, f))
            diff.sort(reverse=True)
            gap = sum(d[0] for d in diff) or 1e-9
            lines.append(f"  by {what}: slow - fast, share of the gap, slow, fast (per 1000 I/Os), share of all slow, fast")
            s_all = st.fmean(r["total"] for r in slow) or 1e-9
            f_all = st.fmean(r["total"] for r in fast) or 1e-9
            for d, k, s, f in diff[:top]:
                lines.append(f"    {d:8.2f}  {d / gap * 100:5.1f}%  {s:8.2f} {f:8.2f}  {s / s_all * 100:5.1f}% {f / f_all * 100:5.1f}%  {k}")
    return "\n".join(lines)


def trimmed(row: dict, keep: float = 0.002) -> dict:
    """ROW with the functions under KEEP of its samples folded into
    "[other]": what is worth committing of a guest's profile."""
    fn = {k: v for k, v in row["fn"].items() if v >= keep * row["total"]}
    other = row["total"] - sum(fn.values())
    return {**row, "fn": {k: round(v, 3) for k, v in fn.items()} | ({"[other]": round(other, 3)} if other > 0 else {}),
            "thread": {k: round(v, 3) for k, v in row["thread"].items()}}


def corr(xs: list[float], ys: list[float]) -> float:
    """Pearson's r of XS and YS (0 where either is constant)."""
    try:
        return st.correlation(xs, ys)
    except st.StatisticsError:
        return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ci/lab/outer-profile",
                                 description="Which of the outer QEMU's work grows in a slow guest boot: each guest's "
                                             "outer CPU samples per I/O, by function and thread, slow half against fast "
                                             "half of its column. Needs a lab run made with LAB_OUTER_PROFILE=DIR.")
    ap.add_argument("results", help="a lab run's results JSON (its records, with cells' outer_profile), or the "
                                    "per-guest costs an earlier run wrote with --json (perf files are not kept)")
    ap.add_argument("--top", type=int, default=15, help="functions and threads to list per column (default 15)")
    ap.add_argument("--json", help="also write the per-guest costs here")
    a = ap.parse_args(argv)
    with open(a.results) as f:
        doc = json.load(f)
    rows = doc if isinstance(doc, list) else guest_costs(doc)
    if not rows:
        print(f"outer-profile: no profiled guest phases in {a.results} (was it run with LAB_OUTER_PROFILE=DIR?)",
              file=sys.stderr)
        return 1
    if a.json:
        Path(a.json).write_text(json.dumps([trimmed(r) for r in rows], indent=1))
    print(report(rows, a.top))
    return 0
