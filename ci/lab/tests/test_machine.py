"""Unit tests of how quiet the machine was while a lab host ran (no VM)."""

import unittest

from labkit import judge, machine
from labkit.machine import Snapshot

# /proc/stat's head on a 2-CPU VM: user nice system idle iowait irq
# softirq steal guest guest_nice.
STAT = "cpu  1000 100 200 5000 50 0 20 30 0 0\ncpu0 500 50 100 2500 25 0 10 15 0 0\nintr 1 2 3\n"


def snap(wall, idle_s, steal_s, own_s, cpus=2):
    hz = machine.HZ
    return Snapshot(wall=wall, cpus=cpus, idle_ticks=int(idle_s * hz), steal_ticks=int(steal_s * hz), own_cpu_s=own_s)


class MachineTest(unittest.TestCase):
    def test_the_all_cpu_line_is_read(self):
        # CPUs: the cpuN lines; idle with iowait; steal
        self.assertEqual(machine.cpu_ticks(STAT), (1, 5050, 30))
        with self.assertRaises(ValueError):
            machine.cpu_ticks("intr 1 2 3\n")

    def test_snapshot_from_a_given_text(self):
        s = Snapshot.take(STAT)
        self.assertEqual((s.cpus, s.idle_ticks, s.steal_ticks), (1, 5050, 30))
        self.assertGreaterEqual(s.own_cpu_s, 0.0)

    def test_the_lab_hosts_own_cpu_is_not_others(self):
        # 100 s on 2 CPUs: 15 s idle, 5 s stolen, so 180 CPU-seconds
        # busy, of which the outer QEMU (a waited-for child) and the
        # runner took 170: others 10 s, 10% of a CPU; 5 s stolen out of
        # 200: 2.5%.
        before = snap(0.0, 0, 0, 0.0)
        after = snap(100.0, 15, 5, 170.0)
        self.assertEqual(machine.quiet_of(before, after), {"seconds": 100.0, "others_cpu_pct": 10.0, "steal_pct": 2.5})
        self.assertIsNone(machine.loud(machine.quiet_of(before, after)))

    def test_a_build_beside_the_lab_host_is_loud(self):
        # 100 s on 2 CPUs, 10 s idle: the outer QEMU took 100 s, a build
        # the other 90
        q = machine.quiet_of(snap(10.0, 1, 0, 1.0), snap(110.0, 11, 0, 101.0))
        self.assertEqual(q["others_cpu_pct"], 90.0)
        self.assertIn("other work used 90% of a CPU", machine.loud(q))

    def test_stolen_time_is_loud(self):
        q = {"seconds": 60.0, "others_cpu_pct": 1.0, "steal_pct": 25.0}
        self.assertIn("stole 25%", machine.loud(q))
        self.assertNotIn("other work", machine.loud(q))

    def test_a_runner_that_counted_more_than_the_machine_is_not_negative(self):
        # Children's CPU arrives when waited for: a lab host started before
        # the window can make ours exceed the machine's busy time.
        q = machine.quiet_of(snap(0.0, 0, 0, 0.0), snap(10.0, 15, 0, 50.0))
        self.assertEqual(q["others_cpu_pct"], 0.0)

    def test_the_judge_warns_of_a_loud_boot_and_not_of_a_quiet_or_old_one(self):
        base = {"round": 2, "attempt": 1, "host": {"kernel": "6.12"}, "done_rc": 0, "log": "l"}
        loud = {**base, "machine": {"seconds": 300.0, "others_cpu_pct": 60.0, "steal_pct": 0.5}}
        problems, warnings = judge.boot_problems(loud)
        self.assertEqual(problems, [])
        self.assertEqual(len(warnings), 1)
        self.assertTrue(warnings[0].startswith("lab host of round 2: the machine was not quiet: other work used 60% of a CPU"), warnings[0])
        quiet = {**base, "machine": {"seconds": 300.0, "others_cpu_pct": 3.0, "steal_pct": 1.0}}
        self.assertEqual(judge.boot_problems(quiet), ([], []))
        # records from before the field existed
        self.assertEqual(judge.boot_problems(base), ([], []))


