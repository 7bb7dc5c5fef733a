"""What the by-order table of a run would show with no order effect at all.

The bench tool's by-order table (viommu-bench, report/sections/order.rs)
splits each column's ratio to the baseline, phase by phase, into the
rounds the column ran before the baseline on its lab host and the rounds
it ran after, and gives the gap between the halves. This module asks two
questions of a run's cells:

- how many rows a run with no order effect would put more than 10%
  apart: the same ratios with the before/after labels shuffled among the
  rounds (halves of the same sizes), many times over;
- how quiet the lab would have to be for no row to move 10% (95% of the
  time over the table, Bonferroni over its rows), and how many rounds
  that takes at the run's own noise.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics as st
import sys
from statistics import NormalDist

from .base import cell_key, timed_iops

# A row "moves" when its halves are more than this far apart (the by-order
# criterion's bound, docs/lab.md "Against no order at all").
BOUND = math.log(1.1)


def rows_of(doc: dict, baseline: str | None = None) -> tuple[str, list[tuple[str, str, list[float], list[bool]]]]:
    """The baseline column (BASELINE, else the report's first column) and
    one row per other column and timed phase: its per-round log ratio to
    the baseline and whether it ran first in that round. Rows with fewer
    than four rounds or an empty half are left out."""
    cells = [c for c in doc["cells"] if c.get("phases")]
    columns = list(dict.fromkeys(c["column"] for c in sorted(cells, key=lambda c: c["place"]["index"])))
    args = doc.get("report_args") or []
    if baseline is None and "--columns" in args:
        baseline = args[args.index("--columns") + 1].split(",")[0].split(":")[0]
    baseline = baseline or columns[0]
    if baseline not in columns:
        raise SystemExit(f"baseline {baseline!r} is not a column of this run: {', '.join(columns)}")
    by = {(c["column"], c["round"]): c for c in cells}
    rounds = sorted({c["round"] for c in cells})
    iops = {cell_key(c): timed_iops(c) for c in cells}
    phases = sorted({ph for t in iops.values() for ph in t})
    rows = []
    for col in (c for c in columns if c != baseline):
        for ph in phases:
            ratios, first = [], []
            for r in rounds:
                a, b = by.get((col, r)), by.get((baseline, r))
                if not a or not b or ph not in iops[col, r] or ph not in iops[baseline, r]:
                    continue
                ratios.append(math.log(iops[col, r][ph] / iops[baseline, r][ph]))
                first.append(a["place"]["index"] < b["place"]["index"])
            if len(ratios) >= 4 and 0 < sum(first) < len(first):
                rows.append((col, ph, ratios, first))
    return baseline, rows


def gap(ratios: list[float], first: list[bool]) -> float:
    """After over before, as the difference of the halves' mean logs."""
    before = [x for x, f in zip(ratios, first) if f]
    after = [x for x, f in zip(ratios, first) if not f]
    return st.mean(after) - st.mean(before)


def moved(rows, shuffle: random.Random | None = None) -> int:
    """How many ROWS have halves more than BOUND apart (with SHUFFLE: after
    shuffling each row's labels)."""
    n = 0
    for _, _, ratios, first in rows:
        labels = shuffle.sample(first, len(first)) if shuffle else first
        n += abs(gap(ratios, labels)) > BOUND
    return n


def summary(rows, draws: int = 2000, seed: int = 1) -> dict:
    """The observed count of moved rows, the no-order null's mean and 95%
    range, the ratio's sd per round (log, pooled over rows), the sd the
    bound needs and the rounds a half that would take at today's sd."""
    rng = random.Random(seed)
    null = sorted(moved(rows, rng) for _ in range(draws))
    sd = math.sqrt(st.mean(st.variance(r) for _, _, r, _ in rows))
    n_before = st.mean(sum(f) for *_, f in rows)
    n_after = st.mean(len(f) - sum(f) for *_, f in rows)
    z = NormalDist().inv_cdf(1 - 0.05 / len(rows) / 2)
    need = BOUND / z / math.sqrt(1 / n_before + 1 / n_after)
    return {"rows": len(rows), "moved": moved(rows), "null_mean": st.mean(null),
            "null_95": [null[int(0.025 * draws)], null[int(0.975 * draws) - 1]],
            "sd_log": sd, "halves": [n_before, n_after], "sd_needed": need,
            "rounds_a_half_needed": math.ceil(2 * (sd * z / BOUND) ** 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/lab/order-null", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="a lab run's results JSON or the bench tool's (with cells)")
    p.add_argument("--baseline", help="the column the others are taken over (default: the report's first column)")
    p.add_argument("--json", action="store_true", help="print each run's summary as JSON")
    a = p.parse_args(argv)
    for path in a.results:
        base, rows = rows_of(json.load(open(path)), a.baseline)
        if not rows:
            print(f"{path}: no row with two rounds in each half", file=sys.stderr)
            return 1
        s = summary(rows)
        if a.json:
            print(json.dumps({"results": path, "baseline": base, **s}))
            continue
        print(f"{path} (over {base}): {s['moved']} of {s['rows']} rows more than 10% apart; with no order "
              f"effect {s['null_mean']:.1f} [{s['null_95'][0]}, {s['null_95'][1]}]; the ratio's sd per round "
              f"{s['sd_log']:.3f} (log), halves of {s['halves'][0]:.1f} and {s['halves'][1]:.1f} rounds; no row "
              f"moving 10% needs an sd of {s['sd_needed']:.3f} ({s['sd_log'] / s['sd_needed']:.1f}x less) or "
              f"about {s['rounds_a_half_needed']} rounds a half")
    return 0
