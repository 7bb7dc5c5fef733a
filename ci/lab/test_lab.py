"""Unit tests of the lab runner's serial parsing and judging (no VM)."""

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import re
import sys
import tempfile
import types
import unittest
from pathlib import Path

_loader = importlib.machinery.SourceFileLoader("lab", str(Path(__file__).with_name("lab")))
_spec = importlib.util.spec_from_loader("lab", _loader)
lab = importlib.util.module_from_spec(_spec)
_loader.exec_module(lab)


def _load(name: str):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(Path(__file__).with_name(name)))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


debian_root = _load("debian-root")
fault_census = _load("fault-census")

HOST = '@@LAB-HOST-READY@@ {"kernel":"6.1.0-56-cloud-amd64","nvme":"0000:00:01.0","vfio_group":1,"cpus":2,"bar0":"0xfebf0000-0xfebf3fff"}'


def fio(phase, iops, error=0, counters=None):
    return {"phase": phase, "numjobs": 1, "error": error, "read_kib": iops * 32, "read_bw_kib": iops * 4,
            "read_iops": iops, "read_ms": 8000, "write_kib": 0, "write_bw_kib": 0, "write_iops": 0,
            "write_ms": 0, "counters": counters or {}}


def cell(column, rnd=0, status=None, device=None, counters=None, warnings=()):
    """One @@LAB-CELL@@ record as viommu-bench --serial-report prints it."""
    return {
        "column": column, "round": rnd, "status": status or {"status": "ok"},
        "boot": {"kernel": "6.1.192", "nvme": True, "iommu_groups": "DMA:1", "cmdline": "x", "resv": ""},
        "phases": {
            "verify-4k": {"fio": fio("verify-4k", 10), "device": None},
            "randread-4k": {"fio": fio("randread-4k", 600, counters=counters), "device": device},
        },
        "errors": [], "warnings": list(warnings), "guest_rc": 0, "vmm_rc": 0, "guest_crash": None,
        "bar0_reserved": None, "lower_bound": False, "wall_s": 40.0, "command": "x", "log": "/tmp/bench/logs/x.log",
    }


def line(c):
    return "[  50.1] random kernel noise @@LAB-CELL@@ " + json.dumps(c)


def boot(col, rnd=1):
    return {"round": rnd, "attempt": 1, "host": col.host, "done_rc": col.done_rc, "log": "l",
            "host_crash": col.host_crash, "stalled": col.stalled, "timed_out": col.timed_out,
            "early_exit": col.early_exit, "teardown_hung": col.teardown_hung}


def judge(scenario, specs, lines, rounds=1):
    col = lab.Collector(len(specs))
    for ln in lines:
        col.feed(ln)
    doc = {"boots": [boot(col)], "cells": col.cells, "checks": col.checks, "rounds": rounds, "first_round": 1}
    return col, lab.judge(doc, lab.SCENARIOS[scenario], specs)


SPECS = ["qemu+stock:qemu:viommu:baseline", "ours:vmm:viommu:baseline"]


