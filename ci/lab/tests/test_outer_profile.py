"""Unit tests of the outer QEMU profile's reading (no VM, no perf)."""

import unittest
from unittest import mock

from labkit import outer_profile as profile

SCRIPT = """\
       CPU 0/TCG 31996 100.000000001:      7f14a9865949 qht_lookup_custom+0x3c (/lab/qemu-system-x86_64)
       CPU 1/TCG 31996 100.500000000:      7f0000001000 [unknown] ([unknown])
 ld-linux-x86-64 31996 101.000000000:  ffffffff816dddb3 fput ([kernel.kallsyms])
          worker 31999 101.200000000:      7f14a9865000  (/usr/lib/libc.so.6)
garbage line
"""


def cell(column, rnd, iops, t0, t1):
    """A guest of COLUMN in round RND whose one timed phase ran at IOPS
    over the window T0-T1 of lab host RND's profile."""
    return {"column": column, "round": rnd, "outer_profile": {"data": f"host{rnd}", "pid": 1},
            "phases": {"randread-4k": {"fio": {"read_iops": iops}, "machine": {"t0": t0, "t1": t1}},
                       "verify-4k": {"fio": {"read_iops": 1}}}}


class ProfileTest(unittest.TestCase):
    def test_perf_script_lines_give_time_thread_and_function(self):
        got = profile.parse_script(SCRIPT)
        self.assertEqual(got, [(100.000000001, "CPU 0/TCG", "qht_lookup_custom"),
                               (100.5, "CPU 1/TCG", "[unknown]"),
                               (101.0, "ld-linux-x86-64", "fput"),
                               (101.2, "worker", "[libc.so.6]")])

    def test_a_slow_guests_extra_work_is_named(self):
        # Four guests of one column on four lab hosts, each 10 s at its
        # IOPS; the slow two pay 3 extra samples of "tb_flush" per 1000
        # I/Os on top of 10 of "[unknown]" that every guest pays.
        iops = [1000, 1000, 500, 500]
        per_host = {}
        cells = []
        for h, rate in enumerate(iops):
            ios = rate * 10
            n_common, n_extra = ios * 10 // 1000, (ios * 3 // 1000 if rate < 1000 else 0)
            per_host[f"host{h}"] = ([(5.0 + i * 1e-4, "CPU 0/TCG", "[unknown]") for i in range(n_common)]
                                    + [(6.0, "CPU 1/TCG", "tb_flush")] * n_extra
                                    + [(99.0, "CPU 0/TCG", "outside")])  # after the window: not counted
            cells.append(cell("x", h, rate, 0.0, 10.0))
        with mock.patch.object(profile, "samples", lambda data, pid: per_host[data]):
            rows = profile.guest_costs({"cells": cells})
        self.assertEqual(len(rows), 4)
        slow = [r for r in rows if r["factor"] < 1]
        self.assertEqual(len(slow), 2)
        for r in slow:
            self.assertAlmostEqual(r["fn"]["tb_flush"], 3.0)
            self.assertAlmostEqual(r["fn"]["[unknown]"], 10.0)
            self.assertNotIn("outside", r["fn"])
        text = profile.report(rows, top=2)
        lines = text.splitlines()
        self.assertIn("x: 4 guests", lines[0])
        # 10 s of samples in each window: (10 + 3 per 1000 I/Os) * I/Os / 10 s / 199 Hz
        self.assertIn("busy", lines[0])
        fn_at = next(i for i, line in enumerate(lines) if line.startswith("  by fn:"))
        self.assertTrue(lines[fn_at + 1].strip().endswith("tb_flush"), text)
        self.assertIn("100.0%", lines[fn_at + 1])

    def test_guests_without_a_profile_are_left_out(self):
        c = cell("x", 0, 1000, 0.0, 10.0)
        del c["outer_profile"]
        self.assertEqual(profile.guest_costs({"cells": [c]}), [])


    def test_no_perf_means_no_profile_and_a_note(self):
        import io
        from pathlib import Path
        with mock.patch.object(profile.shutil, "which", return_value=None), \
                mock.patch("sys.stderr", new_callable=io.StringIO) as err:
            self.assertIsNone(profile.OuterProfiler.start(1, "/nonexistent", Path("x.log")))
        self.assertIn("apt-get install linux-perf", err.getvalue())

    def test_committed_costs_are_trimmed_to_what_matters(self):
        row = {"column": "x", "round": 0, "factor": 1.0, "total": 1000.0, "busy_cpus": 1.5,
               "fn": {"big": 990.0, "tiny": 1.0, "tiny2": 9.0}, "thread": {"CPU 0/TCG": 1000.0}}
        t = profile.trimmed(row)
        self.assertEqual(t["fn"], {"big": 990.0, "tiny2": 9.0, "[other]": 1.0})


if __name__ == "__main__":
    unittest.main()
