"""Set a machine gauge beside a lab run's timed phases
(ci/lab/probe-vs-phase --help): did the phases that ran slow for their
column run while the machine under the lab was slow?

The gauge is ci/lab/helpers/speed-probe.c (its cpu or mem gauge) run on
the machine beside the lab run: each line the CLOCK_MONOTONIC second a
sample began, the sample's CPU time and its wall time. Every timed
phase's `machine` window carries its monotonic ends (t0, t1), so the
samples that began inside a window are that phase's. A phase's factor
is its log IOPS less its column's usual (base.usual_log_iops); the
report gives Pearson's r between the factors and the log of each
phase's mean sample, over every phase and per phase name. A gauge that
explains the lab's noise reads r near -1 (a slow machine, a slow
phase); the gauge's own range says how much the machine moved."""

from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics as st
import sys

from .base import phase_windows, timed_iops, usual_log_iops


def read_probe(lines) -> list[tuple[float, float, float]]:
    """The probe's samples (start, CPU, wall), sorted by start; lines that
    are not three numbers (a probe killed mid-line) are left out."""
    out = []
    for ln in lines:
        try:
            t, cpu, wall = (float(x) for x in ln.split())
        except ValueError:
            continue
        out.append((t, cpu, wall))
    return sorted(out)


def phase_gauges(doc: dict, samples: list[tuple[float, float, float]], wall: bool = False) -> tuple[list[dict], int]:
    """Each timed phase with samples in its window: column, round, phase,
    factor and gauge (the mean of its samples' CPU time, or wall time with
    WALL) and how many samples; and how many timed phases had none (no
    window, or the probe not running then)."""
    starts = [s[0] for s in samples]
    pairs = [(c, timed_iops(c)) for c in doc.get("cells", [])]
    usual = usual_log_iops(pairs)
    rows, missed = [], 0
    for c, iops in pairs:
        windows = phase_windows(c)
        missed += len(iops) - len(windows)
        for name, v, t0, t1 in windows:
            inside = samples[bisect.bisect_left(starts, t0):bisect.bisect_right(starts, t1)]
            if not inside:
                missed += 1
                continue
            rows.append({"column": c["column"], "round": c["round"], "phase": name,
                         "factor": math.log(v) - usual[(c["column"], name)],
                         "gauge": st.fmean(s[2] if wall else s[1] for s in inside), "samples": len(inside)})
    return rows, missed


def correlate(rows: list[dict]) -> dict[str, dict]:
    """Pearson's r between factor and log gauge over ROWS, "all" and per
    phase name: {"r": r or None (under 3 phases, or no spread), "n": n}."""
    groups: dict[str, list[dict]] = {"all": rows}
    for r in rows:
        groups.setdefault(r["phase"], []).append(r)
    out = {}
    for name, g in groups.items():
        xs, ys = [math.log(r["gauge"]) for r in g], [r["factor"] for r in g]
        try:
            r = st.correlation(xs, ys) if len(g) >= 3 else None
        except st.StatisticsError:
            r = None
        out[name] = {"r": r, "n": len(g)}
    return out


def report(rows: list[dict], missed: int, wall: bool) -> str:
    """The correlations and the gauge's range, as text."""
    if not rows:
        return (f"no timed phase had a probe sample in its window ({missed} without); was the probe running on "
                "this machine during the run, and does the results file have phase windows (t0, t1)?")
    gauges = [r["gauge"] for r in rows]
    lines = [f"{len(rows)} timed phases with probe samples ({missed} without); gauge ({'wall' if wall else 'CPU'} time) "
             f"{min(gauges):.1f}-{max(gauges):.1f}, {max(gauges) / min(gauges):.2f}x; "
             "r between a phase's factor (log IOPS over its column's usual) and its log gauge:"]
    for name, c in sorted(correlate(rows).items(), key=lambda kv: kv[0] != "all"):
        r = "n/a" if c["r"] is None else f"{c['r']:+.2f}"
        lines.append(f"  {name}: r {r} over {c['n']} phases")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="probe-vs-phase", description=__doc__.split("\n\n")[0])
    p.add_argument("probe", help="the speed probe's output over the run (ci/lab/helpers/speed-probe.c, cpu or mem)")
    p.add_argument("results", help="the lab run's results JSON (ci/lab/lab run ... --results)")
    p.add_argument("--wall", action="store_true", help="use the samples' wall time instead of their CPU time "
                   "(wall time also counts the probe's waits for a CPU on a busy machine)")
    p.add_argument("--json", action="store_true", help="print each phase's factor and gauge as JSON")
    a = p.parse_args(argv)
    try:
        with open(a.probe) as f:
            samples = read_probe(f)
        with open(a.results) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"probe-vs-phase: {e}", file=sys.stderr)
        return 2
    rows, missed = phase_gauges(doc, samples, a.wall)
    print(json.dumps(rows, indent=1) if a.json else report(rows, missed, a.wall))
    return 0 if rows else 1
