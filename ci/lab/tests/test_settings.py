"""Unit tests of a scenario's settings, the lab host's machine and knobs (no VM)."""

import json
import os
import tempfile
import types
import unittest
from pathlib import Path
from unittest import mock

from labkit import base, host, images, judge, kernels, presets, run, scenarios
from labkit.kernels import tool_specs
from labkit.knobs import host_knobs, knobs_of, report_args
from tests.fixtures import LAB_DIR


class SettingsTest(unittest.TestCase):
    def args(self, cmd, **kw):
        base = dict(cmd=cmd, mode=None, bs=None, runtime=None, guest_cpus=None, numjobs=None, rounds=None,
                    guest_timeout=600, stall_seconds=60)
        base.update(kw)
        return types.SimpleNamespace(**base)

    def test_demo_defaults_flags_and_scenarios(self):
        k = knobs_of(self.args("demo"), scenarios.SCENARIOS["compare"])
        self.assertEqual((k["bs"], k["numjobs"], k["guest_cpus"], k["rounds"], k["mode"]), ("4k,128k", "1,2", "2", 3, "fio"))
        k = knobs_of(self.args("demo", runtime=20, rounds=5), scenarios.SCENARIOS["compare"])
        self.assertEqual((k["runtime"], k["rounds"]), ("20", 5))
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["smp-smoke"])
        self.assertEqual((k["bs"], k["numjobs"], k["guest_cpus"], k["mode"], k["rounds"]), ("128k,4k", "2", "2", "mixed", 1))
        args = report_args(k, ["a:vmm:viommu:baseline"], "0000:00:01.0")
        self.assertEqual(args[:4], ["--device", "0000:00:01.0", "--columns", "a:vmm:viommu:baseline"])
        self.assertIn("--rounds", args)

    def test_iodepth_reaches_the_tool(self):
        k = knobs_of(self.args("demo"), scenarios.SCENARIOS["compare"])
        self.assertEqual(k["iodepth"], "64")
        k = knobs_of(self.args("demo", iodepth=4), scenarios.SCENARIOS["compare"])
        args = report_args(k, ["a:vmm:viommu:baseline"], "0000:00:01.0")
        self.assertEqual(args[args.index("--iodepth") + 1], "4")
        self.assertEqual(args[args.index("--ramp") + 1], "2", "the demo ramps 2 s by default")
        k = knobs_of(self.args("run", ramp=None), scenarios.SCENARIOS["compare"])
        self.assertEqual(report_args(k, ["a:vmm:viommu:baseline"], "x")[args.index("--ramp") + 1], "0")

    def test_every_measurement_runs_on_the_fixed_outer_qemu(self):
        # Measurements run on the outer QEMU that carries the TCG fix; only
        # the race's own reproducer pins an unfixed one.
        for name, sc in scenarios.SCENARIOS.items():
            k = knobs_of(self.args("run"), sc)
            if name == "tcg-race":
                self.assertEqual(k["outer_qemu"], "11.1")
            else:
                self.assertIn(k["outer_qemu"], host.FIXED_OUTER_QEMUS, name)

    def test_demo_runs_what_the_readme_standing_is_measured_in(self):
        # Issue 32: the demo's defaults are the headline's configuration.
        k = knobs_of(self.args("demo"), scenarios.SCENARIOS["compare"])
        self.assertEqual((k["host_iommu"], k["ramp"], k["lead"]), ("virtio", "2", "ours+patched-lazy"))
        self.assertEqual((k["vmm_qemu"], k["host_kernel"], k["outer_qemu"]), ("11.1", "6.12", "10.0-fixed"))
        lazy = [r for r in presets.DEMO["runs"] if r.startswith(("ours+patched-lazy:", "qemu+patched:"))]
        self.assertEqual(len(lazy), 2)
        self.assertTrue(all(r.endswith("iommu.reuse_window_ms=1000") for r in lazy), lazy)
        strict = next(r for r in presets.DEMO["runs"] if r.startswith("ours+patched-strict:"))
        self.assertNotIn("reuse_window", strict)
        args = report_args(k, presets.DEMO["runs"], "x")
        self.assertEqual(args[args.index("--lead") + 1], "ours+patched-lazy")
        # The lead goes to the tool only when that column runs.
        self.assertNotIn("--lead", report_args(k, ["a:vmm:viommu:baseline"], "x"))
        # Plain runs keep the lab's own defaults.
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["compare"])
        self.assertEqual((k["host_iommu"], k["ramp"], k["lead"]), ("vtd", "0", None))

    def test_outer_qemu_is_the_binary_the_lab_host_runs_under(self):
        # By default the lab host runs under the outer QEMU with our fix,
        # and CI builds that QEMU ahead for the scenarios that need it.
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["smoke"])
        self.assertEqual(k["outer_qemu"], "10.0-fixed")
        self.assertEqual(kernels.outer_qemus_to_build(["smoke", "distro-vm"]), ["10.0"])
        self.assertEqual(kernels.outer_qemus_to_build(["levers"]), ["10.0"])
        self.assertEqual(kernels.outer_qemus_to_build(["tcg-race"]), [])
        self.assertEqual(host.outer_qemu("7.2"), "qemu-system-x86_64")
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        cmd = host.host_command(image, Path("/d"), "c", 2, "vtd", "", "/roots/q/bin/qemu-system-x86_64")
        self.assertEqual(cmd[0], "/roots/q/bin/qemu-system-x86_64")
        k = knobs_of(self.args("run", outer_qemu="11.1"), scenarios.SCENARIOS["smoke"])
        self.assertEqual(k["outer_qemu"], "11.1")

    def test_outer_tcg_threading_is_multi_unless_asked(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["smoke"])
        self.assertEqual(k["outer_tcg"], "multi")
        cmd = host.host_command(image, Path("/d"), "c", 2)
        self.assertEqual(cmd[cmd.index("-accel") + 1], "tcg,thread=multi")
        k = knobs_of(self.args("run", outer_tcg="single"), scenarios.SCENARIOS["smoke"])
        cmd = host.host_command(image, Path("/d"), "c", 2, tcg_thread=k["outer_tcg"])
        self.assertEqual(cmd[cmd.index("-accel") + 1], "tcg,thread=single")
        self.assertEqual(cmd.count("-accel"), 1)

    def test_outer_icount_is_off_unless_asked_and_forces_single_threaded_tcg(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["smoke"])
        self.assertEqual(k["outer_icount"], "")
        self.assertNotIn("-icount", host.host_command(image, Path("/d"), "c", 2, icount=k["outer_icount"]))
        k = knobs_of(self.args("run", outer_icount="3"), scenarios.SCENARIOS["smoke"])
        cmd = host.host_command(image, Path("/d"), "c", 2, tcg_thread="multi", icount=k["outer_icount"])
        self.assertEqual(cmd[cmd.index("-icount") + 1], "shift=3,sleep=on")
        self.assertEqual(cmd[cmd.index("-accel") + 1], "tcg,thread=single")

    def test_outer_icount_shift_is_checked(self):
        from labkit import cli
        self.assertEqual(cli.icount_shift("03"), "3")
        for bad in ("11", "-1", "auto", ""):
            with self.assertRaises(Exception) as e:
                cli.icount_shift(bad)
            self.assertIn("0-10", str(e.exception))

    def test_outer_memory_is_plain_unless_locked(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["smoke"])
        self.assertEqual(k["outer_mem"], "plain")
        self.assertNotIn("-overcommit", host.host_command(image, Path("/d"), "c", 2, outer_mem=k["outer_mem"]))
        k = knobs_of(self.args("run", outer_mem="locked"), scenarios.SCENARIOS["smoke"])
        cmd = host.host_command(image, Path("/d"), "c", 2, outer_mem=k["outer_mem"])
        self.assertEqual(cmd[cmd.index("-overcommit") + 1], "mem-lock=on-fault")

    def test_host_iommu_picks_device_kernel_and_cmdline(self):
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["compare"])
        self.assertEqual(k["host_iommu"], "vtd")
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        cmd = host.host_command(image, Path("/d"), "c", 2)
        self.assertIn("intel-iommu,intremap=on", cmd)
        k = knobs_of(self.args("demo", host_iommu="virtio"), scenarios.SCENARIOS["compare"])
        cmd = host.host_command(image, Path("/d"), "c", 2, k["host_iommu"])
        self.assertIn("virtio-iommu-pci", cmd)
        self.assertNotIn("intel-iommu,intremap=on", cmd)
        self.assertEqual(host.HOST_IOMMUS["virtio"]["kernel"], "labhost")
        self.assertIn("allow_unsafe_interrupts", host.HOST_IOMMUS["virtio"]["cmdline"])

    def test_multipath_nvme_is_a_subsystem_of_two_controllers(self):
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        # One controller unless asked: the drive on it, as before.
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["lbs4k-smoke"])
        self.assertFalse(k["nvme_multipath"])
        one = host.nvme_args(k["nvme_ioqpairs"], k["nvme_mdts"], k["nvme_lbs"], k["nvme_multipath"])
        self.assertEqual(one, ["-device", "nvme,serial=lab0,drive=nv0,logical_block_size=4096,physical_block_size=4096"])
        self.assertEqual(host.host_command(image, Path("/d"), "c", 2, nvme=one).count("-device"), 2)
        # The multipath scenario (or --nvme-multipath on any scenario).
        k = knobs_of(self.args("run"), scenarios.SCENARIOS["multipath"])
        self.assertTrue(k["nvme_multipath"])
        self.assertTrue(knobs_of(self.args("run", nvme_multipath=True), scenarios.SCENARIOS["smoke"])["nvme_multipath"])
        args = host.nvme_args(1, 3, 4096, True)
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
        cmd = host.host_command(image, Path("/d"), "c", 2, nvme=args)
        self.assertEqual(cmd.count("-device"), 5)
        self.assertIn("nvme-ns,drive=nv0,nsid=1,shared=on,logical_block_size=4096,physical_block_size=4096", cmd)

    def test_the_debian13_userland_scenario(self):
        sc = scenarios.SCENARIOS["debian13-userland"]
        self.assertEqual(sc["userland"], ["fio", "busybox-static"])
        self.assertEqual({base.vmm_of(s) for s in sc["runs"]}, {"qemu", "vmm"}, "a stock QEMU column and one of ours")
        k = knobs_of(self.args("run"), sc)
        self.assertEqual(k["vmm_qemu"], "11.1")
        k["tool_specs"], _ = tool_specs(sc["runs"])
        knobs = host_knobs(sc, k, sc["runs"], 1)
        # The stock QEMU is the root's (found on its PATH), not /lab/qemu's;
        # the script checks its version.
        self.assertEqual((knobs["userland"], knobs["scenario"]), ("11.1", "debian13-userland"))
        self.assertNotIn("qemu", knobs)
        k = knobs_of(self.args("run", vmm_qemu="10.0"), sc)
        k["tool_specs"], _ = tool_specs(sc["runs"])
        self.assertEqual(host_knobs(sc, k, sc["runs"], 1)["userland"], "10.0")
        # Any other scenario with --vmm-qemu 11.1: QEMU from /lab/qemu.
        k = knobs_of(self.args("run", vmm_qemu="11.1"), scenarios.SCENARIOS["smoke"])
        k["tool_specs"], _ = tool_specs(scenarios.SCENARIOS["smoke"]["runs"])
        knobs = host_knobs(scenarios.SCENARIOS["smoke"], k, scenarios.SCENARIOS["smoke"]["runs"], 1)
        self.assertEqual(knobs["qemu"], "/lab/qemu/qemu-system-x86_64")
        self.assertNotIn("userland", knobs)
        cmd = images.build_image_command({"baseline"}, ["/t/vmm"], userland="/roots/u/bin/qemu-system-x86_64")
        self.assertEqual(cmd[cmd.index("--userland") + 1], "/roots/u/bin/qemu-system-x86_64")
        self.assertNotIn("--vmm-qemu", cmd)
        self.assertEqual(cmd[-2:], ["--bin", "/t/vmm"])
        self.assertNotIn("--userland", images.build_image_command({"baseline"}, []))

    def bench_args_of(self, knobs: dict, extra: str = "") -> list[str]:
        """host-lib.sh's bench_args for a lab host booted with KNOBS (as
        boot_host puts them on its command line, then EXTRA: an A/B's B
        round's parameters), one flag or value a line."""
        lib = LAB_DIR.joinpath("host-lib.sh")
        with tempfile.TemporaryDirectory() as d:
            cmdline = Path(d) / "cmdline"
            cmdline.write_text("console=ttyS0 " + " ".join(f"lab.{n}={v}" for n, v in knobs.items()) + f" {extra}\n")
            out = __import__("subprocess").run(["busybox", "sh", "-c", f". {lib}; BDF=0000:00:01.0; bench_args"], capture_output=True,
                                               text=True, env={"LAB_CMDLINE": str(cmdline), "PATH": "/usr/bin:/bin"})
        self.assertEqual(out.returncode, 0, out)
        return out.stdout.splitlines()

    def test_named_kernels_reach_the_bench_tool(self):
        sc = scenarios.SCENARIOS["smoke"]
        k = knobs_of(self.args("run"), sc)
        runs = ["a:qemu:viommu:baseline-6.12", "b:vmm:viommu:baseline-7.3"]
        k["tool_specs"], kernels = tool_specs(runs)
        k.update(kernels)
        args = self.bench_args_of(host_knobs(sc, k, runs, 1))
        self.assertEqual(args[args.index("--kernel") + 1], "baseline-7.3=/lab/guest/baseline-7.3.bzImage")
        self.assertEqual(args[args.index("--kernel-stock") + 1], "/lab/guest/baseline-6.12.bzImage")

    def test_pin_vcpus_reaches_the_bench_tool_and_a_b_rounds_win(self):
        sc = scenarios.SCENARIOS["smoke"]
        for flag, want in ((None, False), (True, True)):
            k = knobs_of(self.args("run", pin_vcpus=flag), sc)
            k["tool_specs"], _ = tool_specs(sc["runs"])
            knobs = host_knobs(sc, k, sc["runs"], 1)
            self.assertEqual(knobs["pin_vcpus"], "1" if want else "0")
            self.assertEqual("--pin-vcpus" in self.bench_args_of(knobs), want)
        # An A/B's B rounds append lab.pin_vcpus=1 after the knobs: the last wins.
        k = knobs_of(self.args("run"), sc)
        k["tool_specs"], _ = tool_specs(sc["runs"])
        knobs = host_knobs(sc, k, sc["runs"], 1)
        self.assertIn("--pin-vcpus", self.bench_args_of(knobs, "lab.pin_vcpus=1"))

    def test_breakdown_reaches_the_bench_tool(self):
        sc = scenarios.SCENARIOS["breakdown"]
        k = knobs_of(self.args("run"), sc)
        k["tool_specs"], kernels = tool_specs(sc["runs"])
        k.update(kernels)
        knobs = host_knobs(sc, k, sc["runs"], 1)
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
        # The demo's stack: our 6.12 lab host behind virtio-iommu under the
        # fixed outer QEMU, QEMU 11.1 as the stock VMM.
        self.assertEqual((k["host_iommu"], k["host_kernel"], k["vmm_qemu"], k["outer_qemu"], k["rounds"]),
                         ("virtio", "6.12", "11.1", "10.0-fixed", 1))
        # The flag on any scenario; off by default.
        smoke = scenarios.SCENARIOS["smoke"]
        for flag, want in ((True, True), (False, False)):
            k = knobs_of(self.args("run", breakdown=flag), smoke)
            k["tool_specs"], kernels = tool_specs(smoke["runs"])
            k.update(kernels)
            knobs = host_knobs(smoke, k, smoke["runs"], 1)
            self.assertEqual(knobs["breakdown"], "1" if want else "0")
            self.assertEqual("--breakdown" in self.bench_args_of(knobs), want)
        # The scenario fails a vIOMMU guest that recorded no breakdown.
        ok = {"column": "ours+stock", "round": 0, "status": {"status": "ok"}, "warnings": [],
              "phases": {"breakdown-randread-4k": {"breakdown": {"server_tid": 7}}}}
        bad = {"column": "qemu+stock", "round": 0, "status": {"status": "ok"}, "phases": {},
               "warnings": ["breakdown-randread-4k: not recorded: --breakdown: no trace event raw_syscalls/sys_enter"]}
        self.assertEqual(judge.breakdown_problems([ok, bad], sc["runs"]),
                         ["qemu+stock round 1: no breakdown with a request-serving thread (breakdown-randread-4k: not recorded: "
                          "--breakdown: no trace event raw_syscalls/sys_enter)"])
        # The lab host's own 6.12 kernel has what --breakdown records.
        # (Both fragments: a 6.12 build merges the common one first.)
        frag = "".join(LAB_DIR.joinpath(f).read_text() for f in ("host-config-fragment", "host-config-fragment-6.12"))
        for opt in ("CONFIG_FTRACE_SYSCALLS=y", "CONFIG_KPROBE_EVENTS=y"):
            self.assertIn(opt, frag)
        # ENABLE_DEFAULT_TRACERS cannot be on beside the syscall events (it
        # needs !GENERIC_TRACER): build-kernel.sh would refuse the config.
        self.assertNotIn("CONFIG_ENABLE_DEFAULT_TRACERS=y", frag)

    def test_host_thp_reaches_the_lab_hosts_kernel(self):
        from labkit import boot
        sc = scenarios.SCENARIOS["smoke"]
        k = knobs_of(self.args("run"), sc)
        self.assertEqual(k["host_thp"], "")
        self.assertNotIn("transparent_hugepage", boot.host_cmdline(k, {}), "the kernel's own setting")
        for thp in host.HOST_THP:
            k = knobs_of(self.args("run", host_thp=thp), sc)
            self.assertIn(f"transparent_hugepage={thp}", boot.host_cmdline(k, {}).split())

    def bench_tool_flag(self, sc, name, flag, want):
        """The bench-tool scenario's knobs with the lab flag NAME set to
        FLAG: the lab host's knob and the bench tool's flag (in its table's
        flags too) on exactly when WANT."""
        k = knobs_of(self.args("run", **{name: flag}, host_iommu=None), sc)
        k["tool_specs"], kernels = tool_specs(sc["runs"])
        k.update(kernels)
        knobs = host_knobs(sc, k, sc["runs"], 1)
        self.assertEqual(knobs[name], "1" if want else "0")
        option = "--" + name.replace("_", "-")
        self.assertEqual(option in self.bench_args_of(knobs), want)
        self.assertEqual(option in report_args(k, sc["runs"], "x"), want)
        return k, knobs

    def test_hugepages_are_reserved_at_boot_and_reach_the_bench_tool(self):
        from labkit import boot
        sc = scenarios.SCENARIOS["bench-tool"]
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        for flag, want in ((None, False), (True, True)):
            k, knobs = self.bench_tool_flag(sc, "hugepages", flag, want)
            cmdline = boot.host_cmdline(k, knobs)
            # One 1 GiB guest at a time: 512 pages, and the margin.
            self.assertEqual("hugepages=576" in cmdline.split(), want, cmdline)
            ram = host.host_ram_mib(k["hugepages"] == "1")
            self.assertEqual(ram, 4224 if want else 4096)
            cmd = host.host_command(image, Path("/d"), cmdline, 2, ram_mib=ram)
            self.assertEqual(cmd[cmd.index("-m") + 1], str(ram))
        # What is left beside the pool is what a running guest left before.
        self.assertEqual(host.host_ram_mib(True) - 2 * host.hugepages_at_boot(), host.HOST_RAM_MIB - host.GUEST_RAM_MIB)
        # The guests' buffers in their own huge pages: the bench tool's flag,
        # in its table too; nothing for the lab host.
        for flag, want in ((None, False), (True, True)):
            k, knobs = self.bench_tool_flag(sc, "guest_hugepages", flag, want)
            self.assertFalse(any(w.startswith("hugepages=") for w in boot.host_cmdline(k, knobs).split()))
        # Our guest kernels have hugetlbfs for it.
        self.assertIn("CONFIG_HUGETLBFS=y", (LAB_DIR.parent.parent / "guest-patches" / "config-fragment").read_text().splitlines())
        # The lab's own host kernel has hugetlbfs (Debian's cloud kernel has it too).
        self.assertIn("CONFIG_HUGETLBFS=y", LAB_DIR.joinpath("host-config-fragment").read_text())

    def test_the_debian13_userland_has_no_qemu_7_2(self):
        with tempfile.TemporaryDirectory() as d:
            # The outer QEMU is named, not built: on a fresh machine the
            # real lookup builds the fixed one (minutes) inside this test.
            orig = run.CACHE, run.outer_version, run.outer_qemu
            run.CACHE, run.outer_version = Path(d), lambda b: "QEMU emulator version 7.2"
            run.outer_qemu = lambda v: "qemu-system-x86_64"
            try:
                with self.assertRaises(base.LabError) as e:
                    run.run_scenario(self.args("run", scenario="debian13-userland", runs=None, vmm_qemu="7.2", log=None, bin=None))
            finally:
                run.CACHE, run.outer_version, run.outer_qemu = orig
            self.assertIn("has QEMU 10.0 or 11.1, not 7.2", str(e.exception))
            self.assertEqual(list((Path(d) / "runs").iterdir()), [], "its run directory is gone")

    def test_without_flag_drops_a_flag_and_its_value(self):
        lib = LAB_DIR.joinpath("host-lib.sh")
        script = f". {lib}; printf '%s\\n' --kernel-stock k --initramfs /lab/guest/initramfs.cpio --vmm v | without_flag --initramfs"
        for sh in ("sh", "busybox"):
            cmd = [sh, "sh", "-c", script] if sh == "busybox" else [sh, "-c", script]
            out = __import__("subprocess").run(cmd, capture_output=True, text=True)
            self.assertEqual(out.stdout.split(), ["--kernel-stock", "k", "--vmm", "v"], (sh, out))

    def test_lab_check_prints_json_whatever_the_detail(self):
        # A guest's boot record with its carriage return and quotes in a
        # check's detail broke CI's vmm-exits once (the runner's json.loads).
        lib = LAB_DIR.joinpath("host-lib.sh")
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
        lib = LAB_DIR.joinpath("host-lib.sh")
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

    def test_an_igb_reaches_the_outer_qemu_and_the_lab_host(self):
        sc = scenarios.SCENARIOS["smoke"]
        k = knobs_of(self.args("run", nic="igb", outer_qemu="11.1"), sc)
        k["tool_specs"] = []
        self.assertEqual(host_knobs(sc, k, [], 1)["nic"], "igb")
        image = {"HOST_KERNEL": "k", "HOST_INITRD": "i"}
        cmd = host.host_command(image, Path("/d"), "c", 2, nic=k["nic"])
        igb = [a for a in cmd if a.startswith("igb,")]
        self.assertEqual(len(igb), 1, cmd)
        self.assertNotIn("netdev=", igb[0], "no backend: the PF and its VFs talk inside the NIC")
        # Without a NIC (the default): no igb, and no lab.nic knob.
        k = knobs_of(self.args("run"), sc)
        k["tool_specs"] = []
        self.assertEqual(k["nic"], "none")
        self.assertNotIn("nic", host_knobs(sc, k, [], 1))
        self.assertFalse(any(a.startswith("igb") for a in host.host_command(image, Path("/d"), "c", 2, nic=k["nic"])))

    def test_an_igb_needs_an_outer_qemu_that_has_one(self):
        sc = scenarios.SCENARIOS["smoke"]
        k = knobs_of(self.args("run", nic="igb", outer_qemu="7.2"), sc)
        with self.assertRaises(base.LabError) as e:
            run.qemus_of(self.args("run", scenario="smoke"), sc, k, {})
        self.assertIn("--nic igb: QEMU 7.2 has no igb", str(e.exception))

    def test_an_ab_outer_qemu_is_checked_like_the_main_one(self):
        sc = scenarios.SCENARIOS["smoke"]
        k = knobs_of(self.args("run", nic="igb"), sc)
        with mock.patch.dict(os.environ, {"LAB_OUTER_QEMU_AB": "7.2"}), \
                mock.patch.object(run, "outer_qemu", return_value="/q"), \
                mock.patch.object(run, "outer_version", return_value="x"):
            with self.assertRaises(base.LabError) as e:
                run.qemus_of(self.args("run", scenario="smoke"), sc, k, {})
        self.assertIn("LAB_OUTER_QEMU_AB 7.2 with --nic igb: QEMU 7.2 has no igb", str(e.exception))
        k = knobs_of(self.args("run", outer_qemu="7.2", outer_mem="locked"), sc)
        with self.assertRaises(base.LabError) as e:
            run.qemus_of(self.args("run", scenario="smoke"), sc, k, {})
        self.assertIn("--outer-qemu 7.2 with --outer-mem locked", str(e.exception))

    def test_the_distro_vm_boots_from_its_drive_with_an_igb(self):
        sc = scenarios.SCENARIOS["distro-vm"]
        k = knobs_of(self.args("run"), sc)
        self.assertEqual((k["nic"], k["outer_qemu"], k["host_iommu"], k["host_kernel"]), ("igb", "10.0-fixed", "virtio", "6.12"))
        self.assertEqual(knobs_of(self.args("run", nic="none"), sc)["nic"], "none")
        cmd = images.build_image_command(set(), ["/t/vmm"], distro="/c/distro-vm/debian13-x")
        self.assertEqual(cmd[cmd.index("--distro") + 1], "/c/distro-vm/debian13-x")
        self.assertNotIn("--distro", images.build_image_command({"baseline"}, []))

    def test_a_drive_image_is_copied_for_each_boot(self):
        from labkit import boot
        with tempfile.TemporaryDirectory() as d:
            img = Path(d) / "disk.img"
            with open(img, "wb") as f:
                f.truncate(4 << 20)
                f.write(b"root")
            run_dir = Path(d) / "run"
            run_dir.mkdir()
            disk = boot.fresh_drive(run_dir, str(img))
            self.assertEqual(disk.read_bytes()[:4], b"root")
            self.assertEqual(disk.stat().st_size, 4 << 20)
            disk.write_bytes(b"written by a boot")
            self.assertEqual(img.read_bytes()[:4], b"root", "the image itself is never written")
            disk = boot.fresh_drive(run_dir, None)
            self.assertEqual(disk.stat().st_size, 1 << 30)

    def test_new_scenarios_have_scripts_and_checks(self):
        for name in ("multipath", "own-kernel", "debian13-userland", "distro-vm"):
            sc = scenarios.SCENARIOS[name]
            self.assertTrue((LAB_DIR.joinpath("scenarios") / f"{sc['script']}.sh").is_file(), name)
            self.assertTrue(sc["checks"], name)


if __name__ == "__main__":
    unittest.main()
