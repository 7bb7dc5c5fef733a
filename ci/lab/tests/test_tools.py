"""Unit tests of the lab's other tools: ci/lab/outer-trace, ci/lab/fault-census
and ci/lab/debian-root, loaded from their extensionless scripts (no VM)."""

import contextlib
import importlib.machinery
import importlib.util
import io
import json
import sys
import tempfile
import unittest
import unittest.mock
from pathlib import Path

from labkit import census

LAB_DIR = Path(__file__).resolve().parent.parent


def _load(name: str):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(LAB_DIR / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


debian_root = _load("debian-root")
fault_census = census

_tloader = importlib.machinery.SourceFileLoader("outer_trace", str(LAB_DIR / "outer-trace"))
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

    def test_the_fixed_outer_qemu_is_an_emulator_of_its_own(self):
        self.assertEqual(fault_census.short_outer("QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1 + viommu-lab patches)"),
                         "QEMU 10.0.13 fixed")
        self.assertEqual(fault_census.short_outer("QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)"), "QEMU 10.0.13")

    def test_records_keep_every_run_and_drop_the_oldest(self):
        from labkit import results
        with tempfile.TemporaryDirectory() as tmp, \
                unittest.mock.patch.object(results, "RECORDS", Path(tmp)), \
                unittest.mock.patch.object(results, "RECORDS_KEPT", 2):
            for name in ("a", "b", "c"):
                (Path(tmp) / f"2026010{ord(name) - 96}-000000-{name}-1.json").write_text("{}")
            kept = results.keep_record({"scenario": "smoke"}, '{"scenario": "smoke"}')
            self.assertEqual(json.loads(kept.read_text()), {"scenario": "smoke"})
            self.assertEqual(sorted(p.name for p in Path(tmp).iterdir()), ["20260103-000000-c-1.json", kept.name])

    def test_single_threaded_tcg_is_an_outer_emulator_of_its_own(self):
        doc = {"outer_qemu": "QEMU emulator version 11.1.3", "outer_tcg": "single", "scenario": "fault-census", "host_iommu": "virtio",
               "runs": ["o:vmm:viommu:p"], "boots": [{"host": {"kernel": "6.12.117"}}],
               "cells": [{"column": "o", "status": {"status": "ok"}, "warnings": []}]}
        multi = {**doc, "outer_tcg": "multi"}
        _, guests = fault_census.census([doc, multi])
        self.assertEqual(guests[("QEMU 11.1.3 (TCG single)", "6.12 virtio", "fault-census", "vmm")]["guest boots"], 1)
        self.assertEqual(guests[("QEMU 11.1.3", "6.12 virtio", "fault-census", "vmm")]["guest boots"], 1)


class MapTripsTest(unittest.TestCase):
    """ci/lab/map-trips: host IOMMU map calls per I/O grouped by place."""

    @staticmethod
    def cell(col: str, rnd: int, place: int, maps: int, kib: int, iops: float) -> dict:
        fio = {"read_kib": 128 * 1000, "read_iops": iops}
        return {"column": col, "round": rnd, "place": {"boot": "b", "index": place},
                "phases": {"randread-128k": {"fio": fio, "kvm_exits": {"iommu.map": maps, "iommu.map_kib": kib}},
                           "verify-128k": {"fio": fio, "kvm_exits": {"iommu.map": 1}},
                           "randread-4k": {"fio": {"read_kib": 4000}}}}

    def test_calls_per_io_and_run_length_by_place(self):
        from labkit import map_trips
        doc = {"cells": [self.cell("qemu", 0, 0, 1000, 128000, 900), self.cell("qemu", 1, 1, 32000, 128000, 300),
                         self.cell("qemu", 2, 1, 30000, 128000, 320)]}
        rows = map_trips.samples(doc)
        self.assertEqual({r["phase"] for r in rows}, {"randread-128k"}, "verify and uncounted phases left out")
        text = "\n".join(map_trips.table(rows))
        self.assertIn("| randread-128k | qemu | 1 | 1 | 900 | 1.00 | 128 |", text)
        self.assertIn("| randread-128k | qemu | 2 | 2 | 310 | 31.00 | 4 |", text)

    def test_the_counter_windows_sectors_divide(self):
        from labkit import map_trips
        c = self.cell("qemu", 0, 0, 1250, 160000, 900)
        # The window held a quarter more than fio's 1000 I/Os (its ramp's end).
        c["phases"]["randread-128k"]["fio"]["counters"] = {"block/sectors": 1250 * 256}
        self.assertEqual(map_trips.samples({"cells": [c]})[0]["maps_per_io"], 1.0)

    def test_no_counts_is_an_error_naming_the_flag(self):
        from labkit import map_trips
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "results.json"
            f.write_text(json.dumps({"cells": [{"column": "c", "place": {"index": 0}, "phases": {"randread-4k": {"fio": {}}}}]}))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(map_trips.main([str(f)]), 1)
            self.assertIn("--kvm-exits", err.getvalue())
