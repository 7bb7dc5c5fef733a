"""Unit tests of the by-order table's no-order null (no VM)."""

import math
import unittest

from labkit import order_null


def cell(column, round0, place, iops):
    return {"column": column, "round": round0, "place": {"index": place},
            "phases": {"randread-4k": {"fio": {"read_iops": iops}}, "verify-4k": {}}}


def run(x_iops, x_first):
    """Rounds of a baseline at 100 IOPS and a column x at X_IOPS, x first where X_FIRST."""
    cells = []
    for r, (v, first) in enumerate(zip(x_iops, x_first)):
        cells += [cell("base", r, 1 if first else 0, 100), cell("x", r, 0 if first else 1, v)]
    return {"cells": cells, "report_args": ["--columns", "base:qemu:viommu:baseline,x:vmm:viommu:baseline"]}


class OrderNullTest(unittest.TestCase):
    FIRST = [True, False, True, False, True, False]

    def test_rows_are_log_ratios_to_the_reports_first_column(self):
        base, rows = order_null.rows_of(run([200] * 6, self.FIRST))
        self.assertEqual(base, "base")
        ((col, phase, ratios, first),) = rows
        self.assertEqual((col, phase, first), ("x", "randread-4k", self.FIRST))
        self.assertTrue(all(abs(r - math.log(2)) < 1e-12 for r in ratios))

    def test_a_planted_order_effect_moves_its_row_and_shuffling_mostly_hides_it(self):
        # Eight rounds, x twice as fast whenever it ran second: a shuffle
        # balances the fast rounds over the halves about half the time.
        _, rows = order_null.rows_of(run([100, 200, 101, 199] * 2, self.FIRST + [True, False]))
        self.assertEqual(order_null.moved(rows), 1)
        s = order_null.summary(rows, draws=400)
        self.assertEqual(s["moved"], 1)
        self.assertLess(s["null_mean"], 0.7)

    def test_no_noise_needs_no_rounds_and_moves_nothing(self):
        _, rows = order_null.rows_of(run([150] * 6, self.FIRST))
        s = order_null.summary(rows, draws=50)
        self.assertEqual((s["moved"], s["null_95"], s["sd_log"]), (0, [0, 0], 0.0))
        self.assertEqual(s["rounds_a_half_needed"], 0)

    def test_a_baseline_the_run_does_not_have_is_named(self):
        with self.assertRaises(SystemExit) as e:
            order_null.rows_of(run([150] * 6, self.FIRST), "nope")
        self.assertIn("nope", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()
