"""Unit tests of the lab host trouble table (trouble.TROUBLES) and the code
that reads it: the console parser, the round runner, the judge and the
fault census (no VM)."""

import contextlib
import io
import json
import unittest

from labkit import census, console, judge, rounds, trouble
from labkit.trouble import TROUBLES, Trouble, Verdict
from tests.fixtures import HOST, SPECS, cell, line

KINDS = {t.key: t for t in TROUBLES}


def record(**kw):
    """A boot record of round 1 on a lab host that was ready and finished."""
    return {"round": 1, "attempt": 1, "host": {"kernel": "6.12"}, "done_rc": 0, "log": "l", "host_crash": None, "stalled": None,
            "timed_out": None, "early_exit": None, "teardown_hung": False, "unfit": None, "vmm_stuck": None, **kw}


class TableTest(unittest.TestCase):
    def test_the_kinds_in_the_order_they_are_told_apart(self):
        self.assertEqual([t.key for t in TROUBLES], ["host_crash", "unfit", "vmm_stuck", "stalled", "sick"])
        self.assertEqual(len({t.retried for t in TROUBLES}), len(TROUBLES), "a retried key of its own each")
        self.assertTrue(all(t.moves_work for t in TROUBLES), "every kind today sends the unfinished work to a fresh host")

    def test_each_kind_is_recognised_somehow(self):
        for t in TROUBLES:
            # by a marker, a console line, or the runner (stalled: no
            # progress; sick: derived from the cells)
            self.assertTrue(t.marker or t.console or t.key in ("stalled", "sick"), t.key)
            self.assertEqual(t.marker is None, t.from_marker is None, t.key)
        self.assertEqual({t.marker for t in TROUBLES if t.marker}, {"HOST-UNFIT", "HOST-STUCK"})
        self.assertIs(trouble.by_marker("HOST-STUCK"), KINDS["vmm_stuck"])
        self.assertIsNone(trouble.by_marker("CELL"))

    def test_the_verdicts_on_a_rounds_last_lab_host(self):
        self.assertEqual({t.key: t.verdict for t in TROUBLES},
                         {"host_crash": Verdict.WARN, "unfit": Verdict.FAIL_ALONE, "vmm_stuck": Verdict.FAIL,
                          "stalled": Verdict.FAIL, "sick": Verdict.CELLS})

    def test_trouble_of_takes_the_first_kind_shown(self):
        self.assertIsNone(trouble.trouble_of(record()))
        self.assertIs(trouble.trouble_of(record(stalled="s", host_crash="c")), KINDS["host_crash"])
        self.assertIs(trouble.trouble_of(record(vmm_stuck="v", stalled="s")), KINDS["vmm_stuck"])


class ConsoleTest(unittest.TestCase):
    def test_markers_and_console_lines_set_their_kind(self):
        col = console.Collector(1)
        for t in TROUBLES:
            self.assertIsNone(getattr(col, t.key, None), t.key)
        self.assertFalse(hasattr(col, "sick"), "sick is the round runner's, not the console's")
        col.feed(HOST)
        col.feed('@@LAB-HOST-STUCK@@ {"why": "' + "x" * 400 + '"}')
        self.assertEqual(col.vmm_stuck, "x" * 300)
        col.feed("[   12.0] Kernel panic - not syncing: stack guard page")
        self.assertEqual(col.host_crash, "Kernel panic - not syncing: stack guard page")
        col = console.Collector(1)
        col.feed('@@LAB-HOST-UNFIT@@ {"why": "tsc off"}')
        self.assertEqual(col.unfit, "tsc off")

    def test_a_console_that_ends_is_a_wedge_unless_a_kind_explains_it(self):
        for t in TROUBLES:
            if not t.collected:
                continue
            col = console.Collector(1)
            col.feed(HOST)
            setattr(col, t.key, "x")
            col.finish(1)
            self.assertEqual(bool(col.stalled and col.stalled != "x"), not t.explains_no_done, t.key)


