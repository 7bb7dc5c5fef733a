"""Unit tests of a round's lab host boots and their troubles (no VM)."""

import contextlib
import io
import json
import unittest

from labkit import base, console, host, judge, rounds, scenarios
from tests.fixtures import HOST, cell, line


class RoundTest(unittest.TestCase):
    """run_round: a crashed lab host's unfinished guests go to a fresh one."""

    @staticmethod
    def troubled_round(specs, first, every_time=False):
        """run_round over lab hosts whose first one (or, every_time, each
        one) prints the lines FIRST(todo); the others run every guest they
        are given. Returns the doc and the guests each lab host was given."""
        calls = []

        def boot(todo, attempt, skip=()):
            calls.append(list(todo))
            col = console.Collector(len(todo))
            if attempt == 1 or every_time:
                for raw in first(todo):
                    col.feed(raw)
            else:
                col.feed(HOST)
                for spec in todo:
                    col.feed(line(cell(base.tag_of(spec))))
                col.feed("@@LAB-DONE@@ rc=0")
            col.finish(0)
            return col
        doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}
        with contextlib.redirect_stderr(io.StringIO()):
            rounds.run_round(doc, 1, specs, boot)
        return doc, calls

    def test_an_unfit_lab_host_is_replaced_before_any_guest(self):
        # host-init found KVM's TSC rate off the refined one (every guest
        # of such a lab host hung in its first I/O): a fresh lab host runs
        # all of the round's guests, and the run only warns.
        specs = [f"{t}:vmm:viommu:baseline" for t in "ab"]
        doc, calls = self.troubled_round(specs, lambda todo: [
            '@@LAB-HOST-UNFIT@@ {"why":"KVM started with the TSC at 1997.048 MHz, refined to 1996.249 MHz (400 ppm)"}',
            "@@LAB-DONE@@ rc=1"])
        self.assertEqual(calls, [specs, specs])
        self.assertEqual([b.get("host_unfit_retried", False) for b in doc["boots"]], [True, False])
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("unfit" in w and "400 ppm" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # Unfit every time: the last one is a problem, not a silent pass.
        doc, _ = self.troubled_round(specs, lambda todo: ['@@LAB-HOST-UNFIT@@ {"why":"TSC"}', "@@LAB-DONE@@ rc=1"],
                                     every_time=True)
        self.assertEqual(len(doc["boots"]), rounds.HOST_BOOTS_PER_ROUND)
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertTrue(any("unfit" in p for p in problems), problems)

    def test_a_vmm_stuck_in_the_lab_hosts_kernel_sends_the_rest_to_a_fresh_host(self):
        # Seen in CI: a VMM SIGKILL did not end held the NVMe, and the
        # next guest failed to open it. The bench tool now stops there
        # (@@LAB-HOST-STUCK@@); the guests it did not run go to a fresh
        # lab host and the run only warns.
        specs = [f"{t}:vmm:viommu:baseline" for t in "abc"]
        doc, calls = self.troubled_round(specs, lambda todo: [
            HOST, line(cell("a", warnings=["the VMM did not exit within 30 s of SIGKILL: it is stuck"])),
            '@@LAB-HOST-STUCK@@ {"why":"the VMM of a round 1 (pid 9) is still stuck in the host\'s kernel"}',
            "@@LAB-DONE@@ rc=1"])
        self.assertEqual(calls, [specs, specs[1:]])
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["a", "b", "c"])
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("stayed in the lab host's kernel" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # Every lab host keeps one: the last one's is a problem.
        doc, _ = self.troubled_round(specs, lambda todo: [HOST, '@@LAB-HOST-STUCK@@ {"why":"stuck"}', "@@LAB-DONE@@ rc=1"],
                                     every_time=True)
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertTrue(any("stayed in the lab host's kernel" in p for p in problems), problems)

    def test_a_guest_with_the_emulations_faults_in_every_attempt_runs_in_a_fresh_host(self):
        # Seen in CI (smoke-7.3-ci): one lab host gave a guest a hang
        # with the vCPU's saved state the host's, or a triple fault, in
        # each of its 5 attempts; that guest alone runs again elsewhere.
        spin = ("state at the hang: the virtio-iommu has no request outstanding; vCPUs: vCPU0 at 0xffffffffc0390dcc "
                "(the host's __svm_vcpu_run+0x9c: not guest code, the vCPU's saved state is the host's)")
        tries = [f"attempt 1 failed (the guest hung in after idle (no I/O for 60 s; --retry-hung); {spin}); ran it again (log x)",
                 "attempt 2 failed (the guest reset itself mid-run (our VMM exited 4: triple fault)); ran it again (log y)"]
        hung = {"status": "hung", "phase": "after idle", "after_s": 60, "device_owes": False}
        specs = [f"{t}:vmm:viommu:baseline" for t in "abc"]

        def first(last_warnings, status=hung):
            return lambda todo: [HOST, line(cell("a")), line(cell("b", status=status, warnings=tries + last_warnings)),
                                 line(cell("c")), "@@LAB-DONE@@ rc=0"]
        doc, calls = self.troubled_round(specs, first([spin]))
        self.assertEqual(calls, [specs, specs[1:2]])
        self.assertEqual(doc["boots"][0]["sick"], "b round 1, 3 attempts")
        self.assertEqual([c["status"]["status"] for c in sorted(doc["cells"], key=lambda c: c["column"])], ["ok"] * 3)
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("the emulation's faults in every attempt" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # The last attempt a triple fault, as the cell's status says it (the
        # bench tool gives it its retries' words).
        doc, calls = self.troubled_round(specs, first([], {"status": "failed", "reason": "the guest reset itself mid-run (our VMM exited 4: triple fault)"}))
        self.assertEqual(calls, [specs, specs[1:2]])
        # A hang of any other kind (here: no vCPU at the host's address), a
        # request owed, or another failure stays with its lab host.
        for last, status in ((["state at the hang: the virtio-iommu has no request outstanding"], hung),
                             ([spin], {**hung, "device_owes": True}),
                             ([], {"status": "failed", "reason": "fio verify error"})):
            doc, calls = self.troubled_round(specs, first(last, status))
            self.assertEqual(calls, [specs], (last, status))
            problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
            self.assertTrue(any(p.startswith("b round 1") for p in problems), problems)
        # One earlier attempt of another kind spoils it too.
        tries.append("attempt 3 failed (fio exited 1); ran it again (log z)")
        doc, calls = self.troubled_round(specs, first([spin]))
        self.assertEqual(calls, [specs])

    def test_a_stock_qemu_guests_emulation_hangs_run_in_a_fresh_host_without_a_crash(self):
        # Since the bench tool reads stock QEMU's vCPUs through its monitor,
        # a QEMU guest whose vCPU holds the lab host's state in every
        # attempt runs again elsewhere as ours does, the lab host running on.
        spin = ("state at the hang: stock QEMU: the virtio-iommu has no request outstanding [Gauges { .. }]; vCPUs: "
                "vCPU1 at 0xffffffffc0500dcc (the host's __svm_vcpu_run+0x9c: not guest code, the vCPU's saved state is the host's)")
        tries = [f"attempt 1 failed (the guest hung in randread-4k (no I/O for 60 s; --retry-hung); {spin}); ran it again (log x)"]
        hung = {"status": "hung", "phase": "randread-4k", "after_s": 60, "device_owes": False}
        specs = [f"{t}:qemu:viommu:baseline" for t in "abc"]

        def first(last, status=hung):
            return lambda todo: [HOST, line(cell("a")), line(cell("b", status=status, warnings=tries + last)),
                                 line(cell("c")), "@@LAB-DONE@@ rc=0"]
        doc, calls = self.troubled_round(specs, first([spin]))
        self.assertEqual(calls, [specs, specs[1:2]])
        self.assertEqual(judge.judge(doc, scenarios.SCENARIOS["compare"], specs)[0], [])
        # QEMU's device owing the driver a request: judged where it ran.
        owed = "state at the hang: THE DEVICE OWES THE DRIVER A REQUEST: vCPU0 in __viommu_sync_req+0x10 waits; " + spin[19:]
        doc, calls = self.troubled_round(specs, first([owed], {**hung, "device_owes": True}))
        self.assertEqual(calls, [specs])

    def test_a_guests_hangs_on_a_lab_host_that_then_crashed_run_in_a_fresh_host(self):
        # Seen in a demo: stock QEMU's guest (then no vCPU state to read)
        # hung twice in boot, hung again and reset itself, out of
        # attempts; the lab host crashed two guests later. On a host that
        # crashed or wedged such a guest runs again in the fresh one.
        tries = ["attempt 1 failed (the guest hung in boot (no I/O for 120 s; --retry-hung)); ran it again (log x)",
                 "attempt 2 failed (the guest hung in after randread-4k-j2 (no I/O for 60 s; --retry-hung)); ran it again (log y)"]
        reset = {"status": "failed", "reason": "the guest reset itself mid-run (stock QEMU exited 0 before the guest finished)"}
        crash = "[   24.05] BUG: TASK stack guard page was hit at 000000006e3250f1"
        specs = [f"{t}:qemu:viommu:baseline" for t in "abc"]

        def first(status=reset, warnings=(), end=crash):
            return lambda todo: [HOST, line(cell("a")), line(cell("b", status=status, warnings=tries + list(warnings))),
                                 line(cell("c")), end]
        doc, calls = self.troubled_round(specs, first())
        self.assertEqual(calls, [specs, specs[1:2]])
        self.assertEqual([c["status"]["status"] for c in sorted(doc["cells"], key=lambda c: c["column"])], ["ok"] * 3)
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("crashed" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # The lab host running on: the same guest is judged as it is.
        doc, calls = self.troubled_round(specs, first(end="@@LAB-DONE@@ rc=0"))
        self.assertEqual(calls, [specs])
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertTrue(any(p.startswith("b round 1") for p in problems), problems)
        # A request owed stays a problem even when the lab host crashed
        # after it; a hang whose diagnosis names the virtio-iommu is not
        # run again either.
        owed = {"status": "hung", "phase": "randread-4k", "after_s": 60, "device_owes": True}
        doc, calls = self.troubled_round(specs, first(owed))
        self.assertEqual(calls, [specs])
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertTrue(any(p.startswith("b round 1") and "owed" in p for p in problems), problems)
        untaken = {**owed, "device_owes": False}
        doc, calls = self.troubled_round(specs, first(untaken, [
            "state at the hang: the driver published virtio-iommu requests the device has not taken (avail 5, device at 4)"]))
        self.assertEqual(calls, [specs])
        tries[0] = tries[0].replace("in boot", "in boot; the device took virtio-iommu requests it has not completed")
        doc, calls = self.troubled_round(specs, first())
        self.assertEqual(calls, [specs])

    def test_the_tsc_rate_comes_from_the_kernel_log(self):
        log = ("[0.000035] tsc: Detected 1996.249 MHz processor\n[0.0001] tsc: Detected 1996.300 MHz TSC\n"
               "[1.9] tsc: Refined TSC clocksource calibration: 1996.251 MHz\n")
        self.assertEqual(host.tsc_khz_of(log), 1996251)
        self.assertEqual(host.tsc_khz_of(log.split("[1.9]")[0]), 1996300)
        self.assertEqual(host.tsc_khz_of("[0.0] tsc: Detected 2894.560 MHz processor\n"), 2894560)
        self.assertIsNone(host.tsc_khz_of("no such lines"))

    @staticmethod
    def booter(crashes: int, specs: list[str], wedge: bool = False):
        """A boot() whose first CRASHES lab hosts finish one guest each and
        crash (or, with WEDGE, go silent: the lab's stall); later ones
        finish every guest they get."""
        calls = []

        def boot(todo, attempt, skip=()):
            calls.append(list(todo))
            col = console.Collector(len(todo))
            col.feed(HOST)
            for spec in todo[:1] if attempt <= crashes else todo:
                col.feed(line(cell(base.tag_of(spec), rnd=1)))
            if attempt <= crashes and wedge:
                col.stalled = f"no progress for {console.HOST_STALL} s (the lab host is wedged)"
            elif attempt <= crashes:
                col.feed("[   24.05] BUG: TASK stack guard page was hit at 000000006e3250f1")
            else:
                col.feed("@@LAB-DONE@@ rc=0")
            return col
        return boot, calls

    # More guests than a round has lab hosts: each troubled host finishes one.
    MANY = "abcdefgh"

    def run_with(self, crashes, wedge=False, tags="abcd"):
        specs = [f"{t}:vmm:viommu:baseline" for t in tags]
        doc = {"boots": [], "cells": [], "checks": []}
        boot, calls = self.booter(crashes, specs, wedge)
        with contextlib.redirect_stderr(io.StringIO()):
            rounds.run_round(doc, 1, specs, boot)
        return doc, calls

    def test_two_crashes_in_a_row_still_finish_the_round(self):
        doc, calls = self.run_with(2)
        self.assertEqual(calls, [["a:vmm:viommu:baseline", "b:vmm:viommu:baseline", "c:vmm:viommu:baseline", "d:vmm:viommu:baseline"],
                                 ["b:vmm:viommu:baseline", "c:vmm:viommu:baseline", "d:vmm:viommu:baseline"],
                                 ["c:vmm:viommu:baseline", "d:vmm:viommu:baseline"]])
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["a", "b", "c", "d"])
        self.assertEqual([b.get("host_crash_retried", False) for b in doc["boots"]], [True, True, False])

    def test_the_lab_hosts_of_a_round_are_bounded(self):
        doc, calls = self.run_with(len(self.MANY), tags=self.MANY)
        self.assertEqual(len(calls), rounds.HOST_BOOTS_PER_ROUND)
        self.assertEqual(len(doc["cells"]), rounds.HOST_BOOTS_PER_ROUND)
        self.assertTrue(doc["boots"][-1]["host_crash"])
        self.assertNotIn("host_crash_retried", doc["boots"][-1])

    def test_a_wedged_lab_host_is_replaced_and_only_warned_about(self):
        doc, calls = self.run_with(1, wedge=True)
        self.assertEqual(len(calls), 2)
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["a", "b", "c", "d"])
        self.assertEqual([b.get("host_stall_retried", False) for b in doc["boots"]], [True, False])
        specs = [f"{t}:vmm:viommu:baseline" for t in "abcd"]
        doc.update(rounds=1, first_round=1)
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertFalse(any("wedged" in p for p in problems), problems)
        self.assertTrue(any("the lab host is wedged" in w and "ran again in a fresh one" in w for w in warnings), warnings)

    def test_a_lab_host_that_wedges_every_time_fails(self):
        doc, calls = self.run_with(len(self.MANY), wedge=True, tags=self.MANY)
        self.assertEqual(len(calls), rounds.HOST_BOOTS_PER_ROUND)
        doc.update(rounds=1, first_round=1)
        specs = [f"{t}:vmm:viommu:baseline" for t in self.MANY]
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], specs)
        self.assertTrue(any("the lab host is wedged" in p for p in problems), problems)

    @staticmethod
    def script_booter(first_ok: bool, first_trouble: bool = True):
        """A boot() for a scenario of checks (power-off, then reset), each
        check skipped when named in SKIP as the lab host's lab_skip does:
        the first lab host reports power-off (passing with FIRST_OK) and
        wedges (with FIRST_TROUBLE); later ones pass."""
        calls = []

        def boot(todo, attempt, skip=()):
            calls.append(list(skip))
            col = console.Collector(0)
            col.feed(HOST)
            ok = "true" if first_ok or attempt > 1 else "false"
            if "power-off" not in skip:
                col.feed(f'@@LAB-CHECK@@ {{"name":"power-off","ok":{ok},"detail":"exit 0 (want 0)"}}')
            if attempt == 1 and first_trouble:
                col.stalled = f"no progress for {console.HOST_STALL} s (the lab host is wedged)"
            else:
                col.feed('@@LAB-CHECK@@ {"name":"reset","ok":true,"detail":"exit 3 (want 3)"}')
                col.feed("@@LAB-DONE@@ rc=0")
            return col
        return boot, calls

    def run_script(self, first_ok: bool, first_trouble: bool = True):
        doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}
        boot, calls = self.script_booter(first_ok, first_trouble)
        with contextlib.redirect_stderr(io.StringIO()):
            rounds.run_round(doc, 1, [], boot)
        return doc, calls, judge.judge(doc, scenarios.SCENARIOS["vmm-exits"], [])

    def test_a_scenario_of_checks_resumes_in_a_fresh_lab_host_after_its_passed_checks(self):
        doc, calls, (problems, warnings) = self.run_script(first_ok=True)
        self.assertEqual(calls, [[], ["power-off"]])
        self.assertEqual([c["name"] for c in doc["checks"]], ["power-off", "reset"])
        self.assertEqual(problems, [])
        self.assertTrue(any("wedged" in w and "unfinished checks ran again in a fresh one" in w for w in warnings), warnings)

    def test_a_check_failed_on_a_lab_host_that_then_wedged_runs_again(self):
        doc, calls, (problems, warnings) = self.run_script(first_ok=False)
        self.assertEqual(calls, [[], []])
        self.assertEqual([(c["name"], c["ok"]) for c in doc["checks"]], [("power-off", True), ("reset", True)])
        self.assertEqual(problems, [])
        self.assertTrue(any("check(s) power-off failed on a lab host that then crashed or wedged" in w for w in warnings), warnings)

    def test_a_failed_check_on_a_sound_lab_host_is_a_result(self):
        doc, calls, (problems, _) = self.run_script(first_ok=False, first_trouble=False)
        self.assertEqual(len(calls), 1)
        self.assertIn("check power-off: exit 0 (want 0)", problems)

    def test_no_crash_one_lab_host(self):
        doc, calls = self.run_with(0)
        self.assertEqual(len(calls), 1)
        self.assertEqual(len(doc["cells"]), 4)


    def test_the_bench_tools_provenance_goes_with_the_cells(self):
        # Its line, even with console junk after it, is kept for the
        # table's header; one the kernel cut is dropped, never a failure.
        col = console.Collector(1)
        col.feed('@@LAB-PROVENANCE@@ {"tool_revision": "abc", "kernel_cmdline": "x"}\r')
        self.assertEqual(json.loads(col.provenance)["tool_revision"], "abc")
        cut = console.Collector(1)
        cut.feed('@@LAB-PROVENANCE@@ {"tool_revision": "ab')
        cut.feed("@@LAB-DONE@@ rc=0")
        self.assertIsNone(cut.provenance)
        self.assertEqual(cut.checks, [])
        doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}

        def boot(todo, attempt, skip=()):
            c = console.Collector(len(todo))
            for raw in [HOST, '@@LAB-PROVENANCE@@ {"tool_revision": "abc"}', line(cell("a")), "@@LAB-DONE@@ rc=0"]:
                c.feed(raw)
            c.finish(0)
            return c
        with contextlib.redirect_stderr(io.StringIO()):
            rounds.run_round(doc, 1, ["a:vmm:viommu:baseline"], boot)
        self.assertEqual(json.loads(doc["provenance"]), {"tool_revision": "abc"})


if __name__ == "__main__":
    unittest.main()
