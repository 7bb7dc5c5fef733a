"""Unit tests of the neighbours' likeness measure (no VM)."""

import random
import unittest

from labkit import neighbours

BS = ["4k", "128k"]
PHASES = ["randread-4k", "randread-128k", "randread-4k-j2", "randread-128k-j2"]


def run(factor):
    """Six lab hosts of nine guests of one column, every phase of guest i
    on host h at 1000 * FACTOR(h, i, phase index) IOPS."""
    cells = []
    for h in range(6):
        for i in range(9):
            phases = {ph: {"fio": {"read_iops": 1000 * factor(h, i, k)}} for k, ph in enumerate(PHASES)}
            # Stored sorted, as the bench tool's results are: not run order.
            cells.append({"column": "x", "round": h, "place": {"boot": f"host{h}", "index": i},
                          "phases": dict(sorted(phases.items()))})
    return {"cells": cells, "report_args": ["--bs", ",".join(BS), "--numjobs", "1,2"]}


class NeighboursTest(unittest.TestCase):
    def test_phases_are_taken_in_the_order_the_guest_ran_them(self):
        key = neighbours._run_order(run(lambda *_: 1))
        self.assertEqual(sorted(reversed(PHASES), key=key), PHASES)

    def test_a_slow_stretch_shows_above_the_shuffled_band(self):
        # The first half of every host's guests slow, the second fast.
        guests, _ = neighbours.sequences(run(lambda h, i, k: 0.7 if i < 5 else 1.3))
        s = neighbours.summary(guests, draws=300)
        self.assertGreater(s["r"], s["shuffled_95"][1])
        self.assertEqual(s["pairs"], 6 * 8)

    def test_independent_boots_sit_inside_it(self):
        rng = random.Random(7)
        f = {(h, i): rng.lognormvariate(0, 0.2) for h in range(6) for i in range(9)}
        guests, phases = neighbours.sequences(run(lambda h, i, k: f[h, i]))
        s = neighbours.summary(guests, draws=300)
        self.assertLessEqual(s["r"], s["shuffled_95"][1])
        self.assertGreaterEqual(s["r"], s["shuffled_95"][0])
        # Every phase of a guest alike: nothing left within a guest.
        self.assertTrue(all(abs(x) < 1e-12 for seq in phases for x in seq))

    def test_a_slow_phase_stretch_within_each_guest_shows(self):
        # Half the guests slow in their first two phases, half in their last two.
        def factor(h, i, k):
            return ([0.6, 0.6, 1.4, 1.4] if (h * 9 + i) % 2 else [1.4, 1.4, 0.6, 0.6])[k]
        _, phases = neighbours.sequences(run(factor))
        s = neighbours.summary(phases, draws=300)
        self.assertGreater(s["r"], s["shuffled_95"][1])
        # Two apart: one slow phase against one fast, in every guest.
        self.assertAlmostEqual(neighbours.lag_k(phases, 2), -1.0)
        self.assertTrue(neighbours.lag_k(phases, 4) != neighbours.lag_k(phases, 4))  # no pairs: NaN


if __name__ == "__main__":
    unittest.main()