class CollectorTest(unittest.TestCase):
    def test_good_cells_pass(self):
        col, (problems, warnings) = judge("compare", SPECS, [HOST, line(cell("qemu+stock")), line(cell("ours")), "@@LAB-DONE@@ rc=0"])
        self.assertEqual((problems, warnings), ([], []))
        self.assertEqual(col.host["bar0"], "0xfebf0000-0xfebf3fff")
        self.assertEqual([c["column"] for c in col.cells], ["qemu+stock", "ours"])

    def test_progress_lines_count_as_activity(self):
        col = lab.Collector()
        self.assertTrue(col.feed("[viommu-bench] cell 1/6 round 1/1 ours: randread-4k (ETA 3 min)"))
        self.assertFalse(col.feed("[   12.0] nvme nvme0: 2/0/0 default/read/poll queues"))

    def test_unreadable_marker_is_a_failed_check_not_a_crash(self):
        # CI at b42d6c2: a check line with a raw carriage return and quotes
        # in its detail ended the whole run in a traceback.
        col = lab.Collector()
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"power-off","ok":false,"detail":"VMM said: @@LAB-GUEST@@ { event : boot }\r "}'))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"reset","ok":true,"detail":"a "quoted" word"}'))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"sigterm","ok":true,"detail":"x"}\r'))
        self.assertEqual([(c["name"], c["ok"]) for c in col.checks],
                         [("power-off", False), ("unreadable-check-marker", False), ("sigterm", True)])
        self.assertIn("quoted", col.checks[1]["detail"])

    def test_a_marker_a_kernel_message_cut_is_joined_again(self):
        # CI cold run at 775af2a: the lab host's "hrtimer: interrupt took"
        # warning landed inside a cell's JSON, which then failed as an
        # unreadable marker and lost its round.
        text = line(cell("ours"))
        at = text.index('"phases"')
        col = lab.Collector()
        self.assertTrue(col.feed(HOST))
        self.assertTrue(col.feed(text[:at] + "[   48.538531] hrtimer: interrupt took 8995550 ns"))
        self.assertTrue(col.feed("[   48.538600] Call Trace:"))
        self.assertTrue(col.feed(text[at:] + "\r"))
        self.assertTrue(col.feed('@@LAB-CHECK@@ {"name":"after","ok":true}'))
        self.assertEqual([c["column"] for c in col.cells], ["ours"])
        self.assertEqual([(c["name"], c["ok"]) for c in col.checks], [("after", True)])
        self.assertIsNone(col.host_crash)
        # A crash the kernel printed into the marker is still the host's.
        col = lab.Collector()
        col.feed(text[:at] + "[   49.0] BUG: unable to handle page fault")
        self.assertEqual(col.host_crash, "BUG: unable to handle page fault")
        # Cut and never continued: another marker follows, or the console
        # ends; each a failed check, and the next marker still taken.
        col = lab.Collector()
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
        _, (problems, _) = judge("compare", SPECS, [HOST, line(cell("qemu+stock")), line(bad), "@@LAB-DONE@@ rc=0"])
        self.assertIn("ours round 1: fio verify-4k exited 1: verify failed", problems)
        self.assertIn("ours round 1: fio verify-4k error 84", problems)

    def test_hung_stock_qemu_is_a_warning_hung_ours_a_failure(self):
        hung = {"status": "hung", "phase": "randread-128k", "after_s": 60}
        _, (problems, warnings) = judge("compare", SPECS, [HOST, line(cell("qemu+stock", status=hung)), line(cell("ours", status=hung)), "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["ours round 1: hung in randread-128k (no I/O completed for 60 s; killed)"])
        self.assertEqual(warnings, ["qemu+stock round 1: hung in randread-128k (no I/O completed for 60 s; killed)"])

    def test_a_hang_the_device_owes_fails_whatever_vmm(self):
        owed = {"status": "hung", "phase": "randread-4k", "after_s": 60, "device_owes": True}
        _, (problems, warnings) = judge("compare", SPECS, [HOST, line(cell("qemu+stock", status=owed)), line(cell("ours", status=owed)), "@@LAB-DONE@@ rc=0"])
        want = ": hung in randread-4k (no I/O completed for 60 s; killed): the device owed the driver a request (see the cell's 'state at the hang')"
        self.assertEqual(problems, ["qemu+stock round 1" + want, "ours round 1" + want])
        self.assertEqual(warnings, [])

    def test_a_console_that_ends_without_done_is_a_wedge_and_its_guests_run_again(self):
        # The demo's round 2 at ffa4a45: the log simply ended after a guest
        # ran again, no failure field set; the round was lost.
        col = lab.Collector(2)
        for l in [HOST, line(cell("qemu+stock"))]:
            col.feed(l)
        col.finish(0)
        self.assertIn("ended without @@LAB-DONE@@", col.stalled)
        boots = []

        def boot(todo, attempt, skip=()):
            boots.append(list(todo))
            if attempt == 1:
                return col
            fresh = lab.Collector(len(todo))
            for l in [HOST, line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
                fresh.feed(l)
            fresh.finish(0)
            return fresh

        doc = {"boots": [], "cells": [], "checks": []}
        lab.run_round(doc, 1, SPECS, boot)
        self.assertEqual(boots, [SPECS, [SPECS[1]]])
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["ours", "qemu+stock"])
        self.assertTrue(doc["boots"][0].get("host_stall_retried"))
        # A console that ended with its marker, or a crash already named,
        # is not turned into a wedge.
        done = lab.Collector(0)
        done.feed("@@LAB-DONE@@ rc=0")
        done.finish(0)
        self.assertIsNone(done.stalled)

    def test_missing_cells_and_no_done_fail(self):
        _, (problems, _) = judge("compare", SPECS, [HOST, line(cell("qemu+stock"))])
        self.assertIn("lab host of round 1: never finished the scenario", problems)
        self.assertIn("ours round 1: no result (its lab host stopped before it ran)", problems)

    def test_the_tools_warnings_are_the_labs(self):
        retried = cell("ours", warnings=["first attempt failed (guest kernel crashed: PANIC: double fault); ran it again (log x)"])
        _, (problems, warnings) = judge("compare", SPECS, [HOST, line(cell("qemu+stock")), line(retried), "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        self.assertEqual(warnings, ["ours round 1: first attempt failed (guest kernel crashed: PANIC: double fault); ran it again (log x)"])

    def test_expected_counters_must_move(self):
        specs = ["ours-lazy:vmm:viommu:patched:lazy", "ours-lazy+pool:vmm:viommu:patched:lazy"]
        for deferred, ok in ((0, False), (100, True)):
            dev = {"map_requests": 100, "unmap_requests": 100, "flush_requests": 3, "vfio_calls": 104,
                   "deferred_unmaps": deferred, "flush_vfio_calls": 2, "merged_ranges": 0}
            pool = cell("ours-lazy+pool", counters={"iommu-dma-pool/hits": 9 if ok else 0})
            _, (problems, _) = judge("lazy-smoke", specs, [HOST, line(cell("ours-lazy", device=dev)), line(pool), "@@LAB-DONE@@ rc=0"])
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
            _, (problems, _) = judge("poll-smoke", specs, [HOST] + [line(c) for c in cells] + ["@@LAB-DONE@@ rc=0"])
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
            return lab.idle_problems(c)
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
        self.assertEqual(lab.idle_problems(cell("x")), (["no idle phase reported"], []))
        self.assertEqual(lab.SCENARIOS["smoke-6.12"]["idle_check"], ["ours+lazy+reuse", "ours+lazy+reuse-1ms"])

    def test_checks_scenarios(self):
        _, (problems, _) = judge("vmm-errors", [], [HOST, '@@LAB-CHECK@@ {"name":"busy-device","ok":false,"detail":"exit 1"}', "@@LAB-DONE@@ rc=1"])
        self.assertEqual(problems, ["lab host of round 1: the scenario exited 1", "check busy-device: exit 1"])
        _, (problems, _) = judge("vmm-errors", [], [HOST, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["the scenario reported no check"])

    def test_the_iommufd_scenario_fails_on_a_host_without_iommufd(self):
        specs = lab.SCENARIOS["iommufd"]["runs"]
        cells = [line(cell(lab.tag_of(s), device={"map_requests": 5, "vfio_calls": 5, "polls_found": 0})) for s in specs]
        skipped = '@@LAB-CHECK@@ {"name":"setup","ok":true,"skipped":true,"detail":"iommufd checks skipped: no /dev/iommu"}'
        _, (problems, _) = judge("iommufd", specs, [HOST, skipped, *cells, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, ["check setup: skipped: iommufd checks skipped: no /dev/iommu"])
        ran = '@@LAB-CHECK@@ {"name":"map","ok":true,"detail":"x"}'
        _, (problems, _) = judge("iommufd", specs, [HOST, ran, *cells, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        # vfio-backend on the same host only notes the skip.
        _, (problems, _) = judge("vfio-backend", [], [HOST, skipped, "@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])


class HostileTest(unittest.TestCase):
    SPECS = lab.SCENARIOS["hostile"]["runs"]
    ATTACKS = ["msix-pba", "msix-table", "nvme-config", "viommu-config", "avail-index"]

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
        _, (problems, _) = judge("hostile", self.SPECS, [HOST, *(line(c) for c in cells), "@@LAB-DONE@@ rc=0"])
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
        sc = lab.SCENARIOS["hostile"]
        specs, _ = lab.tool_specs(sc["runs"])
        self.assertIn("lab.hostile=1", specs[0].split(":")[4].split("+"))
        self.assertNotIn("lab.hostile=1", specs[1])
        self.assertEqual((sc["numjobs"], sc["guest_cpus"]), (2, 2))


class HostCrashTest(unittest.TestCase):
    def test_a_panic_outside_a_guest_dump_is_the_lab_hosts(self):
        col = lab.Collector()
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
        col = lab.Collector(2)
        for ln in [HOST, line(cell("qemu+stock")), "[   87.3] BUG: TASK stack guard page was hit"]:
            col.feed(ln)
        first = boot(col)
        second = lab.Collector(1)
        for ln in [HOST, line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
            second.feed(ln)
        doc = {"boots": [first, {**boot(second), "attempt": 2}], "cells": col.cells + second.cells,
               "checks": [], "rounds": 1, "first_round": 1}
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], SPECS)
        self.assertEqual(problems, [])
        self.assertTrue(warnings[0].startswith("lab host of round 1: the lab host crashed (BUG: TASK stack guard page"), warnings)


    def test_a_lab_host_that_crashed_before_ready_is_a_warning_when_retried(self):
        col = lab.Collector(1)
        col.feed("[    0.613655] Kernel panic - not syncing: timer doesn't work through Interrupt-remapped IO-APIC")
        first = {**boot(col), "host_crash_retried": True}
        second = lab.Collector(2)
        for ln in [HOST, line(cell("qemu+stock")), line(cell("ours")), "@@LAB-DONE@@ rc=0"]:
            second.feed(ln)
        doc = {"boots": [first, {**boot(second), "attempt": 2}], "cells": second.cells,
               "checks": [], "rounds": 1, "first_round": 1}
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], SPECS)
        self.assertEqual(problems, [])
        self.assertIn("timer doesn't work", warnings[0])
        # Not retried (e.g. the second attempt crashed too): a failure.
        doc["boots"] = [{**boot(col)}]
        doc["cells"] = []
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], SPECS)
        self.assertTrue(any("never reported ready" in p for p in problems), problems)


class SettingsTest(unittest.TestCase):
    def args(self, cmd, **kw):
        base = dict(cmd=cmd, mode=None, bs=None, runtime=None, guest_cpus=None, numjobs=None, rounds=None,
                    guest_timeout=600, stall_seconds=60)
        base.update(kw)
        return types.SimpleNamespace(**base)

    def test_demo_defaults_flags_and_scenarios(self):
        k = lab.knobs_of(self.args("demo"), lab.SCENARIOS["compare"])
        self.assertEqual((k["bs"], k["numjobs"], k["guest_cpus"], k["rounds"], k["mode"]), ("4k,128k", "1,2", "2", 3, "fio"))
        k = lab.knobs_of(self.args("demo", runtime=20, rounds=5), lab.SCENARIOS["compare"])
        self.assertEqual((k["runtime"], k["rounds"]), ("20", 5))
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["smp-smoke"])
        self.assertEqual((k["bs"], k["numjobs"], k["guest_cpus"], k["mode"], k["rounds"]), ("128k,4k", "2", "2", "mixed", 1))
        args = lab.report_args(k, ["a:vmm:viommu:baseline"], "0000:00:01.0")
        self.assertEqual(args[:4], ["--device", "0000:00:01.0", "--columns", "a:vmm:viommu:baseline"])
        self.assertIn("--rounds", args)

    def test_iodepth_reaches_the_tool(self):
        k = lab.knobs_of(self.args("demo"), lab.SCENARIOS["compare"])
        self.assertEqual(k["iodepth"], "64")
        k = lab.knobs_of(self.args("demo", iodepth=4), lab.SCENARIOS["compare"])
        args = lab.report_args(k, ["a:vmm:viommu:baseline"], "0000:00:01.0")
        self.assertEqual(args[args.index("--iodepth") + 1], "4")
        self.assertEqual(args[args.index("--ramp") + 1], "2", "the demo ramps 2 s by default")
        k = lab.knobs_of(self.args("run", ramp=None), lab.SCENARIOS["compare"])
        self.assertEqual(lab.report_args(k, ["a:vmm:viommu:baseline"], "x")[args.index("--ramp") + 1], "0")

    def test_demo_runs_what_the_readme_standing_is_measured_in(self):
        # Issue 32: the demo's defaults are the headline's configuration.
        k = lab.knobs_of(self.args("demo"), lab.SCENARIOS["compare"])
        self.assertEqual((k["host_iommu"], k["ramp"], k["lead"]), ("virtio", "2", "ours+patched-lazy"))
        self.assertEqual((k["vmm_qemu"], k["host_kernel"], k["outer_qemu"]), ("11.1", "6.12", "11.1"))
        lazy = [r for r in lab.DEMO["runs"] if r.startswith(("ours+patched-lazy:", "qemu+patched:"))]
        self.assertEqual(len(lazy), 2)
        self.assertTrue(all(r.endswith("iommu.reuse_window_ms=1000") for r in lazy), lazy)
        strict = next(r for r in lab.DEMO["runs"] if r.startswith("ours+patched-strict:"))
        self.assertNotIn("reuse_window", strict)
        args = lab.report_args(k, lab.DEMO["runs"], "x")
        self.assertEqual(args[args.index("--lead") + 1], "ours+patched-lazy")
        # The lead goes to the tool only when that column runs.
        self.assertNotIn("--lead", lab.report_args(k, ["a:vmm:viommu:baseline"], "x"))
        # Plain runs keep the lab's own defaults.
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["compare"])
        self.assertEqual((k["host_iommu"], k["ramp"], k["lead"]), ("vtd", "0", None))

    def test_outer_qemu_is_the_binary_the_lab_host_runs_under(self):
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["smoke"])
        self.assertEqual(k["outer_qemu"], "7.2")
        self.assertEqual(lab.outer_qemu("7.2"), "qemu-system-x86_64")
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        cmd = lab.host_command(image, Path("/d"), "c", 2, "vtd", "", "/roots/q/bin/qemu-system-x86_64")
        self.assertEqual(cmd[0], "/roots/q/bin/qemu-system-x86_64")
        k = lab.knobs_of(self.args("run", outer_qemu="11.1"), lab.SCENARIOS["smoke"])
        self.assertEqual(k["outer_qemu"], "11.1")

    def test_outer_tcg_threading_is_multi_unless_asked(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["smoke"])
        self.assertEqual(k["outer_tcg"], "multi")
        cmd = lab.host_command(image, Path("/d"), "c", 2)
        self.assertEqual(cmd[cmd.index("-accel") + 1], "tcg,thread=multi")
        k = lab.knobs_of(self.args("run", outer_tcg="single"), lab.SCENARIOS["smoke"])
        cmd = lab.host_command(image, Path("/d"), "c", 2, tcg_thread=k["outer_tcg"])
        self.assertEqual(cmd[cmd.index("-accel") + 1], "tcg,thread=single")
        self.assertEqual(cmd.count("-accel"), 1)

    def test_host_iommu_picks_device_kernel_and_cmdline(self):
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["compare"])
        self.assertEqual(k["host_iommu"], "vtd")
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        cmd = lab.host_command(image, Path("/d"), "c", 2)
        self.assertIn("intel-iommu,intremap=on", cmd)
        k = lab.knobs_of(self.args("demo", host_iommu="virtio"), lab.SCENARIOS["compare"])
        cmd = lab.host_command(image, Path("/d"), "c", 2, k["host_iommu"])
        self.assertIn("virtio-iommu-pci", cmd)
        self.assertNotIn("intel-iommu,intremap=on", cmd)
        self.assertEqual(lab.HOST_IOMMUS["virtio"]["kernel"], "labhost")
        self.assertIn("allow_unsafe_interrupts", lab.HOST_IOMMUS["virtio"]["cmdline"])

    def test_multipath_nvme_is_a_subsystem_of_two_controllers(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        # One controller unless asked: the drive on it, as before.
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["lbs4k-smoke"])
        self.assertFalse(k["nvme_multipath"])
        one = lab.nvme_args(k["nvme_ioqpairs"], k["nvme_mdts"], k["nvme_lbs"], k["nvme_multipath"])
        self.assertEqual(one, ["-device", "nvme,serial=lab0,drive=nv0,logical_block_size=4096,physical_block_size=4096"])
        self.assertEqual(lab.host_command(image, Path("/d"), "c", 2, nvme=one).count("-device"), 2)
        # The multipath scenario (or --nvme-multipath on any scenario).
        k = lab.knobs_of(self.args("run"), lab.SCENARIOS["multipath"])
        self.assertTrue(k["nvme_multipath"])
        self.assertTrue(lab.knobs_of(self.args("run", nvme_multipath=True), lab.SCENARIOS["smoke"])["nvme_multipath"])
        args = lab.nvme_args(1, 3, 4096, True)
        devs = args[1::2]
        self.assertTrue(all(a == "-device" for a in args[::2]), args)
        self.assertEqual(devs[0], "nvme-subsys,id=subsys0,nqn=lab-subsys0")
        ctrls = [d for d in devs if d.startswith("nvme,")]
        self.assertEqual(len(ctrls), 2)
        for c in ctrls:
            # No drive on a controller of a subsystem: the namespace has it.
            self.assertIn("subsys=subsys0", c)
            self.assertIn("max_ioqpairs=1", c)
            self.assertIn("mdts=3", c)
            self.assertNotIn("drive=", c)
        self.assertEqual(len({c.split(",id=")[1] for c in ctrls}), 2, "distinct ids")
        self.assertEqual(devs[-1], "nvme-ns,drive=nv0,nsid=1,shared=on,logical_block_size=4096,physical_block_size=4096")
        cmd = lab.host_command(image, Path("/d"), "c", 2, nvme=args)
        self.assertEqual(cmd.count("-device"), 5)
        self.assertIn("nvme-ns,drive=nv0,nsid=1,shared=on,logical_block_size=4096,physical_block_size=4096", cmd)

    def test_the_debian13_userland_scenario(self):
        sc = lab.SCENARIOS["debian13-userland"]
        self.assertEqual(sc["userland"], ["fio", "busybox-static"])
        self.assertEqual({lab.vmm_of(s) for s in sc["runs"]}, {"qemu", "vmm"}, "a stock QEMU column and one of ours")
        k = lab.knobs_of(self.args("run"), sc)
        self.assertEqual(k["vmm_qemu"], "11.1")
        k["tool_specs"], _ = lab.tool_specs(sc["runs"])
        knobs = lab.host_knobs(sc, k, sc["runs"], 1)
        # The stock QEMU is the root's (found on its PATH), not /lab/qemu's;
        # the script checks its version.
        self.assertEqual((knobs["userland"], knobs["scenario"]), ("11.1", "debian13-userland"))
        self.assertNotIn("qemu", knobs)
        k = lab.knobs_of(self.args("run", vmm_qemu="10.0"), sc)
        k["tool_specs"], _ = lab.tool_specs(sc["runs"])
        self.assertEqual(lab.host_knobs(sc, k, sc["runs"], 1)["userland"], "10.0")
        # Any other scenario with --vmm-qemu 11.1: QEMU from /lab/qemu.
        k = lab.knobs_of(self.args("run", vmm_qemu="11.1"), lab.SCENARIOS["smoke"])
        k["tool_specs"], _ = lab.tool_specs(lab.SCENARIOS["smoke"]["runs"])
        knobs = lab.host_knobs(lab.SCENARIOS["smoke"], k, lab.SCENARIOS["smoke"]["runs"], 1)
        self.assertEqual(knobs["qemu"], "/lab/qemu/qemu-system-x86_64")
        self.assertNotIn("userland", knobs)
        cmd = lab.build_image_command({"baseline"}, ["/t/vmm"], userland="/roots/u/bin/qemu-system-x86_64")
        self.assertEqual(cmd[cmd.index("--userland") + 1], "/roots/u/bin/qemu-system-x86_64")
        self.assertNotIn("--vmm-qemu", cmd)
        self.assertEqual(cmd[-2:], ["--bin", "/t/vmm"])
        self.assertNotIn("--userland", lab.build_image_command({"baseline"}, []))

    def bench_args_of(self, knobs: dict) -> list[str]:
        """host-lib.sh's bench_args for a lab host booted with KNOBS (as
        boot_host puts them on its command line), one flag or value a line."""
        lib = Path(__file__).with_name("host-lib.sh")
        with tempfile.TemporaryDirectory() as d:
            cmdline = Path(d) / "cmdline"
            cmdline.write_text("console=ttyS0 " + " ".join(f"lab.{n}={v}" for n, v in knobs.items()) + "\n")
            out = __import__("subprocess").run(["busybox", "sh", "-c", f". {lib}; BDF=0000:00:01.0; bench_args"], capture_output=True,
                                               text=True, env={"LAB_CMDLINE": str(cmdline), "PATH": "/usr/bin:/bin"})
        self.assertEqual(out.returncode, 0, out)
        return out.stdout.splitlines()

    def test_named_kernels_reach_the_bench_tool(self):
        sc = lab.SCENARIOS["smoke"]
        k = lab.knobs_of(self.args("run"), sc)
        runs = ["a:qemu:viommu:baseline-6.12", "b:vmm:viommu:baseline-7.3"]
        k["tool_specs"], kernels = lab.tool_specs(runs)
        k.update(kernels)
        args = self.bench_args_of(lab.host_knobs(sc, k, runs, 1))
        self.assertEqual(args[args.index("--kernel") + 1], "baseline-7.3=/lab/guest/baseline-7.3.bzImage")
        self.assertEqual(args[args.index("--kernel-stock") + 1], "/lab/guest/baseline-6.12.bzImage")

    def test_breakdown_reaches_the_bench_tool(self):
        sc = lab.SCENARIOS["breakdown"]
        k = lab.knobs_of(self.args("run"), sc)
        k["tool_specs"], kernels = lab.tool_specs(sc["runs"])
        k.update(kernels)
        knobs = lab.host_knobs(sc, k, sc["runs"], 1)
        self.assertEqual(knobs["breakdown"], "1")
        args = self.bench_args_of(knobs)
        self.assertIn("--breakdown", args)
        self.assertEqual(args[args.index("--numjobs") + 1], "1,2")
        self.assertEqual(args[args.index("--bs") + 1], "4k,128k")
        self.assertEqual(args[args.index("--guest-cpus") + 1], "2")
        self.assertEqual(args[args.index("--kernel-stock") + 1], "/lab/guest/baseline-6.12.bzImage")
        # Stock 6.12 behind stock QEMU and behind ours, and ours + patched strict.
        cols = args[args.index("--columns") + 1].split(",")
        self.assertEqual([c.split(":")[:4] for c in cols], [["qemu+stock", "qemu", "viommu", "baseline"],
                                                            ["ours+stock", "vmm", "viommu", "baseline"],
                                                            ["ours+patched-strict", "vmm", "viommu", "patched"]])
        # The demo's stack: our 6.12 lab host behind virtio-iommu, QEMU 11.1.
        self.assertEqual((k["host_iommu"], k["host_kernel"], k["vmm_qemu"], k["outer_qemu"], k["rounds"]),
                         ("virtio", "6.12", "11.1", "11.1", 1))
        # The flag on any scenario; off by default.
        smoke = lab.SCENARIOS["smoke"]
        for flag, want in ((True, True), (False, False)):
            k = lab.knobs_of(self.args("run", breakdown=flag), smoke)
            k["tool_specs"], kernels = lab.tool_specs(smoke["runs"])
            k.update(kernels)
            knobs = lab.host_knobs(smoke, k, smoke["runs"], 1)
            self.assertEqual(knobs["breakdown"], "1" if want else "0")
            self.assertEqual("--breakdown" in self.bench_args_of(knobs), want)
        # The scenario fails a vIOMMU guest that recorded no breakdown.
        ok = {"column": "ours+stock", "round": 0, "status": {"status": "ok"}, "warnings": [],
              "phases": {"breakdown-randread-4k": {"breakdown": {"server_tid": 7}}}}
        bad = {"column": "qemu+stock", "round": 0, "status": {"status": "ok"}, "phases": {},
               "warnings": ["breakdown-randread-4k: not recorded: --breakdown: no trace event raw_syscalls/sys_enter"]}
        self.assertEqual(lab.breakdown_problems([ok, bad], sc["runs"]),
                         ["qemu+stock round 1: no breakdown with a request-serving thread (breakdown-randread-4k: not recorded: "
                          "--breakdown: no trace event raw_syscalls/sys_enter)"])
        # The lab host's own 6.12 kernel has what --breakdown records.
        # (Both fragments: a 6.12 build merges the common one first.)
        frag = "".join(Path(__file__).with_name(f).read_text() for f in ("host-config-fragment", "host-config-fragment-6.12"))
        for opt in ("CONFIG_FTRACE_SYSCALLS=y", "CONFIG_KPROBE_EVENTS=y"):
            self.assertIn(opt, frag)
        # ENABLE_DEFAULT_TRACERS cannot be on beside the syscall events (it
        # needs !GENERIC_TRACER): build-kernel.sh would refuse the config.
        self.assertNotIn("CONFIG_ENABLE_DEFAULT_TRACERS=y", frag)

    def test_the_debian13_userland_has_no_qemu_7_2(self):
        with tempfile.TemporaryDirectory() as d:
            orig = lab.CACHE, lab.outer_version
            lab.CACHE, lab.outer_version = Path(d), lambda b: "QEMU emulator version 7.2"
            try:
                with self.assertRaises(lab.LabError) as e:
                    lab.run_scenario(self.args("run", scenario="debian13-userland", runs=None, vmm_qemu="7.2", log=None, bin=None))
            finally:
                lab.CACHE, lab.outer_version = orig
            self.assertIn("has QEMU 10.0 or 11.1, not 7.2", str(e.exception))
            self.assertEqual(list((Path(d) / "runs").iterdir()), [], "its run directory is gone")

    def test_without_flag_drops_a_flag_and_its_value(self):
        lib = Path(__file__).with_name("host-lib.sh")
        script = f". {lib}; printf '%s\\n' --kernel-stock k --initramfs /lab/guest/initramfs.cpio --vmm v | without_flag --initramfs"
        for sh in ("sh", "busybox"):
            cmd = [sh, "sh", "-c", script] if sh == "busybox" else [sh, "-c", script]
            out = __import__("subprocess").run(cmd, capture_output=True, text=True)
            self.assertEqual(out.stdout.split(), ["--kernel-stock", "k", "--vmm", "v"], (sh, out))

    def test_lab_check_prints_json_whatever_the_detail(self):
        # A guest's boot record with its carriage return and quotes in a
        # check's detail broke CI's vmm-exits once (the runner's json.loads).
        lib = Path(__file__).with_name("host-lib.sh")
        detail = '@@LAB-GUEST@@ {"event":"boot","busybox":"v1.35.0"}\r\n\ttab \\ back'
        script = f'. {lib}; lab_check power-off false "$D"; echo "rc=$?"; lab_check ok true x'
        for sh in ("sh", "busybox"):
            cmd = [sh, "sh", "-c", script] if sh == "busybox" else [sh, "-c", script]
            out = __import__("subprocess").run(cmd, capture_output=True, text=True, env={"D": detail, "PATH": "/usr/bin:/bin"})
            lines = out.stdout.splitlines()
            self.assertEqual(len(lines), 3, (sh, out))
            first = json.loads(lines[0].split("@@LAB-CHECK@@ ", 1)[1])
            self.assertEqual((first["name"], first["ok"]), ("power-off", False))
            self.assertNotRegex(first["detail"], r'[\x00-\x1f"\\]')
            self.assertEqual(lines[1], "rc=1")
            self.assertTrue(json.loads(lines[2].split(" ", 1)[1])["ok"])

    def test_lab_skip_names_only_checks_that_passed_before(self):
        # The runner's lab.skip after a lab host crash: a check (or a pair)
        # runs unless every name is in it.
        lib = Path(__file__).with_name("host-lib.sh")
        with tempfile.TemporaryDirectory() as d:
            cmdline = Path(d) / "cmdline"
            cmdline.write_text("console=ttyS0 lab.skip=power-off,sigkill,after-sigkill-x lab.round=1\n")
            script = (f". {lib}; for c in power-off reset 'sigkill after-sigkill' sigkill; do "
                      "if lab_skip $c >/dev/null; then echo skip; else echo run; fi; done")
            for sh in ("sh", "busybox"):
                cmd = [sh, "sh", "-c", script] if sh == "busybox" else [sh, "-c", script]
                out = __import__("subprocess").run(cmd, capture_output=True, text=True,
                                                   env={"LAB_CMDLINE": str(cmdline), "PATH": "/usr/bin:/bin"})
                self.assertEqual(out.stdout.split(), ["skip", "run", "run", "skip"], (sh, out))
            cmdline.write_text("console=ttyS0\n")
            out = __import__("subprocess").run(["sh", "-c", f". {lib}; lab_skip power-off && echo skip || echo run"],
                                               capture_output=True, text=True, env={"LAB_CMDLINE": str(cmdline), "PATH": "/usr/bin:/bin"})
            self.assertEqual(out.stdout.split(), ["run"])

    def test_new_scenarios_have_scripts_and_checks(self):
        for name in ("multipath", "own-kernel", "debian13-userland"):
            sc = lab.SCENARIOS[name]
            self.assertTrue((Path(__file__).with_name("scenarios") / f"{sc['script']}.sh").is_file(), name)
            self.assertTrue(sc["checks"], name)


class StopTest(unittest.TestCase):
    def test_a_stopped_runner_kills_its_lab_hosts(self):
        p = __import__("subprocess").Popen(["sleep", "60"])
        lab.LIVE_HOSTS.add(p)
        try:
            with self.assertRaises(SystemExit) as e:
                lab.stop_lab_hosts(15, None)
            self.assertEqual(e.exception.code, 143)
            self.assertEqual(p.wait(timeout=10), -9)
        finally:
            lab.LIVE_HOSTS.discard(p)


class MaxHwTest(unittest.TestCase):
    def test_bounds_per_column(self):
        cells = [{"column": "reuse", "round": 0, "boot": {"max_hw_kb": 512}},
                 {"column": "strict", "round": 0, "boot": {"max_hw_kb": 128}},
                 {"column": "strict", "round": 1, "boot": {"max_hw_kb": 512}},
                 {"column": "old", "round": 0, "boot": {"nvme": True}},
                 {"column": "hung", "round": 0, "boot": None}]
        bounds = {"reuse": (256, None), "strict": (None, 128), "old": (256, None), "hung": (256, None)}
        self.assertEqual(lab.max_hw_problems(cells, bounds), [
            "strict round 2: the NVMe's largest request is 512 KiB, expected <= 128 KiB",
            "old round 1: the guest did not report its NVMe's largest request (max_hw_kb)"])
        self.assertEqual(lab.max_hw_problems(cells, {"reuse": (1024, 2048)}),
                         ["reuse round 1: the NVMe's largest request is 512 KiB, expected >= 1024 and <= 2048 KiB"])


class KernelsTest(unittest.TestCase):
    def test_every_7x_guest_boots_with_the_labs_7x_parameters(self):
        # Without noxsave a 7.3 guest crashes at boot in the lab (LAB_7X_PARAMS).
        runs = [s for sc in lab.SCENARIOS.values() for s in sc.get("runs", [])] + lab.seven_three_runs("x=1")
        seven = [s for s in runs if s.split(":")[3].endswith("-7.3")]
        self.assertGreaterEqual(len(seven), 8)
        for s in seven:
            self.assertIn(lab.LAB_7X_PARAMS, s.split(":", 4)[4].split("+"), s)
        # The demo's 7.3 lazy column gets the demo's reuse window, and the
        # tool gets the 7.3 kernels by name beside the 6.12 ones.
        extra = lab.seven_three_runs(lab.DEMO_LAZY_OPTS)
        self.assertTrue(extra[2].endswith("+" + lab.DEMO_LAZY_OPTS), extra)
        _, knobs = lab.tool_specs(lab.DEMO["runs"] + extra)
        self.assertEqual(knobs["kernels"], "baseline-7.3,patched-7.3")

    def test_ci_runs_the_73_series_on_one_73_kernel(self):
        # smoke-7.3-ci (by hand) needs one 7.3 kernel built: the patched one.
        sc = lab.SCENARIOS["smoke-7.3-ci"]
        self.assertEqual({s.split(":")[3] for s in sc["runs"]}, {"patched-7.3"})
        full = [lab.tag_of(s) for s in lab.SCENARIOS["smoke-7.3"]["runs"]]
        self.assertEqual([lab.tag_of(s) for s in sc["runs"]], [t for t in full if t not in ("qemu+stock", "ours+lazy")])
        self.assertIn("link_hits", sc["expect"]["ours+lazy+reuse"])

    def test_ci_runs_smoke_612_without_its_lazy_guest_that_has_no_cache(self):
        sc, full = lab.SCENARIOS["smoke-6.12-ci"], lab.SCENARIOS["smoke-6.12"]
        self.assertEqual([lab.tag_of(s) for s in sc["runs"]], [lab.tag_of(s) for s in full["runs"] if lab.tag_of(s) != "ours+lazy"])
        # the reuse guests still run lazy and are judged as in smoke-6.12
        self.assertEqual(sc["expect"]["ours+lazy+reuse"], full["expect"]["ours+lazy+reuse"])
        self.assertEqual(sc["idle_check"], full["idle_check"])
        self.assertEqual(sc["max_hw_kb"], full["max_hw_kb"])

    def test_every_column_a_scenario_judges_is_one_it_runs(self):
        for name, sc in lab.SCENARIOS.items():
            tags = {lab.tag_of(s) for s in sc.get("runs", [])}
            named = set(sc.get("expect", {})) | set(sc.get("expect_zero", {}))
            named |= set(sc.get("idle_check", [])) | set(sc.get("max_hw_kb", {}))
            if "hostile" in sc:
                named |= {sc["hostile"]["column"], sc["hostile"]["control"]}
            self.assertLessEqual(named, tags, name)

    @staticmethod
    def ci_lab_steps() -> list[str]:
        text = (Path(__file__).resolve().parent.parent / "test.sh").read_text()
        m = re.search(r"lab_steps=\(([^)]*)\)", text)
        assert m, "ci/test.sh has no lab_steps=( ... )"
        return m.group(1).split()

    def test_ci_runs_only_scenarios_the_lab_has(self):
        ran = self.ci_lab_steps()
        self.assertIn("smoke-6.12-ci", ran)
        self.assertIn("iommufd", ran)
        for name in ran:
            self.assertIn(name, lab.SCENARIOS)

    def test_ci_builds_its_kernels_in_the_order_its_steps_need_them(self):
        # Three kernels, all 6.12 (the stock guest is stock 6.12, the smoke
        # steps' patched guest patched 6.12; 6.1 and 7.3 boot by hand), each
        # once, in the order of the first step that boots it, and the steps
        # grouped by kernel: the background build (ci/prebuild-kernels.sh)
        # then works on the next group's kernel while a group runs.
        self.assertEqual(lab.kernels_to_build(self.ci_lab_steps()),
                         [("6.12", "baseline"), ("6.12", "patched"), ("6.12", "labhost")])

    def test_a_scenario_that_boots_its_own_guests_is_told_their_kernel(self):
        # vmm-exits.sh boots /lab/guest/$(lab_arg kernel_patched).bzImage.
        self.assertEqual(lab.own_kernel_knobs(lab.SCENARIOS["vmm-exits"]), {"kernel_patched": "patched-6.12"})
        self.assertEqual(lab.own_kernel_knobs(lab.SCENARIOS["vmm-boot"]), {"kernel_stock": "baseline"})
        self.assertEqual(lab.own_kernel_knobs(lab.SCENARIOS["smoke"]), {})

    def test_scenarios_without_guests_need_no_kernel(self):
        self.assertEqual(lab.kernels_to_build(["vfio-backend", "vmm-errors"]), [])
        self.assertEqual(lab.kernels_to_build(["vmm-boot"]), [("6.1", "baseline")])
        self.assertEqual(lab.kernels_to_build(["iommufd"]), [("6.12", "baseline"), ("6.12", "labhost")])
        with self.assertRaises(lab.LabError):
            lab.kernels_to_build(["no-such-scenario"])

    def test_the_tool_gets_two_kernels_named_by_knobs(self):
        specs, knobs = lab.tool_specs(lab.SCENARIOS["compare"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12", "kernel_patched": "patched-6.12"})
        self.assertEqual(specs[3], "ours+patched-strict:vmm:viommu:patched:strict")
        self.assertEqual(specs[5], "no-viommu:qemu:none:baseline")
        specs, knobs = lab.tool_specs(lab.SCENARIOS["smoke-6.12"]["runs"])
        self.assertEqual(knobs, {"kernel_patched": "patched-6.12"})
        _, knobs = lab.tool_specs(lab.SCENARIOS["smoke"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12"})
        _, knobs = lab.tool_specs(lab.SCENARIOS["compare-6.1"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline", "kernel_patched": "patched"})
        # A second version of a variant goes to the tool by name.
        specs, knobs = lab.tool_specs(["a:qemu:viommu:baseline-6.12", "b:qemu:viommu:baseline-7.3:noxsave",
                                       "c:vmm:viommu:baseline-7.3", "d:vmm:viommu:patched"])
        self.assertEqual(specs, ["a:qemu:viommu:baseline", "b:qemu:viommu:baseline-7.3:noxsave",
                                 "c:vmm:viommu:baseline-7.3", "d:vmm:viommu:patched"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12", "kernel_patched": "patched", "kernels": "baseline-7.3"})
        with self.assertRaisesRegex(lab.LabError, "not baseline"):
            lab.tool_specs(["a:vmm:viommu:stock-6.12"])

    def test_scaling_runs_both_job_counts_in_each_guest(self):
        k = lab.knobs_of(SettingsTest.args(None, "run"), lab.SCENARIOS["scaling"])
        self.assertEqual((k["numjobs"], k["guest_cpus"], k["mode"]), ("1,2", "2", "fio"))
        # The demo's default guests are 6.12; 6.1 stays in CI as a smoke test.
        self.assertTrue(all(r.split(":")[3].endswith("-6.12") for r in lab.SCENARIOS["compare"]["runs"]))


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
            col = lab.Collector(len(todo))
            if attempt == 1 or every_time:
                for raw in first(todo):
                    col.feed(raw)
            else:
                col.feed(HOST)
                for spec in todo:
                    col.feed(line(cell(lab.tag_of(spec))))
                col.feed("@@LAB-DONE@@ rc=0")
            col.finish(0)
            return col
        doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}
        with contextlib.redirect_stderr(io.StringIO()):
            lab.run_round(doc, 1, specs, boot)
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
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("unfit" in w and "400 ppm" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # Unfit every time: the last one is a problem, not a silent pass.
        doc, _ = self.troubled_round(specs, lambda todo: ['@@LAB-HOST-UNFIT@@ {"why":"TSC"}', "@@LAB-DONE@@ rc=1"],
                                     every_time=True)
        self.assertEqual(len(doc["boots"]), lab.HOST_BOOTS_PER_ROUND)
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertTrue(any("unfit" in p for p in problems), problems)

    def test_a_vmm_stuck_in_the_lab_hosts_kernel_sends_the_rest_to_a_fresh_host(self):
        # CI of 2026-11-27: a VMM SIGKILL did not end held the NVMe, and the
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
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("stayed in the lab host's kernel" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # Every lab host keeps one: the last one's is a problem.
        doc, _ = self.troubled_round(specs, lambda todo: [HOST, '@@LAB-HOST-STUCK@@ {"why":"stuck"}', "@@LAB-DONE@@ rc=1"],
                                     every_time=True)
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertTrue(any("stayed in the lab host's kernel" in p for p in problems), problems)

    def test_a_guest_with_the_emulations_faults_in_every_attempt_runs_in_a_fresh_host(self):
        # CI of 2026-11-27 (smoke-7.3-ci): one lab host gave a guest a hang
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
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], specs)
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
            problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
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
        self.assertEqual(lab.judge(doc, lab.SCENARIOS["compare"], specs)[0], [])
        # QEMU's device owing the driver a request: judged where it ran.
        owed = "state at the hang: THE DEVICE OWES THE DRIVER A REQUEST: vCPU0 in __viommu_sync_req+0x10 waits; " + spin[19:]
        doc, calls = self.troubled_round(specs, first([owed], {**hung, "device_owes": True}))
        self.assertEqual(calls, [specs])

    def test_a_guests_hangs_on_a_lab_host_that_then_crashed_run_in_a_fresh_host(self):
        # Demo of 2026-11-28: stock QEMU's guest (then no vCPU state to read)
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
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertEqual(problems, [])
        self.assertTrue(any("crashed" in w and "ran again in a fresh one" in w for w in warnings), warnings)
        # The lab host running on: the same guest is judged as it is.
        doc, calls = self.troubled_round(specs, first(end="@@LAB-DONE@@ rc=0"))
        self.assertEqual(calls, [specs])
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertTrue(any(p.startswith("b round 1") for p in problems), problems)
        # A request owed stays a problem even when the lab host crashed
        # after it; a hang whose diagnosis names the virtio-iommu is not
        # run again either.
        owed = {"status": "hung", "phase": "randread-4k", "after_s": 60, "device_owes": True}
        doc, calls = self.troubled_round(specs, first(owed))
        self.assertEqual(calls, [specs])
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
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
        self.assertEqual(lab.tsc_khz_of(log), 1996251)
        self.assertEqual(lab.tsc_khz_of(log.split("[1.9]")[0]), 1996300)
        self.assertEqual(lab.tsc_khz_of("[0.0] tsc: Detected 2894.560 MHz processor\n"), 2894560)
        self.assertIsNone(lab.tsc_khz_of("no such lines"))

    @staticmethod
    def booter(crashes: int, specs: list[str], wedge: bool = False):
        """A boot() whose first CRASHES lab hosts finish one guest each and
        crash (or, with WEDGE, go silent: the lab's stall); later ones
        finish every guest they get."""
        calls = []

        def boot(todo, attempt, skip=()):
            calls.append(list(todo))
            col = lab.Collector(len(todo))
            col.feed(HOST)
            for spec in todo[:1] if attempt <= crashes else todo:
                col.feed(line(cell(lab.tag_of(spec), rnd=1)))
            if attempt <= crashes and wedge:
                col.stalled = f"no progress for {lab.HOST_STALL} s (the lab host is wedged)"
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
            lab.run_round(doc, 1, specs, boot)
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
        self.assertEqual(len(calls), lab.HOST_BOOTS_PER_ROUND)
        self.assertEqual(len(doc["cells"]), lab.HOST_BOOTS_PER_ROUND)
        self.assertTrue(doc["boots"][-1]["host_crash"])
        self.assertNotIn("host_crash_retried", doc["boots"][-1])

    def test_a_wedged_lab_host_is_replaced_and_only_warned_about(self):
        doc, calls = self.run_with(1, wedge=True)
        self.assertEqual(len(calls), 2)
        self.assertEqual(sorted(c["column"] for c in doc["cells"]), ["a", "b", "c", "d"])
        self.assertEqual([b.get("host_stall_retried", False) for b in doc["boots"]], [True, False])
        specs = [f"{t}:vmm:viommu:baseline" for t in "abcd"]
        doc.update(rounds=1, first_round=1)
        problems, warnings = lab.judge(doc, lab.SCENARIOS["compare"], specs)
        self.assertFalse(any("wedged" in p for p in problems), problems)
        self.assertTrue(any("the lab host is wedged" in w and "ran again in a fresh one" in w for w in warnings), warnings)

    def test_a_lab_host_that_wedges_every_time_fails(self):
        doc, calls = self.run_with(len(self.MANY), wedge=True, tags=self.MANY)
        self.assertEqual(len(calls), lab.HOST_BOOTS_PER_ROUND)
        doc.update(rounds=1, first_round=1)
        specs = [f"{t}:vmm:viommu:baseline" for t in self.MANY]
        problems, _ = lab.judge(doc, lab.SCENARIOS["compare"], specs)
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
            col = lab.Collector(0)
            col.feed(HOST)
            ok = "true" if first_ok or attempt > 1 else "false"
            if "power-off" not in skip:
                col.feed(f'@@LAB-CHECK@@ {{"name":"power-off","ok":{ok},"detail":"exit 0 (want 0)"}}')
            if attempt == 1 and first_trouble:
                col.stalled = f"no progress for {lab.HOST_STALL} s (the lab host is wedged)"
            else:
                col.feed('@@LAB-CHECK@@ {"name":"reset","ok":true,"detail":"exit 3 (want 3)"}')
                col.feed("@@LAB-DONE@@ rc=0")
            return col
        return boot, calls

    def run_script(self, first_ok: bool, first_trouble: bool = True):
        doc = {"boots": [], "cells": [], "checks": [], "rounds": 1, "first_round": 1}
        boot, calls = self.script_booter(first_ok, first_trouble)
        with contextlib.redirect_stderr(io.StringIO()):
            lab.run_round(doc, 1, [], boot)
        return doc, calls, lab.judge(doc, lab.SCENARIOS["vmm-exits"], [])

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


_tloader = importlib.machinery.SourceFileLoader("outer_trace", str(Path(__file__).with_name("outer-trace")))
_tspec = importlib.util.spec_from_loader("outer_trace", _tloader)
outer_trace = importlib.util.module_from_spec(_tspec)
_tloader.exec_module(outer_trace)


class OuterTraceTest(unittest.TestCase):
    """ci/lab/outer-trace: phases found by time in the stamped console, trace
    events counted in them, turned into per-I/O figures."""

    def test_counts_per_phase_and_round(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            (out / "run").mkdir()
            (out / "lab.out").write_text(
                "100.0 [lab] [viommu-bench] cell 1/1 round 1/2 ours: verify-mixed (ETA 9s)\n"
                "101.0 [lab] [viommu-bench] cell 1/1 round 1/2 ours: randread-256k-j2 (ETA 5s)\n"
                "103.0 [lab] [viommu-bench] cell 1/1 round 1/2 ours: count-randread-256k-j2 (ETA 3s)\n"
                "104.0 [lab] [viommu-bench] wrote /tmp/bench/results.json\n"
                "200.0 [lab] [viommu-bench] cell 1/1 round 2 ours: randread-256k-j2 (ETA 5s)\n"
                "203.0 [lab] [viommu-bench] wrote /tmp/bench/results.json\n")
            lines = ["7@100.5:pci_nvme_read cid 1 nsid 1 nlb 256 count 131072 lba 0x0"]  # verify: not counted
            for i in range(10):  # round 1: 10 commands of 128 KiB, 32 misses each
                lines.append(f"7@{101.1 + i * 0.1:.6f}:pci_nvme_read cid {i} nsid 1 nlb 256 count 131072 lba 0x0")
                lines += [f"7@{101.1 + i * 0.1:.6f}:vtd_iotlb_page_update IOTLB page update"] * 32
            lines.append("7@102.5:vtd_iotlb_reset IOTLB reset (reason: iotlb exceeds size limit)")
            # An untimed counting run (a stock QEMU guest's): not a window of its own, not the phase's.
            lines += [f"7@{103.1 + i * 0.1:.6f}:pci_nvme_read cid {i} nsid 1 nlb 8 count 4096 lba 0x0" for i in range(5)]
            (out / "outer-7.log").write_text("\n".join(lines) + "\n")
            # Round 2 in its own lab host's file: 4 commands of 256 KiB, no miss.
            (out / "outer-8.log").write_text("".join(
                f"8@{200.5 + i * 0.1:.6f}:pci_nvme_read cid {i} nsid 1 nlb 512 count 262144 lba 0x0\n" for i in range(4)))
            (out / "run" / "cells.jsonl").write_text("".join(json.dumps(
                {"column": "ours", "round": r, "phases": {"randread-256k-j2": {"fio": {"read_kib": 256 * n}},
                                                          "count-randread-256k-j2": {"fio": {"read_kib": 20}}}}) + "\n"
                for r, n in ((0, 5), (1, 4))))
            rows = {(x["phase"], x["column"]): x["rounds"] for x in outer_trace.summarize(out)["rows"]}
            self.assertNotIn(("count-randread-256k-j2", "ours"), rows)
            r1, r2 = rows[("randread-256k-j2", "ours")]
            self.assertEqual((r1["round"], r1["nvme_cmds_per_io"], r1["kib_per_cmd"]), (1, 2.0, 128.0))
            self.assertEqual((r1["iotlb_misses_per_io"], r1["iotlb_misses_per_4k"], r1["iotlb_resets"]), (64.0, 1.0, 1))
            self.assertEqual((r2["round"], r2["nvme_cmds_per_io"], r2["iotlb_misses_per_io"]), (2, 1.0, 0.0))
            self.assertIn("| randread-256k-j2 | ours | 1.50 [1.00-2.00] |", outer_trace.table(outer_trace.summarize(out)))


if __name__ == "__main__":
    unittest.main()


class FaultCensusTest(unittest.TestCase):
    def test_hangs_by_kind_and_lab_host_faults(self):
        fc = fault_census
        doc = {
            "runs": ["a:vmm:viommu:patched", "q:qemu:viommu:patched"],
            "boots": [{"host_crash": "BUG: stack guard"}, {"stalled": "no progress"}, {}],
            "cells": [
                {"column": "a", "status": {"status": "ok"}, "warnings": [
                    "first attempt failed (the guest hung in randread-4k (no I/O for 60 s; --retry-hung); state at the hang: "
                    "the driver published virtio-iommu requests the device has not taken (avail 5, device at 4, avail_event 4) ...); ran it again (log x)",
                    "second attempt failed (guest kernel crashed: PANIC: double fault); ran it again (log y)"]},
                {"column": "a", "status": {"status": "hung", "phase": "boot", "after_s": 60, "device_owes": True}, "warnings": [
                    "state at the hang: THE DEVICE OWES THE DRIVER A REQUEST: vCPU0 in __viommu_sync_req+0x10 waits ..."]},
                {"column": "q", "status": {"status": "ok"}, "warnings": []},
            ],
        }
        hosts, guests = fc.census([doc])
        stack = ("QEMU 7.2 (not recorded)", "? vtd", "?")
        total = hosts[stack]
        self.assertEqual(total["lab host crashed"], 1)
        self.assertEqual(total["lab host wedged"], 1)
        self.assertEqual(total["lab host boots"], 3)
        ours = guests[(*stack, "vmm")]
        self.assertEqual(ours["hang diagnosis: untaken"], 1)
        self.assertEqual(ours["hang diagnosis: owed"], 1)
        self.assertEqual(ours["guest crash or reset"], 1)
        self.assertEqual(ours["guest hang"], 2)
        self.assertEqual(ours["final: hung"], 1)
        self.assertEqual(ours["guest boots"], 4)
        self.assertEqual(guests[(*stack, "qemu")]["guest boots"], 1)


class DebianRootTest(unittest.TestCase):
    def test_absolute_links_point_into_the_root(self):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            (root / "usr/share/seabios").mkdir(parents=True)
            (root / "usr/share/qemu").mkdir(parents=True)
            (root / "usr/share/seabios/bios-256k.bin").write_text("root's own")
            (root / "usr/share/qemu/bios-256k.bin").symlink_to("/usr/share/seabios/bios-256k.bin")
            (root / "usr/share/qemu/rel").symlink_to("../seabios/bios-256k.bin")
            debian_root.relative_symlinks(root)
            link = root / "usr/share/qemu/bios-256k.bin"
            self.assertFalse(str(link.readlink()).startswith("/"))
            self.assertEqual(link.read_text(), "root's own")
            self.assertEqual(str((root / "usr/share/qemu/rel").readlink()), "../seabios/bios-256k.bin")

    def test_newest_version_of_the_package_in_an_index(self):
        index = ("Package: qemu-system-x86\nSource: qemu\nVersion: 1:11.1.2+ds-1~bpo13+1\n\n"
                 "Package: qemu-system-x86-xen\nVersion: 1:99\n\n"
                 "Package: qemu-system-x86\nSource: qemu\nVersion: 1:11.1.10+ds-1~bpo13+1\n\n")
        orig = debian_root.fetch
        debian_root.fetch = lambda url: __import__("lzma").compress(index.encode())
        try:
            self.assertEqual(debian_root.package_version("trixie-backports", "qemu-system-x86"), "1:11.1.10+ds-1~bpo13+1")
            with self.assertRaises(SystemExit) as e:
                debian_root.package_version("trixie", "nope")
            self.assertIn("nope is not in", str(e.exception))
        finally:
            debian_root.fetch = orig


class DebianRootExtrasTest(unittest.TestCase):
    """ci/lab/debian-root --with: more packages, a root (and a key) of their own."""

    def fake_index(self):
        index = "Package: qemu-system-x86\nVersion: 1:11.1.3+ds-1~bpo13+1\n\n"
        lzma = __import__("lzma")
        return lambda url: lzma.compress(index.encode()) if url.endswith(".xz") else b"Version: 13.8\n"

    def test_packages_are_sorted_once_and_checked(self):
        self.assertEqual(debian_root.extras_of("fio, busybox-static,fio,"), ["busybox-static", "fio"])
        self.assertEqual(debian_root.extras_of(""), [])
        with self.assertRaises(SystemExit):
            debian_root.extras_of("fio;rm -rf")

    def test_the_packages_are_in_the_name_and_the_key(self):
        self.assertEqual(debian_root.root_name("11.1", []), "debian13-qemu11.1")
        self.assertEqual(debian_root.root_name("11.1", ["busybox-static", "fio"]), "debian13-qemu11.1+busybox-static+fio")
        orig = debian_root.fetch
        debian_root.fetch = self.fake_index()
        try:
            plain = debian_root.key_of("11.1")
            with_fio = debian_root.key_of("11.1", ["busybox-static", "fio"])
            self.assertEqual(plain[0], with_fio[0])
            self.assertNotEqual(plain[1], with_fio[1])
            self.assertEqual(with_fio, debian_root.key_of("11.1", ["busybox-static", "fio"]))
        finally:
            debian_root.fetch = orig

    def test_offline_only_a_root_with_those_packages_is_used(self):
        with tempfile.TemporaryDirectory() as d:
            roots = Path(d) / "roots"
            for name in ("debian13-qemu11.1-0123456789abcdef", "debian13-qemu11.1+busybox-static+fio-fedcba9876543210"):
                (roots / name / "bin").mkdir(parents=True)
                (roots / name / "bin" / "qemu-system-x86_64").write_text("")

            def offline(url):
                raise OSError("no network")
            orig = debian_root.fetch, debian_root.CACHE, sys.argv
            debian_root.fetch, debian_root.CACHE = offline, Path(d)
            try:
                for argv, want in ((["--qemu", "11.1"], "debian13-qemu11.1-0123456789abcdef"),
                                   (["--qemu", "11.1", "--with", "fio,busybox-static"], "debian13-qemu11.1+busybox-static+fio-fedcba9876543210")):
                    sys.argv = ["debian-root", *argv]
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                        self.assertEqual(debian_root.main(), 0)
                    self.assertEqual(Path(out.getvalue().strip()).parent.parent.name, want)
                sys.argv = ["debian-root", "--qemu", "11.1", "--with", "fio"]
                with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(io.StringIO()):
                    debian_root.main()
                self.assertIn("no debian13-qemu11.1+fio root is cached", str(e.exception))
            finally:
                debian_root.fetch, debian_root.CACHE, sys.argv = orig


class FaultCensusTableTest(unittest.TestCase):
    def test_every_attempt_is_a_boot_per_outer_emulator_and_vmm(self):
        doc = {"outer_qemu": "QEMU emulator version 11.1.3", "runs": ["o1:vmm:viommu:p", "q1:qemu:viommu:p"],
               "boots": [{"host_crash": None, "stalled": "its console ended without @@LAB-DONE@@"}, {}],
               "cells": [
                   {"column": "o1", "status": {"status": "ok"}, "warnings": [
                       "attempt 1 failed (the guest reset itself mid-run (our VMM exited 4: triple fault)); ran it again (log x)",
                       "attempt 2 failed (the guest hung in boot (no I/O for 120 s; --retry-hung)); ran it again (log y)"]},
                   {"column": "q1", "status": {"status": "hung"}, "warnings": []},
               ]}
        doc.update(scenario="fault-census", host_iommu="virtio")
        doc["boots"][1]["host"] = {"kernel": "6.12.117"}
        doc["boots"].append({"unfit": "KVM started with the TSC at ..."})
        demo = {"outer_qemu": "QEMU emulator version 11.1.3", "scenario": "compare", "host_iommu": "virtio", "runs": ["o:vmm:viommu:p"],
                "boots": [{"host": {"kernel": "6.12.117"}}], "cells": [{"column": "o", "status": {"status": "ok"}, "warnings": []}]}
        hosts, guests = fault_census.census([doc, demo])
        ours = guests[("QEMU 11.1.3", "6.12 virtio", "fault-census", "vmm")]
        self.assertEqual((ours["guest boots"], ours["guest crash or reset"], ours["guest hang"]), (3, 1, 1))
        qemu = guests[("QEMU 11.1.3", "6.12 virtio", "fault-census", "qemu")]
        self.assertEqual((qemu["guest boots"], qemu["guest hang"]), (1, 1))
        h = hosts[("QEMU 11.1.3", "6.12 virtio", "fault-census")]
        self.assertEqual((h["lab host boots"], h["lab host wedged"], h["lab host crashed"], h["lab host unfit"]), (3, 1, 0, 1))
        text = fault_census.table(hosts, guests)
        self.assertIn("| QEMU 11.1.3 | 6.12 virtio | fault-census | ours | 3 | 1 | 1 | 0 | 0.67 | - |", text)
        # The demo's workload is a cell of its own, and both add up.
        self.assertIn("| QEMU 11.1.3 | 6.12 virtio | compare | ours | 1 | 0 | 0 | 0 | 0.00 | - |", text)
        self.assertIn("| QEMU 11.1.3 | ours | 4 | 1 | 1 | 0 | 0.50 | - |", text)

    def test_single_threaded_tcg_is_an_outer_emulator_of_its_own(self):
        doc = {"outer_qemu": "QEMU emulator version 11.1.3", "outer_tcg": "single", "scenario": "fault-census", "host_iommu": "virtio",
               "runs": ["o:vmm:viommu:p"], "boots": [{"host": {"kernel": "6.12.117"}}],
               "cells": [{"column": "o", "status": {"status": "ok"}, "warnings": []}]}
        multi = {**doc, "outer_tcg": "multi"}
        _, guests = fault_census.census([doc, multi])
        self.assertEqual(guests[("QEMU 11.1.3 (TCG single)", "6.12 virtio", "fault-census", "vmm")]["guest boots"], 1)
        self.assertEqual(guests[("QEMU 11.1.3", "6.12 virtio", "fault-census", "vmm")]["guest boots"], 1)
