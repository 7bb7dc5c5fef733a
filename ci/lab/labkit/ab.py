"""Split an interleaved A/B lab run (LAB_HOST_APPEND_AB, LAB_OUTER_QEMU_AB
or LAB_OUTER_ICOUNT_AB: boot.ab_round() says which rounds are B) into one
results JSON per side, each a run of its own to the bench tool's report,
and compare the sides column by column and phase by phase: B's IOPS
over A's (geometric means) with Welch's 95% interval on the log IOPS,
and each side's spread."""

from __future__ import annotations

import argparse
import json
import math
import statistics as st
import sys
from pathlib import Path

from .base import timed_iops
from .boot import ab_round

# Student's t at 0.975 by degrees of freedom (at most that many); Welch's
# df is rarely whole, so the next lower row: a slightly wider interval.
T975 = [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306),
        (9, 2.262), (10, 2.228), (12, 2.179), (15, 2.131), (20, 2.086), (30, 2.042), (60, 2.000)]


def t975(df: float) -> float:
    """Student's t quantile 0.975 for DF degrees of freedom (rounded down)."""
    t = T975[0][1]
    for k, v in T975:
        if df >= k:
            t = v
    return t if df < 120 else 1.96


def split(doc: dict) -> dict[str, dict]:
    """DOC's cells by side ("a", "b"), each a results JSON of its own with
    its rounds renumbered from 0 and its round count in `rounds`."""
    sides = {}
    for side in ("a", "b"):
        cells = [c for c in doc["cells"] if ab_round(c["round"] + 1) == (side == "b")]
        rounds = sorted({c["round"] for c in cells})
        new = {r: i for i, r in enumerate(rounds)}
        args = list(doc.get("report_args", []))
        if "--rounds" in args:
            args[args.index("--rounds") + 1] = str(len(rounds))
        sides[side] = {**doc, "cells": [{**c, "round": new[c["round"]]} for c in cells],
                       "rounds": len(rounds), "ab_rounds": [r + 1 for r in rounds], "report_args": args}
    return sides


def compare(sides: dict[str, dict]) -> list[dict]:
    """B over A per column and timed phase (randread* phases with fio
    results): ratio of geometric means, Welch's 95% interval, the number
    of guests and the sd of log IOPS on each side."""
    logs: dict[tuple[str, str], dict[str, list[float]]] = {}
    for side, doc in sides.items():
        for c in doc["cells"]:
            for name, iops in timed_iops(c).items():
                logs.setdefault((c["column"], name), {"a": [], "b": []})[side].append(math.log(iops))
    rows = []
    for (col, name), v in sorted(logs.items()):
        a, b = v["a"], v["b"]
        if len(a) < 2 or len(b) < 2:
            continue
        va, vb = st.variance(a) / len(a), st.variance(b) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se else 1
        d = st.mean(b) - st.mean(a)
        rows.append({"column": col, "phase": name, "b_over_a": math.exp(d), "low": math.exp(d - t975(df) * se),
                     "high": math.exp(d + t975(df) * se), "n": (len(a), len(b)), "sd": (st.stdev(a), st.stdev(b))})
    return rows


def main(argv: list[str] | None = None) -> int:
    """ci/lab/ab-split LAB.json OUTDIR."""
    p = argparse.ArgumentParser(prog="ci/lab/ab-split", description=__doc__)
    p.add_argument("results", help="a lab run's results JSON (ci/lab/lab run ... --results), run with LAB_HOST_APPEND_AB, LAB_OUTER_QEMU_AB or LAB_OUTER_ICOUNT_AB")
    p.add_argument("out", help="directory for a-lab.json and b-lab.json (each a results JSON for ci/lab/lab table)")
    args = p.parse_args(argv)
    doc = json.loads(Path(args.results).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sides = split(doc)
    for side, d in sides.items():
        (out / f"{side}-lab.json").write_text(json.dumps(d))
        print(f"{side}: rounds {d['ab_rounds']}, {len(d['cells'])} guests -> {out / f'{side}-lab.json'}")
    print("| column | phase | B / A [95%] | guests A, B | sd of log IOPS A, B |\n|---|---|---|---|---|")
    for r in compare(sides):
        print(f"| {r['column']} | {r['phase']} | {r['b_over_a']:.2f} [{r['low']:.2f}, {r['high']:.2f}] | "
              f"{r['n'][0]}, {r['n'][1]} | {r['sd'][0]:.2f}, {r['sd'][1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