class OuterThreadsTest(unittest.TestCase):
    def test_threads_are_summed_by_kind_and_their_wait_is_a_share_of_the_window(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as proc:
            for tid, comm, run, wait in ((100, "qemu-system-x86", 5e9, 1e9), (101, "CPU 0/TCG", 9e9, 2e9),
                                         (102, "CPU 1/TCG", 8e9, 1e9), (103, "worker", 1e8, 0)):
                os.makedirs(f"{proc}/100/task/{tid}")
                with open(f"{proc}/100/task/{tid}/schedstat", "w") as f:
                    f.write(f"{int(run)} {int(wait)} 42\n")
                with open(f"{proc}/100/task/{tid}/comm", "w") as f:
                    f.write(comm + "\n")
            os.makedirs(f"{proc}/100/task/104")  # a thread gone mid-read
            got = machine.outer_threads(100, proc)
            self.assertEqual(got, {"main": (5e9, 1e9), "vcpus": (17e9, 3e9), "other": (1e8, 0)})
            self.assertEqual(machine.outer_threads(999, proc), {})
        before = Snapshot(0, 2, 0, 0, 0.0, {"main": (0, 0), "vcpus": (0, 0)})
        after = Snapshot(10, 2, 0, 0, 0.0, {"main": (1e9, 5e8), "vcpus": (15e9, 0), "other": (1, 1)})
        q = machine.quiet_of(before, after)
        # 1 s of 10 running, 0.5 waiting; only kinds both snapshots saw
        self.assertEqual(q["outer_threads"], {"main": {"run_pct": 10.0, "wait_pct": 5.0},
                                              "vcpus": {"run_pct": 150.0, "wait_pct": 0.0}})
        self.assertNotIn("outer_threads", machine.quiet_of(snap(0, 0, 0, 0), snap(10, 0, 0, 0)))


class PhaseClockTest(unittest.TestCase):
    def test_each_phase_gets_the_window_to_the_next_line_or_its_cell(self):
        # (wall, idle s, steal s, ours s) at each line that starts or ends
        # a window; 2 CPUs
        snaps = iter([snap(0, 0, 0, 0), snap(10, 1, 0, 19), snap(20, 2, 6, 33), snap(30, 3, 6, 52)])
        clock = machine.PhaseClock(pid=1)
        take = lambda: next(snaps)  # noqa: E731
        clock.line("[viommu-bench] cell 1/2 round 1/1 ours+stock: randread-4k (ETA 3m)", False, take)
        clock.line("[   12.0] nvme nvme0: something", False, take)  # no window
        clock.line("[viommu-bench] cell 1/2 round 1/1 ours+stock: randread-4k-j2 (ETA 2m)", False, take)
        clock.line("@@LAB-CELL@@ {...}", True, take)
        # a cell with no phase open closes nothing
        clock.line("@@LAB-CELL@@ {...}", True, take)
        self.assertEqual(clock.windows[("ours+stock", "randread-4k")], {"seconds": 10.0, "others_cpu_pct": 0.0, "steal_pct": 0.0, "t0": 0, "t1": 10})
        # 10 s: 20 CPU-s, 1 idle, 6 stolen, ours 14: others 0, steal 30%
        self.assertEqual(clock.windows[("ours+stock", "randread-4k-j2")], {"seconds": 10.0, "others_cpu_pct": 0.0, "steal_pct": 30.0, "t0": 10, "t1": 20})
        self.assertIsNone(clock.open_at)
        cells = [{"column": "ours+stock", "round": 1, "phases": {"randread-4k": {"fio": {}}, "randread-4k-j2": {"fio": {}}, "verify-4k": {}}},
                 {"column": "qemu+stock", "phases": {"randread-4k": {}}}]
        clock.annotate(cells)
        self.assertEqual(cells[0]["phases"]["randread-4k-j2"]["machine"]["steal_pct"], 30.0)
        self.assertNotIn("machine", cells[0]["phases"]["verify-4k"])
        self.assertNotIn("machine", cells[1]["phases"]["randread-4k"])
        # the judge names the phase that ran through the burst, and only it
        w = judge.machine_warnings(cells)
        self.assertEqual(len(w), 1, w)
        self.assertTrue(w[0].startswith("ours+stock round 2 randread-4k-j2: the machine was not quiet: the machine's hypervisor stole 30%"), w[0])

    def test_a_running_process_cpu_time_is_read(self):
        import os
        self.assertGreaterEqual(machine.process_cpu_s(os.getpid()), 0.0)
        self.assertEqual(machine.process_cpu_s(2 ** 22 + 12345), 0.0)
        s = Snapshot.take(STAT, pid=os.getpid())
        self.assertGreater(s.own_cpu_s, 0.0)

    def test_running_damon_schemes_are_named_and_others_not(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as admin:
            self.assertEqual(machine.reclaim_schemes(admin + "/absent"), [])
            for kd, state, action in (("0", "on", "pageout"), ("1", "off", "lru_prio")):
                ctx = f"{admin}/{kd}/contexts/0"
                os.makedirs(f"{ctx}/schemes/0")
                for path, text in ((f"{admin}/{kd}/state", state), (f"{ctx}/operations", "paddr"),
                                   (f"{ctx}/schemes/0/action", action)):
                    with open(path, "w") as f:
                        f.write(text + "\n")
            self.assertEqual(machine.reclaim_schemes(admin), ["pageout on paddr"])


if __name__ == "__main__":
    unittest.main()
