"""Unit tests of the runner's signal handler (no VM)."""

import unittest

from labkit import boot


class StopTest(unittest.TestCase):
    def test_a_stopped_runner_kills_its_lab_hosts(self):
        p = __import__("subprocess").Popen(["sleep", "60"])
        boot.LIVE_HOSTS.add(p)
        try:
            with self.assertRaises(SystemExit) as e:
                boot.stop_lab_hosts(15, None)
            self.assertEqual(e.exception.code, 143)
            self.assertEqual(p.wait(timeout=10), -9)
        finally:
            boot.LIVE_HOSTS.discard(p)


class AbTest(unittest.TestCase):
    def test_b_rounds_come_in_pairs_after_a_pair(self):
        self.assertEqual([r for r in range(1, 9) if boot.ab_round(r)], [3, 4, 7, 8])

    def test_only_b_rounds_get_the_parameters(self):
        import os
        from unittest import mock
        k = {"host_iommu": "vtd"}
        with mock.patch.dict(os.environ, {"LAB_HOST_APPEND_AB": "kvm.halt_poll_ns=0"}):
            self.assertNotIn("kvm.halt_poll_ns=0", boot.host_cmdline(k, {"round": "2"}))
            self.assertIn("kvm.halt_poll_ns=0", boot.host_cmdline(k, {"round": "3"}))

    def test_only_b_rounds_run_under_the_other_outer_qemu(self):
        k = {"outer_qemu_bin": "/a/qemu", "outer_qemu_ab_bin": "/b/qemu"}
        self.assertEqual([boot.outer_qemu_of(k, r) for r in (1, 2, 3, 4, 5)], ["/a/qemu", "/a/qemu", "/b/qemu", "/b/qemu", "/a/qemu"])
        self.assertEqual(boot.outer_qemu_of({"outer_qemu_bin": "/a/qemu"}, 3), "/a/qemu")

    def test_only_b_rounds_count_instructions_with_the_tsc_at_1ghz(self):
        import os
        from unittest import mock
        k = {"host_iommu": "vtd", "outer_icount": "", "outer_icount_ab": "3"}
        self.assertEqual([boot.outer_icount_of(k, r) for r in (1, 2, 3, 4, 5)], ["", "", "3", "3", ""])
        # What run.qemus_of() resolved, not the environment at boot time.
        with mock.patch.dict(os.environ, {"LAB_OUTER_ICOUNT_AB": "5"}):
            self.assertEqual(boot.outer_icount_of({"outer_icount": ""}, 3), "")
        self.assertEqual(boot.outer_icount_of({"outer_icount": "2"}, 1), "2")
        line = boot.host_cmdline(k, {"round": "3"}, "3")
        self.assertIn("tsc_early_khz=1000000", line)
        self.assertEqual(line.count("tsc_early_khz="), 1)


if __name__ == "__main__":
    unittest.main()
