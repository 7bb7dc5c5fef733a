"""Unit tests of the lab runner's serial parsing, judging and table (no VM)."""

import importlib.machinery
import importlib.util
import unittest
from pathlib import Path

_loader = importlib.machinery.SourceFileLoader("lab", str(Path(__file__).with_name("lab")))
_spec = importlib.util.spec_from_loader("lab", _loader)
lab = importlib.util.module_from_spec(_spec)
_loader.exec_module(lab)

HOST = '@@LAB-HOST-READY@@ {"kernel":"6.1.0-56-cloud-amd64","nvme":"0000:00:03.0","vfio_group":3,"cpus":2}'


def guest(tag, body):
    return f"@@LAB-L3@@ {tag} {body}"


def fio(phase, iops, kib, error=0):
    return (
        f'@@LAB-GUEST@@ {{"event":"fio","phase":"{phase}","error":{error},"read_kib":{kib},'
        f'"read_bw_kib":{kib // 8},"read_iops":{iops},"read_ms":8000,"write_kib":0,'
        f'"write_bw_kib":0,"write_iops":0,"write_ms":0,"counters":{{}}}}'
    )


def good_run(tag, iommu, iops):
    return [
        f'@@LAB-RUN@@ {{"tag":"{tag}","vmm":"qemu","iommu":"{iommu}","kernel":"baseline","extra":""}}',
        guest(tag, '@@LAB-GUEST@@ {"event":"boot","kernel":"6.1.192","nvme":true,"iommu_groups":"DMA:1","cmdline":"x"}'),
        guest(tag, fio("verify-4k", 0, 8192)),
        guest(tag, fio("randread-4k", iops, iops * 4 * 8)),
        guest(tag, '@@LAB-COUNT@@ {"phase":"randread-4k","map_requests":100,"unmap_requests":100,"vfio_calls":200}'),
        guest(tag, "@@LAB-GUEST-DONE@@ rc=0"),
        guest(tag, "@@LAB-VMM-EXIT@@ rc=0"),
    ]


