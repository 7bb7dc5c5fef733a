"""Is a run's noise a slow stretch of time, or a state of one guest boot?

The bench tool's report splits a run's noise into a guest's own part
(one boot slower than its column's usual in all its phases) and a
phase's. Either could be a *stretch* of slow time on the lab host,
which neighbours in time share, or a *state* each boot or phase draws
afresh. The two call for different cures: a slow stretch cancels when
the columns are interleaved more finely (two guests alive at once,
alternating phases), a per-boot state does not.

This module measures how alike neighbours are:

- guests: each guest's factor (its timed phases' mean log IOPS over its
  column's usual) less its lab host's mean, in boot order on the host;
- phases: each timed phase's log IOPS over its column's usual, less its
  guest's factor, in the order the guest ran them (jobs, then block
  sizes, as the bench tool plans them);

and gives the lag-1 correlation of each sequence against the same with
the order shuffled within each host or guest (removing a mean makes
neighbours look unalike by itself, so the shuffled band, not 0, is the
mark). Above the band: neighbours share a slow stretch.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics as st
import sys

from .base import timed_iops, usual_log_iops


def _run_order(doc: dict):
    """A sort key for a run's timed phase names in the order the guest
    runs them: numjobs (`-jN`, else 1) then the `--bs` list's order."""
    args = doc.get("report_args") or doc.get("command") or []
    bs = args[args.index("--bs") + 1].split(",") if "--bs" in args else []

    def key(name: str):
        rest, _, jobs = name.rpartition("-j")
        if not jobs.isdigit():
            rest, jobs = name, "1"
        label = rest.split("-", 1)[-1]
        return int(jobs), bs.index(label) if label in bs else len(bs), name
    return key


def sequences(doc: dict) -> tuple[list[list[float]], list[list[float]]]:
    """The guests' sequences (one per lab host with 3 or more guests) and
    the phases' (one per guest with 3 or more timed phases), centred."""
    # Each placed cell with its timed phases, read once.
    cells = [(c, t) for c in doc["cells"] if c.get("place") and (t := timed_iops(c))]
    usual = usual_log_iops(cells)
    order = _run_order(doc)
    hosts: dict[str, list[tuple[dict, dict]]] = {}
    for c, t in cells:
        hosts.setdefault(c["place"]["boot"], []).append((c, t))
    guests, phases = [], []
    for cs in hosts.values():
        factors = []
        for c, t in sorted(cs, key=lambda ct: ct[0]["place"]["index"]):
            r = [math.log(t[ph]) - usual[c["column"], ph] for ph in sorted(t, key=order)]
            factors.append(st.mean(r))
            if len(r) >= 3:
                phases.append([x - factors[-1] for x in r])
        if len(factors) >= 3:
            guests.append([x - st.mean(factors) for x in factors])
    return guests, phases


def lag_k(seqs: list[list[float]], k: int, rng: random.Random | None = None) -> float:
    """The correlation of every pair K apart in SEQS (with RNG: each
    sequence shuffled first); NaN without two pairs or without spread."""
    pairs = []
    for s in seqs:
        s = rng.sample(s, len(s)) if rng else s
        pairs += zip(s, s[k:])
    if len(pairs) < 2:
        return math.nan
    try:
        return st.correlation(*zip(*pairs))
    except st.StatisticsError:
        return math.nan


def summary(seqs: list[list[float]], draws: int = 1000, seed: int = 1) -> dict:
    """The observed lag-1 correlation, the shuffled 95% band, the pairs."""
    rng = random.Random(seed)
    null = sorted(x for x in (lag_k(seqs, 1, rng) for _ in range(draws)) if not math.isnan(x))
    band = [null[int(0.025 * len(null))], null[int(0.975 * len(null)) - 1]] if null else [math.nan, math.nan]
    return {"r": lag_k(seqs, 1), "shuffled_95": band, "pairs": sum(max(len(s) - 1, 0) for s in seqs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/lab/neighbours", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="a lab run's results JSON or the bench tool's (with cells)")
    p.add_argument("--json", action="store_true", help="print each run's summary as JSON")
    p.add_argument("--lags", action="store_true",
                   help="also the phases' correlation at every distance in run order (1 = neighbours); "
                        "removing a guest's mean alone gives about -1/(phases-1) at each")
    a = p.parse_args(argv)
    for path in a.results:
        guests, phases = sequences(json.load(open(path)))
        g, ph = summary(guests), summary(phases)
        longest = max((len(x) for x in phases), default=0)
        lags = {k: lag_k(phases, k) for k in range(1, longest)} if a.lags else {}
        if a.json:
            print(json.dumps({"results": path, "guests": g, "phases": ph, "phase_lags": lags}))
            continue
        words = []
        for name, s in (("guests on one lab host", g), ("phases of one guest", ph)):
            lo, hi = s["shuffled_95"]
            if math.isnan(s["r"]):
                verdict = "too few guests or no spread"
            elif s["r"] <= hi:
                verdict = "no more alike than shuffled"
            else:
                verdict = "more alike than shuffled: a slow stretch"
            words.append(f"{name}: lag-1 r {s['r']:+.2f} over {s['pairs']} pairs, shuffled "
                         f"[{lo:+.2f}, {hi:+.2f}]: {verdict}")
        print(f"{path}: " + "; ".join(words))
        if lags:
            print("  phases k apart in run order: " + ", ".join(f"{k}: {r:+.2f}" for k, r in lags.items()))
    return 0