class JudgeTest(unittest.TestCase):
    def test_a_retried_kind_is_a_warning_whatever_its_verdict(self):
        for t in TROUBLES:
            b = record(**{t.key: "detail", t.retried: True})
            problems, warnings = judge.boot_problems(b)
            self.assertEqual(problems, [], t.key)
            self.assertEqual(warnings, [f"lab host of round 1: {t.warning.format('detail', log='l')}; its unfinished guests ran again in a fresh one"])

    def test_each_verdict_on_the_last_lab_host(self):
        problems, warnings = judge.boot_problems(record(unfit="tsc off", done_rc=None, stalled="s"))
        self.assertEqual((problems, warnings), (["lab host of round 1: the lab host found itself unfit: tsc off (log l)"], []))
        problems, warnings = judge.boot_problems(record(vmm_stuck="pid 7"))
        self.assertEqual(problems, ["lab host of round 1: a VMM stayed in the lab host's kernel after SIGKILL: pid 7 (log l)"])
        problems, warnings = judge.boot_problems(record(stalled="no progress", done_rc=None))
        self.assertEqual(problems, ["lab host of round 1: no progress"], "a wedge is not also 'never finished'")
        problems, warnings = judge.boot_problems(record(host_crash="BUG: x", done_rc=None))
        self.assertEqual((problems, warnings), ([], ["lab host of round 1: the lab host crashed (BUG: x, log l)"]))
        self.assertEqual(judge.boot_problems(record(sick="a round 1, 5 attempts")), ([], []))

    def test_a_new_kind_is_one_row(self):
        # A kind added to the table is recognised by its marker, moves the
        # round's unfinished guests, and is judged by its verdict.
        odd = Trouble("odd", "odd_retried", "the lab host was odd: {} (log {log})", "was odd ({})", Verdict.FAIL,
                      "the lab host was odd: {} (log {log})", marker="HOST-ODD", from_marker=lambda doc, rest: doc["why"],
                      explains_no_done=True, census="lab host odd")
        orig = trouble.TROUBLES
        table = orig + (odd,)
        patched = [trouble, console, judge, rounds]
        try:
            for m in patched:
                m.TROUBLES = table
            rounds.BOOT_FIELDS += ("odd",)
            cols = []

            def boot(todo, attempt, skip):
                col = console.Collector(len(todo))
                col.feed(HOST)
                if attempt == 1:
                    col.feed(line(cell("qemu+stock")))
                    col.feed('@@LAB-HOST-ODD@@ {"why": "queer"}')
                else:
                    col.feed(line(cell("ours")))
                    col.feed("@@LAB-DONE@@ rc=0")
                col.finish(0)
                cols.append(todo)
                return col
            doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}
            with contextlib.redirect_stderr(io.StringIO()) as err:
                rounds.run_round(doc, 1, SPECS, boot)
            self.assertEqual(cols, [SPECS, SPECS[1:]])
            self.assertIn("the lab host was odd (queer)", err.getvalue())
            self.assertEqual(doc["boots"][0]["odd"], "queer")
            self.assertTrue(doc["boots"][0]["odd_retried"])
            problems, warnings = judge.judge(doc, {}, SPECS)
            self.assertEqual(problems, [])
            self.assertIn("lab host of round 1: the lab host was odd: queer (log ); its unfinished guests ran again in a fresh one", warnings)
            problems, _ = judge.boot_problems(record(odd="queer"))
            self.assertEqual(problems, ["lab host of round 1: the lab host was odd: queer (log l)"])
            census.census_of = lambda b: next((t.census for t in table if t.census and b.get(t.key)), None)
            hosts, _ = census.census([json.loads(json.dumps({"boots": [record(odd="queer")], "cells": []}))])
            self.assertEqual(sum(h["lab host odd"] for h in hosts.values()), 1)
        finally:
            for m in patched:
                m.TROUBLES = orig
            rounds.BOOT_FIELDS = rounds.BOOT_FIELDS[:-1]
            census.census_of = trouble.census_of


class CensusTest(unittest.TestCase):
    def test_the_census_counts_the_first_kind_it_has_a_column_for(self):
        self.assertEqual(trouble.census_of(record(host_crash="c", stalled="s")), "lab host crashed")
        self.assertEqual(trouble.census_of(record(vmm_stuck="v", stalled="s")), "lab host wedged")
        self.assertIsNone(trouble.census_of(record(vmm_stuck="v")))
        self.assertIsNone(trouble.census_of(record(sick="a")))


if __name__ == "__main__":
    unittest.main()