class CollectorTest(unittest.TestCase):
    def collect(self, lines):
        col = lab.Collector("qemu-baseline")
        for line in lines:
            col.feed("noise before " + line if line.startswith("@@LAB-HOST") else line)
        return col, col.finish()

    def test_good_run_passes_and_merges_counts(self):
        col, problems = self.collect([HOST] + good_run("qemu-viommu", "viommu", 600) + good_run("no-viommu", "none", 2000) + ["@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        ph = col.doc["runs"][0]["phases"]["randread-4k"]
        self.assertEqual((ph["read_iops"], ph["map_requests"], ph["vfio_calls"]), (600, 100, 200))
        table = lab.table(col.doc)
        self.assertIn("| 4k | qemu-viommu | 600 | 2.3 | 0.30 | 0.04 | 10923 | 0.04 | 10923 | - |", table)
        self.assertIn("| 4k | no-viommu | 2000 | 7.8 | 1.00 | - | - | - | - | - |", table)

    def test_guest_counters_stand_in_for_device_counts(self):
        ph = {"map_requests": 0, "unmap_requests": 0, "vfio_calls": 0,
              "counters": {"virtio-iommu/virtio0/map": 30, "virtio-iommu/virtio0/unmap": 10, "iommu-dma-pool/hits": 9}}
        self.assertEqual(lab.requests(ph), (40, None))
        self.assertEqual(lab.counter_sum(ph, "/hits"), 9)

    def test_verify_error_fails(self):
        lines = [HOST] + good_run("g", "viommu", 1) + ["@@LAB-DONE@@ rc=0"]
        lines[3] = guest("g", fio("verify-4k", 0, 8192, error=84))
        _, problems = self.collect(lines)
        self.assertIn("g: fio verify-4k error 84", problems)

    def test_missing_nvme_and_no_done_fail(self):
        lines = [HOST] + [l.replace('"nvme":true', '"nvme":false') for l in good_run("g", "viommu", 1)]
        _, problems = self.collect(lines)
        self.assertIn("the lab host never finished the scenario", problems)
        self.assertIn("g: no /dev/nvme0n1 in the guest", problems)

    def test_guest_without_verify_fails(self):
        lines = [HOST] + [l for l in good_run("g", "viommu", 1) if "verify-" not in l] + ["@@LAB-DONE@@ rc=0"]
        _, problems = self.collect(lines)
        self.assertIn("g: no write+verify pass ran", problems)

    def test_stock_qemu_teardown_hang_is_a_warning_ours_a_failure(self):
        for vmm, failing in (("qemu", False), ("vmm", True)):
            col = lab.Collector("x")
            col.expected_runs = 1
            for line in [HOST] + [l.replace('"vmm":"qemu"', f'"vmm":"{vmm}"') for l in good_run("g", "none", 5)[:-1]]:
                col.feed(line)
            self.assertTrue(col.all_guests_done())
            col.teardown_hung = True
            problems = col.finish()
            self.assertEqual(bool(problems), failing, problems)
            self.assertEqual(bool(col.doc["warnings"]), not failing)

    def test_retried_run_keeps_only_the_second_attempt_and_warns(self):
        crashed = good_run("g", "viommu", 1)[:3]
        retry = '@@LAB-RETRY@@ {"tag":"g","reason":"guest kernel crashed: PANIC: double fault"}'
        col, problems = self.collect([HOST] + crashed + [retry] + good_run("g", "viommu", 7) + ["@@LAB-DONE@@ rc=0"])
        self.assertEqual(problems, [])
        self.assertEqual([r["tag"] for r in col.doc["runs"]], ["g"])
        self.assertEqual(col.doc["runs"][0]["phases"]["randread-4k"]["read_iops"], 7)
        self.assertEqual(col.doc["warnings"], ["g: first attempt failed (guest kernel crashed: PANIC: double fault); ran it again"])

    def test_expected_counters_must_move(self):
        lazy = '@@LAB-COUNT@@ {"phase":"randread-4k","map_requests":100,"unmap_requests":100,"flush_requests":3,"deferred_unmaps":%d,"vfio_calls":104}'
        for deferred, ok in ((0, False), (100, True)):
            col = lab.Collector("lazy-smoke")
            run = good_run("ours-lazy", "viommu", 5)
            run[4] = guest("ours-lazy", lazy % deferred)
            for line in [HOST] + run + good_run("ours-lazy+pool", "viommu", 5) + ["@@LAB-DONE@@ rc=0"]:
                col.feed(line)
            problems = col.finish()
            no_pool = "ours-lazy+pool: hits stayed 0 in every phase (the path under test was not taken)"
            no_lazy = "ours-lazy: deferred_unmaps stayed 0 in every phase (the path under test was not taken)"
            self.assertEqual(problems, [no_pool] if ok else [no_lazy, no_pool])
            if ok:
                ph = col.doc["runs"][0]["phases"]["randread-4k"]
                self.assertEqual(lab.requests(ph), (203, 104))

    def test_lazy_unmap_rows_only_for_runs_that_deferred(self):
        col = lab.Collector("compare")
        count = ('@@LAB-COUNT@@ {"phase":"randread-4k","map_requests":100,"unmap_requests":100,"flush_requests":%d,'
                 '"deferred_unmaps":%d,"flush_vfio_calls":%d,"merged_ranges":%d,"vfio_calls":125}')
        lazy, strict = good_run("lazy", "viommu", 5), good_run("strict", "viommu", 5)
        lazy[4] = guest("lazy", count % (4, 100, 25, 100))
        strict[4] = guest("strict", count % (0, 0, 0, 0))
        for line in [HOST] + lazy + strict + good_run("none", "none", 9) + ["@@LAB-DONE@@ rc=0"]:
            col.feed(line)
        self.assertEqual(col.finish(), [])
        self.assertEqual(lab.lazy_rows(col.doc["runs"], ["4k"]), [
            ["bs", "run", "deferred UNMAPs", "FLUSHes", "deferred/FLUSH", "VFIO calls/FLUSH", "mappings merged/VFIO call"],
            ["4k", "lazy", "100", "4", "25.0", "6.25", "4.00"],
        ])
        self.assertIn("| 4k | lazy | 100 | 4 | 25.0 | 6.25 | 4.00 |", lab.table(col.doc))
        self.assertEqual(lab.lazy_rows(col.doc["runs"][1:], ["4k"]), [])

    def test_block_size_parsing(self):
        self.assertEqual(lab._kib("128k"), 128)
        self.assertEqual(lab._kib("1m"), 1024)
        with self.assertRaises(lab.LabError):
            lab._kib("big")


if __name__ == "__main__":
    unittest.main()


class HostCrashAndBar0Test(unittest.TestCase):
    def test_a_panic_outside_a_guest_dump_is_the_lab_hosts(self):
        col = lab.Collector("smoke")
        for line in [HOST, "---- guest a failed; its serial log and VMM output follow ----",
                     "[   42.6] Kernel panic - not syncing: Fatal exception in interrupt",
                     "---- end of guest a log ----"]:
            col.feed(line)
        self.assertIsNone(col.host_crash, "a guest's panic inside its log dump")
        col.feed("[   87.3] BUG: TASK stack guard page was hit at 000000002172ddef")
        self.assertTrue(col.host_crash.startswith("BUG: TASK stack guard page"))

    def test_bar0_must_be_inside_a_reserved_region_behind_our_viommu(self):
        run = {"vmm": "vmm", "iommu": "viommu", "boot": {"resv": "0x00000000fee00000 0x00000000feefffff msi;"}}
        self.assertIn("BAR0", lab.bar0_problem("0xfebf8000-0xfebfbfff", run))
        run["boot"]["resv"] += "0x00000000c0000000 0x00000000febfffff reserved;"
        self.assertIsNone(lab.bar0_problem("0xfebf8000-0xfebfbfff", run))
        # Stock QEMU's guests are not judged on it.
        self.assertIsNone(lab.bar0_problem("0xfebf8000-0xfebfbfff", {"vmm": "qemu", "iommu": "viommu", "boot": {"resv": ""}}))


class CeilingPerJobCountTest(unittest.TestCase):
    def test_each_job_count_has_its_own_ceiling(self):
        col = lab.Collector("scaling", "fio")
        for line in [HOST] + good_run("a@1j", "viommu", 100) + good_run("n@1j", "none", 400) \
                + good_run("a@2j", "viommu", 300) + good_run("n@2j", "none", 600):
            col.feed(line)
        col.finish()
        rows = {tuple(c.strip() for c in l.split("|")[1:3]): l for l in lab.table(col.doc).splitlines()}
        self.assertIn("| 0.25 |", rows[("4k", "a@1j")])
        self.assertIn("| 0.50 |", rows[("4k", "a@2j")])
