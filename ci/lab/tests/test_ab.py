"""Unit tests of splitting an interleaved A/B lab run (no VM)."""

import math
import unittest

from labkit import ab


def cell(column, round0, iops):
    return {"column": column, "round": round0, "phases": {"randread-4k": {"fio": {"read_iops": iops}}, "verify-4k": {}}}


class AbTest(unittest.TestCase):
    def test_sides_take_their_rounds_renumbered(self):
        doc = {"rounds": 8, "report_args": ["--rounds", "8", "--bs", "4k"],
               "cells": [cell("x", r, 100) for r in range(8)]}
        sides = ab.split(doc)
        self.assertEqual(sides["a"]["ab_rounds"], [1, 2, 5, 6])
        self.assertEqual(sides["b"]["ab_rounds"], [3, 4, 7, 8])
        self.assertEqual([c["round"] for c in sides["b"]["cells"]], [0, 1, 2, 3])
        self.assertEqual(sides["b"]["report_args"], ["--rounds", "4", "--bs", "4k"])
        self.assertEqual(doc["cells"][2]["round"], 2)

    def test_b_over_a_with_an_interval_that_holds_it(self):
        a = [100, 110, 90, 105]
        b = [200, 220, 180, 210]
        doc = {"cells": [cell("x", r, v) for r, v in zip((0, 1, 4, 5), a)] + [cell("x", r, v) for r, v in zip((2, 3, 6, 7), b)]}
        (row,) = ab.compare(ab.split(doc))
        self.assertAlmostEqual(row["b_over_a"], 2.0, places=6)
        self.assertLess(row["low"], 2.0)
        self.assertGreater(row["high"], 2.0)
        self.assertGreater(row["low"], 1.0)
        self.assertEqual(row["n"], (4, 4))
        self.assertAlmostEqual(row["sd"][0], row["sd"][1], places=6)

    def test_t_quantiles(self):
        self.assertEqual(ab.t975(3), 3.182)
        self.assertEqual(ab.t975(3.9), 3.182)
        self.assertEqual(ab.t975(11), 2.228)
        self.assertEqual(ab.t975(1000), 1.96)
        self.assertTrue(math.isclose(ab.t975(0.5), 12.706))


if __name__ == "__main__":
    unittest.main()
