"""Unit tests of the console parsing and the judging of a run (no VM)."""

import contextlib
import io
import unittest

from labkit import base, console, judge, kernels, rounds, scenarios
from tests.fixtures import HOST, fio, cell, line, boot, judge_lines, SPECS


class CollectorTest(unittest.TestCase):
    def test_good_cells_pass(self):
        col, (problems, warnings) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock")), line(cell("ours")), "@@LAB-DONE@@ rc=0"])
        self.assertEqual((problems, warnings), ([], []))
        self.assertEqual(col.host["bar0"], "0xfebf0000-0xfebf3fff")
        self.assertEqual([c["column"] for c in col.cells], ["qemu+stock", "ours"])

    def test_progress_lines_count_as_activity(self):
        col = console.Collector()
        self.assertTrue(col.feed("[viommu-bench] cell 1/6 round 1/1 ours: randread-4k (ETA 3 min)"))
        self.assertFalse(col.feed("[   12.0] nvme nvme0: 2/0/0 default/read/poll queues"))

    def test_unreadable_marker_is_a_failed_check_not_a_crash(self):
        # Seen in CI: a check line with a raw carriage return and quotes
        # in its detail ended the whole run in a traceback.
        col = console.Collector()
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"power-off","ok":false,"detail":"VMM said: @@LAB-GUEST@@ { event : boot }\r "}'))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"reset","ok":true,"detail":"a "quoted" word"}'))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"sigterm","ok":true,"detail":"x"}\r'))
        self.assertEqual([(c["name"], c["ok"]) for c in col.checks],
                         [("power-off", False), ("unreadable-check-marker", False), ("sigterm", True)])
        self.assertIn("quoted", col.checks[1]["detail"])

    def test_a_marker_a_kernel_message_cut_is_joined_again(self):
        # Seen in a cold CI run: the lab host's "hrtimer: interrupt took"
        # warning landed inside a cell's JSON, which then failed as an
        # unreadable marker and lost its round.
        text = line(cell("ours"))
        at = text.index('"phases"')
        col = console.Collector()
        self.assertTrue(col.feed(HOST))
        self.assertTrue(col.feed(text[:at] + "[   48.538531] hrtimer: interrupt took 8995550 ns"))
        self.assertTrue(col.feed("[   48.538600] Call Trace:"))
        self.assertTrue(col.feed(text[at:] + "\r"))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"after","ok":true}'))
        self.assertEqual([c["column"] for c in col.cells], ["ours"])
        self.assertEqual([(c["name"], c["ok"]) for c in col.checks], [("after", True)])
        self.assertIsNone(col.host_crash)
        # A crash the kernel printed into the marker is still the host's.
        col = console.Collector()
        col.feed(text[:at] + "[   49.0] BUG: unable to handle page fault")
        self.assertEqual(col.host_crash, "BUG: unable to handle page fault")
        # Cut and never continued: another marker follows, or the console
        # ends; each a failed check, and the next marker still taken.
        col = console.Collector()
        col.feed(text[:at] + "[   50.1] hrtimer: interrupt took 1 ns")
        col.feed('@@LAB-CHECK@@ {"name":"after","ok":true}')
        col.feed(text[:at] + "[   50.2] hrtimer: interrupt took 1 ns")
        col.finish(0)
        self.assertEqual([(c["name"], c["ok"]) for c in col.checks],
                         [("unreadable-cell-marker", False), ("after", True), ("unreadable-cell-marker", False)])
        self.assertEqual(col.cells, [])

    def test_failed_cell_and_fio_error_fail(self):
        bad = cell("ours", status={"status": "failed", "reason": "fio verify-4k exited 1: verify failed", "verify_failed": True})
        bad["phases"]["verify-4k"]["fio"]["error"] = 84
        _, (problems, _) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock")), line(bad), "@@LAB-DONE@@ rc=0"])
        self.assertIn("ours round 1: fio verify-4k exited 1: verify failed", problems)
        self.assertIn("ours round 1: fio verify-4k error 84", problems)

    def test_hung_stock_qemu_is_a_warning_hung_ours_a_failure(self):
        hung = {"status": "hung", "phase": "randread-128k", "after_s": 60}
        _, (problems, warnings) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock", status=hung)), line(cell("ours", status=hung)), "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["ours round 1: hung in randread-128k (no I/O completed for 60 s; killed)"])
        self.assertEqual(warnings, ["qemu+stock round 1: hung in randread-128k (no I/O completed for 60 s; killed)"])

    def test_a_hang_the_device_owes_fails_whatever_vmm(self):
        owed = {"status": "hung", "phase": "randread-4k", "after_s": 60, "device_owes": True}
        _, (problems, warnings) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock", status=owed)), line(cell("ours", status=owed)), "@@LAB-DONE@@ rc=0"])
        want = ": hung in randread-4k (no I/O completed for 60 s; killed): the device owed the driver a request (see the cell's 'state at the hang')"
        self.assertEqual(problems, ["qemu+stock round 1" + want, "ours round 1" + want])
        self.assertEqual(warnings, [])

    def test_a_console_that_ends_without_done_is_a_wedge_and_its_guests_run_again(self):
        # Seen in a demo's round 2: the log simply ended after a guest
        # ran again, no failure field set; the round was lost.
        col = console.Collector(2)
        for l in [HOST, line(cell("qemu+stock"))]:
            col.feed(l)
        col.finish(1)
        self.assertIn("ended without @@LAB-DONE@@", col.stalled)
        boots = []

        def boot(todo, attempt, skip=()):
            boots.append(list(todo))
            if attempt == 1:
                return col
            fresh = console.Collector(len(todo))
            for l in [HOST, line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
                fresh.feed(l)
            fresh.finish(0)
            return fresh

        doc = {"boots": [], "cells": [], "checks": []}
        # The warning is the run's, not the test log's: caught and checked.
        with contextlib.redirect_stderr(io.StringIO()) as err:
            rounds.run_round(doc, 1, SPECS, boot)
        self.assertIn("running 1 unfinished guest(s) of round 1 in a fresh one", err.getvalue())
        self.assertEqual(boots, [SPECS, [SPECS[1]]])
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["ours", "qemu+stock"])
        self.assertTrue(doc["boots"][0].get("host_stall_retried"))
        # A console that ended with its marker, or a crash already named,
        # is not turned into a wedge.
        done = console.Collector(0)
        done.feed("@@LAB-DONE@@ rc=0")
        done.finish(0)
        self.assertIsNone(done.stalled)
        self.assertIsNone(done.host_crash)

    def test_a_clean_qemu_exit_before_done_is_a_reset(self):
        # -no-reboot: a lab host that resets (a triple fault, no time to
        # print) ends its QEMU with status 0 before @@LAB-DONE@@ (seen in
        # tcg-race); a crash, not a wedge, and its work runs again.
        col = console.Collector(2)
        for l in [HOST, line(cell("qemu+stock"))]:
            col.feed(l)
        col.finish(0)
        self.assertIsNone(col.stalled)
        self.assertIn("reset without a message", col.host_crash)
        # Before the host was ready it stays a wedge (no host to reset).
        early = console.Collector(1)
        early.finish(0)
        self.assertIsNone(early.host_crash)

    def test_missing_cells_and_no_done_fail(self):
        _, (problems, _) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock"))])
        self.assertIn("lab host of round 1: never finished the scenario", problems)
        self.assertIn("ours round 1: no result (its lab host stopped before it ran)", problems)

    def test_the_tools_warnings_are_the_labs(self):
        retried = cell("ours", warnings=["first attempt failed (guest kernel crashed: PANIC: double fault); ran it again (log x)"])
        _, (problems, warnings) = judge_lines("compare", SPECS, [HOST, line(cell("qemu+stock")), line(retried), "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        self.assertEqual(warnings, ["ours round 1: first attempt failed (guest kernel crashed: PANIC: double fault); ran it again (log x)"])

    def test_expected_counters_must_move(self):
        specs = ["ours-lazy:vmm:viommu:patched:lazy", "ours-lazy+pool:vmm:viommu:patched:lazy"]
        for deferred, ok in ((0, False), (100, True)):
            dev = {"map_requests": 100, "unmap_requests": 100, "flush_requests": 3, "vfio_calls": 104,
                   "deferred_unmaps": deferred, "flush_vfio_calls": 2, "merged_ranges": 0}
            pool = cell("ours-lazy+pool", counters={"iommu-dma-pool/hits": 9 if ok else 0})
            _, (problems, _) = judge_lines("lazy-smoke", specs, [HOST, line(cell("ours-lazy", device=dev)), line(pool), "@@LAB-DONE@@ rc=0"])
            no_lazy = "ours-lazy: deferred_unmaps stayed 0 in every phase (the path under test was not taken)"
            no_pool = "ours-lazy+pool: hits stayed 0 in every phase (the path under test was not taken)"
            self.assertEqual(problems, [] if ok else [no_lazy, no_pool])

    def test_either_of_two_counters_may_move(self):
        specs = ["ours-stock:vmm:viommu:baseline-6.12:--viommu-poll-us=0",
                 "ours-stock+poll:vmm:viommu:baseline-6.12:--viommu-poll-us=1000",
                 "ours-strict+poll:vmm:viommu:patched-6.12:strict+--viommu-poll-us=1000"]
        base = {"map_requests": 100, "vfio_calls": 100, "poll_ns": 0, "polls_found": 0, "polls_busy": 0,
                "vcpu_kicks": 50, "vcpu_handovers": 0}
        def run(handovers, busy, off_busy=0):
            cells = [cell("ours-stock", device={**base, "polls_busy": off_busy}),
                     cell("ours-stock+poll", device={**base, "vcpu_handovers": handovers, "polls_busy": busy}),
                     cell("ours-strict+poll", device={**base, "vcpu_handovers": handovers})]
            _, (problems, _) = judge_lines("poll-smoke", specs, [HOST] + [line(c) for c in cells] + ["@@LAB-DONE@@ rc=0"])
            return problems
        self.assertEqual(run(handovers=5, busy=0), [])
        self.assertEqual(run(handovers=0, busy=9), [
            "ours-strict+poll: each of vcpu_handovers, polls_busy stayed 0 in every phase (the path under test was not taken)"])
        self.assertEqual(run(handovers=5, busy=0, off_busy=2), ["ours-stock: polls_busy moved (2) where it must stay 0"])

    def test_idle_phase_of_the_reuse_cache(self):
        def idle(entries, held, unmapped, flushes, hits=0, mapped=0, lent=0):
            fio_rec = fio("idle", 0, counters={"iommu-dma-reuse/bytes": -held, "iommu-dma-reuse/hits": hits})
            fio_rec["after"] = {"iommu-dma-reuse/entries": entries, "iommu-dma-reuse/bytes": 0,
                                "iommu-dma-reuse/lent": lent}
            c = cell("ours+lazy+reuse")
            c["phases"]["idle"] = {"fio": fio_rec, "device": {"bytes_mapped": mapped, "bytes_unmapped": unmapped,
                                                              "flush_requests": flushes}}
            return judge.idle_problems(c)
        self.assertEqual(idle(0, 8192, 8192, 1), ([], []))
        self.assertEqual(idle(0, 8192, 12288, 2), ([], []), "earlier evictions flushed too")
        self.assertEqual(idle(3, 8192, 8192, 1)[0], ["the reuse cache still held 3 entries after the idle phase"])
        self.assertEqual(idle(0, 8192, 8192, 1, lent=2)[0],
                         ["2 reuse cache hits were still lent (mapped, in use) after the idle phase: a lent entry outlived its unmap"])
        self.assertEqual(idle(0, 8192, 4096, 1)[0],
                         ["the host unmapped 4096 bytes net in the idle phase, less than the 8192 the cache held at its start"])
        self.assertIn("without an IOTLB_FLUSH", idle(0, 8192, 8192, 0)[0][0])
        self.assertEqual(idle(0, 0, 0, 0), ([], ["the reuse cache was not used in the idle phase's burst (only its emptiness was checked)"]))
        # the burst's own mappings (mapped and cached in the phase) must be gone too
        self.assertEqual(idle(0, 0, 8192, 1, hits=30, mapped=8192), ([], []))
        self.assertEqual(idle(0, 0, 4096, 1, hits=30, mapped=8192)[0],
                         ["the host unmapped -4096 bytes net in the idle phase, less than the 0 the cache held at its start"])
        self.assertIn("without an IOTLB_FLUSH", idle(0, 0, 8192, 0, hits=30, mapped=8192)[0][0])
        self.assertEqual(judge.idle_problems(cell("x")), (["no idle phase reported"], []))
        self.assertEqual(scenarios.SCENARIOS["smoke-6.12"]["idle_check"], ["ours+lazy+reuse", "ours+lazy+reuse-1ms"])

    def test_checks_scenarios(self):
        _, (problems, _) = judge_lines("vmm-errors", [], [HOST, '@@LAB-CHECK@@ {"name":"busy-device","ok":false,"detail":"exit 1"}', "@@LAB-DONE@@ rc=1"])
        self.assertEqual(problems, ["lab host of round 1: the scenario exited 1", "check busy-device: exit 1"])
        _, (problems, _) = judge_lines("vmm-errors", [], [HOST, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["the scenario reported no check"])

    def test_the_iommufd_scenario_fails_on_a_host_without_iommufd(self):
        specs = scenarios.SCENARIOS["iommufd"]["runs"]
        cells = [line(cell(base.tag_of(s), device={"map_requests": 5, "vfio_calls": 5, "polls_found": 0})) for s in specs]
        skipped = '@@LAB-CHECK@@ {"name":"setup","ok":true,"skipped":true,"detail":"iommufd checks skipped: no /dev/iommu"}'
        _, (problems, _) = judge_lines("iommufd", specs, [HOST, skipped, *cells, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["check setup: skipped: iommufd checks skipped: no /dev/iommu"])
        ran = '@@LAB-CHECK@@ {"name":"map","ok":true,"detail":"x"}'
        _, (problems, _) = judge_lines("iommufd", specs, [HOST, ran, *cells, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        # vfio-backend on the same host only notes the skip.
        _, (problems, _) = judge_lines("vfio-backend", [], [HOST, skipped, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])


class HostileTest(unittest.TestCase):
    SPECS = scenarios.SCENARIOS["hostile"]["runs"]
    ATTACKS = ["msix-pba", "msix-table", "nvme-config", "viommu-config", "avail-index", "mem-decode", "activation"]

    def cells(self, hostile_fp=None, calm_fp=None, attacks=None, wall_s=100.0):
        counters = {"map_requests": 10}
        h = cell("ours-hostile", device=counters)
        c = cell("ours-calm", device=counters)
        h["wall_s"] = wall_s
        h["attacks"] = attacks if attacks is not None else [
            {"name": a, "ok": True, "ops": 50000, "seconds": 60, "detail": "x"} for a in self.ATTACKS]
        base = {"log_lines": 3, "rate_limited_lines": 0, "errors_after_done": 0, "peak_rss_kib": 400000,
                "peak_own_rss_kib": 20000, "samples": 90}
        h["footprint"] = {**base, "log_lines": 900, "rate_limited_lines": 80, **(hostile_fp or {})}
        c["footprint"] = {**base, **(calm_fp or {})}
        return [h, c]

    def problems(self, cells):
        _, (problems, _) = judge_lines("hostile", self.SPECS, [HOST, *(line(c) for c in cells), "@@LAB-DONE@@ rc=0"])
        return problems

    def test_a_bounded_vmm_passes(self):
        # 900 lines in 100 s: under 3 + 11 * 100 + 50
        self.assertEqual(self.problems(self.cells()), [])

    def test_memory_beyond_the_calm_vmm_fails(self):
        p = self.problems(self.cells(hostile_fp={"peak_own_rss_kib": 20000 + 33 * 1024}))
        self.assertTrue(any("more than the calm guest's 19 MiB + 32 MiB" in x for x in p), p)
        self.assertEqual(self.problems(self.cells(hostile_fp={"peak_own_rss_kib": 20000 + 31 * 1024})), [])
        # and a bound of its own, whatever the calm VMM did
        p = self.problems(self.cells(hostile_fp={"peak_own_rss_kib": 300 * 1024}, calm_fp={"peak_own_rss_kib": 290 * 1024}))
        self.assertTrue(any("more than 256 MiB" in x for x in p), p)

    def test_a_log_flood_fails(self):
        p = self.problems(self.cells(hostile_fp={"log_lines": 3 + 1100 + 51}))
        self.assertTrue(any("logged 1154 lines in 100 s, more than 1153" in x for x in p), p)
        self.assertEqual(self.problems(self.cells(hostile_fp={"log_lines": 1153})), [])

    def test_every_attack_must_have_run(self):
        attacks = [{"name": a, "ok": True, "ops": 50000, "seconds": 60} for a in self.ATTACKS[:3]]
        attacks.append({"name": "viommu-config", "ok": False, "detail": "no virtio device config capability"})
        attacks.append({"name": "msix-pba", "ok": True, "ops": 3, "seconds": 60})
        p = self.problems(self.cells(attacks=attacks))
        self.assertTrue(any("viommu-config could not run: no virtio device config" in x for x in p), p)
        self.assertTrue(any("msix-pba made 3 operations" in x for x in p), p)
        p = self.problems(self.cells(attacks=attacks[:2]))
        self.assertTrue(any("nvme-config reported nothing" in x for x in p), p)

    def test_every_decode_cycle_and_refused_activation_counts(self):
        # mem-decode's ops are the cycles whose BAR read with Memory Space
        # off was all-ones; activation's the activations refused.
        def ran(name, ops):
            return [{"name": a, "ok": True, "ops": ops if a == name else 50000, "seconds": 5} for a in self.ATTACKS]
        p = self.problems(self.cells(attacks=ran("activation", 999)))
        self.assertTrue(any("attack activation made 999 operations" in x for x in p), p)
        p = self.problems(self.cells(attacks=ran("mem-decode", 19)))
        self.assertTrue(any("attack mem-decode made 19 operations" in x for x in p), p)
        self.assertEqual(self.problems(self.cells(attacks=ran("activation", 1000))), [])
        self.assertEqual(self.problems(self.cells(attacks=ran("mem-decode", 20))), [])

    def test_the_flood_must_reach_the_rate_limiter(self):
        p = self.problems(self.cells(hostile_fp={"rate_limited_lines": 0}))
        self.assertTrue(any("rate limiter never dropped" in x for x in p), p)

    def test_errors_at_release_fail_either_guest(self):
        p = self.problems(self.cells(calm_fp={"errors_after_done": 2}))
        self.assertTrue(any(x.startswith("ours-calm round 1: the VMM logged 2 ERROR") for x in p), p)

    def test_no_footprint_or_no_sample_fails(self):
        h, c = self.cells()
        del h["footprint"]
        p = self.problems([h, c])
        self.assertTrue(any("ours-hostile round 1: no footprint" in x for x in p), p)
        p = self.problems(self.cells(hostile_fp={"samples": 0}))
        self.assertTrue(any("never sampled" in x for x in p), p)
        h, c = self.cells()
        del c["footprint"]
        p = self.problems([h, c])
        self.assertTrue(any("no footprint of the calm guest" in x for x in p), p)

    def test_the_scenario_runs_the_attack_in_one_guest_only(self):
        sc = scenarios.SCENARIOS["hostile"]
        specs, _ = kernels.tool_specs(sc["runs"])
        self.assertIn("lab.hostile=1", specs[0].split(":")[4].split("+"))
        self.assertNotIn("lab.hostile=1", specs[1])
        self.assertEqual((sc["numjobs"], sc["guest_cpus"]), (2, 2))


class HostCrashTest(unittest.TestCase):
    def test_a_panic_outside_a_guest_dump_is_the_lab_hosts(self):
        col = console.Collector()
        for ln in [HOST, "---- guest ours-r1 failed; its serial log and VMM output follow ----",
                   "[   42.6] Kernel panic - not syncing: Fatal exception in interrupt",
                   "---- end of guest ours-r1 log ----",
                   " WARN ours round 1: guest kernel crashed: Kernel panic - not syncing: x; running it again",
                   line({**cell("ours"), "guest_crash": "Kernel panic - not syncing: x"})]:
            col.feed(ln)
        self.assertIsNone(col.host_crash, "a guest's panic, in its log dump or quoted by the tool")
        col.feed("[   87.3] BUG: TASK stack guard page was hit at 000000002172ddef")
        self.assertTrue(col.host_crash.startswith("BUG: TASK stack guard page"))

    def test_a_crashed_lab_host_is_a_warning_when_its_guests_ran_again(self):
        col = console.Collector(2)
        for ln in [HOST, line(cell("qemu+stock")), "[   87.3] BUG: TASK stack guard page was hit"]:
            col.feed(ln)
        first = boot(col)
        second = console.Collector(1)
        for ln in [HOST, line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
            second.feed(ln)
        doc = {"boots": [first, {**boot(second), "attempt": 2}], "cells": col.cells + second.cells,
               "checks": [], "rounds": 1, "first_round": 1}
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], SPECS)
        self.assertEqual(problems, [])
        self.assertTrue(warnings[0].startswith("lab host of round 1: the lab host crashed (BUG: TASK stack guard page"), warnings)


    def test_a_lab_host_that_crashed_before_ready_is_a_warning_when_retried(self):
        col = console.Collector(1)
        col.feed("[    0.613655] Kernel panic - not syncing: timer doesn't work through Interrupt-remapped IO-APIC")
        first = {**boot(col), "host_crash_retried": True}
        second = console.Collector(2)
        for ln in [HOST, line(cell("qemu+stock")), line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
            second.feed(ln)
        doc = {"boots": [first, {**boot(second), "attempt": 2}], "cells": second.cells,
               "checks": [], "rounds": 1, "first_round": 1}
        problems, warnings = judge.judge(doc, scenarios.SCENARIOS["compare"], SPECS)
        self.assertEqual(problems, [])
        self.assertIn("timer doesn't work", warnings[0])
        # Not retried (e.g. the second attempt crashed too): a failure.
        doc["boots"] = [{**boot(col)}]
        doc["cells"] = []
        problems, _ = judge.judge(doc, scenarios.SCENARIOS["compare"], SPECS)
        self.assertTrue(any("never reported ready" in p for p in problems), problems)


class MaxHwTest(unittest.TestCase):
    def test_bounds_per_column(self):
        cells = [{"column": "reuse", "round": 0, "boot": {"max_hw_kb": 512}},
                 {"column": "strict", "round": 0, "boot": {"max_hw_kb": 128}},
                 {"column": "strict", "round": 1, "boot": {"max_hw_kb": 512}},
                 {"column": "old", "round": 0, "boot": {"nvme": True}},
                 {"column": "hung", "round": 0, "boot": None}]
        bounds = {"reuse": (256, None), "strict": (None, 128), "old": (256, None), "hung": (256, None)}
        self.assertEqual(judge.max_hw_problems(cells, bounds), [
            "strict round 2: the NVMe's largest request is 512 KiB, expected <= 128 KiB",
            "old round 1: the guest did not report its NVMe's largest request (max_hw_kb)"])
        self.assertEqual(judge.max_hw_problems(cells, {"reuse": (1024, 2048)}),
                         ["reuse round 1: the NVMe's largest request is 512 KiB, expected >= 1024 and <= 2048 KiB"])


if __name__ == "__main__":
    unittest.main()
