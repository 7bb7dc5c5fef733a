"""Unit tests of setting the speed probe beside a run's phases (no VM)."""

import io
import unittest
from contextlib import redirect_stderr

from labkit import probe_phase


def run(speeds):
    """One column, a guest per round, each with one 4k phase in a 10 s
    window starting at 100 * round, at SPEEDS[round] x 1000 IOPS."""
    cells = [{"column": "x", "round": r,
              "phases": {"randread-4k": {"fio": {"read_iops": 1000 * s},
                                         "machine": {"t0": 100.0 * r, "t1": 100.0 * r + 10}},
                         "verify-4k": {"fio": {"read_iops": 5}}}}
             for r, s in enumerate(speeds)]
    return {"cells": cells}


def probe(gauge_of_round):
    """Probe lines every 2 s over 8 rounds, CPU time GAUGE_OF_ROUND(round),
    wall time always 1000, and one torn last line."""
    lines = [f"{t:.3f} {gauge_of_round(int(t // 100)):.1f} 1000.0\n" for t in range(0, 800, 2)]
    return lines + ["790.000 12"]


class ProbePhaseTest(unittest.TestCase):
    def test_a_slow_machine_under_slow_phases_reads_near_minus_one(self):
        speeds = [1, 0.5, 1.2, 0.7, 1, 0.6, 1.1, 0.8]
        rows, missed = probe_phase.phase_gauges(run(speeds), probe_phase.read_probe(probe(lambda r: 100 / speeds[r])))
        self.assertEqual((len(rows), missed), (8, 0))
        self.assertEqual({r["samples"] for r in rows}, {6})
        self.assertLess(probe_phase.correlate(rows)["all"]["r"], -0.99)

    def test_a_steady_machine_gives_no_r_and_wall_time_is_a_choice(self):
        rows, _ = probe_phase.phase_gauges(run([1, 0.5, 1.2]), probe_phase.read_probe(probe(lambda r: 100)))
        self.assertIsNone(probe_phase.correlate(rows)["all"]["r"])
        rows, _ = probe_phase.phase_gauges(run([1, 0.5, 1.2]), probe_phase.read_probe(probe(lambda r: 7)), wall=True)
        self.assertEqual({r["gauge"] for r in rows}, {1000.0})

    def test_phases_without_a_window_or_samples_are_counted_not_guessed(self):
        doc = run([1, 1, 1])
        del doc["cells"][0]["phases"]["randread-4k"]["machine"]
        doc["cells"][1]["phases"]["randread-4k"]["machine"] = {"t0": 5000.0, "t1": 5010.0}
        rows, missed = probe_phase.phase_gauges(doc, probe_phase.read_probe(probe(lambda r: 100)))
        self.assertEqual((len(rows), missed), (1, 2))

    def test_no_sample_at_all_says_what_to_check(self):
        text = probe_phase.report([], 3, wall=False)
        self.assertIn("was the probe running", text)
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(probe_phase.main(["/dev/null", "/dev/null"]), 2)
        self.assertIn("probe-vs-phase:", err.getvalue())


if __name__ == "__main__":
    unittest.main()
