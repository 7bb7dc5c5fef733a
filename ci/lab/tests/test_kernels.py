"""Unit tests of the scenario catalogue's kernels and columns (no VM)."""

import re
import unittest

from labkit import base, kernels, knobs, presets, scenarios
from tests import test_settings
from tests.fixtures import LAB_DIR


class KernelsTest(unittest.TestCase):
    def test_every_7x_guest_boots_with_the_labs_7x_parameters(self):
        # Without noxsave a 7.3 guest crashes at boot in the lab (LAB_7X_PARAMS).
        runs = [s for sc in scenarios.SCENARIOS.values() for s in sc.get("runs", [])] + presets.seven_three_runs("x=1")
        seven = [s for s in runs if s.split(":")[3].endswith("-7.3")]
        self.assertGreaterEqual(len(seven), 8)
        for s in seven:
            self.assertIn(presets.LAB_7X_PARAMS, s.split(":", 4)[4].split("+"), s)
        # The demo's 7.3 lazy column gets the demo's reuse window, and the
        # tool gets the 7.3 kernels by name beside the 6.12 ones (and
        # Debian's package, the user-setup columns' kernel).
        extra = presets.seven_three_runs(presets.DEMO_LAZY_OPTS)
        self.assertTrue(extra[2].endswith("+" + presets.DEMO_LAZY_OPTS), extra)
        _, knobs = kernels.tool_specs(presets.DEMO["runs"] + extra)
        self.assertEqual(knobs["kernels"], "debian-6.12,baseline-7.3,patched-7.3")

    def test_ci_runs_the_73_series_on_one_73_kernel(self):
        # smoke-7.3-ci (by hand) needs one 7.3 kernel built: the patched one.
        sc = scenarios.SCENARIOS["smoke-7.3-ci"]
        self.assertEqual({s.split(":")[3] for s in sc["runs"]}, {"patched-7.3"})
        full = [base.tag_of(s) for s in scenarios.SCENARIOS["smoke-7.3"]["runs"]]
        self.assertEqual([base.tag_of(s) for s in sc["runs"]], [t for t in full if t not in ("qemu+stock", "ours+lazy")])
        self.assertIn("link_hits", sc["expect"]["ours+lazy+reuse"])

    def test_ci_runs_smoke_612_without_its_lazy_guest_that_has_no_cache(self):
        sc, full = scenarios.SCENARIOS["smoke-6.12-ci"], scenarios.SCENARIOS["smoke-6.12"]
        self.assertEqual([base.tag_of(s) for s in sc["runs"]], [base.tag_of(s) for s in full["runs"] if base.tag_of(s) != "ours+lazy"])
        # the reuse guests still run lazy and are judged as in smoke-6.12
        self.assertEqual(sc["expect"]["ours+lazy+reuse"], full["expect"]["ours+lazy+reuse"])
        self.assertEqual(sc["idle_check"], full["idle_check"])
        self.assertEqual(sc["max_hw_kb"], full["max_hw_kb"])

    def test_every_column_a_scenario_judges_is_one_it_runs(self):
        for name, sc in scenarios.SCENARIOS.items():
            tags = {base.tag_of(s) for s in sc.get("runs", [])}
            named = set(sc.get("expect", {})) | set(sc.get("expect_zero", {}))
            named |= set(sc.get("idle_check", [])) | set(sc.get("max_hw_kb", {}))
            if "hostile" in sc:
                named |= {sc["hostile"]["column"], sc["hostile"]["control"]}
            self.assertLessEqual(named, tags, name)

    @staticmethod
    def ci_lab_steps() -> list[str]:
        text = (LAB_DIR.parent / "test.sh").read_text()
        m = re.search(r"lab_steps=\(([^)]*)\)", text)
        assert m, "ci/test.sh has no lab_steps=( ... )"
        return m.group(1).split()

    def test_ci_runs_only_scenarios_the_lab_has(self):
        ran = self.ci_lab_steps()
        self.assertIn("smoke-6.12-ci", ran)
        self.assertIn("iommufd", ran)
        for name in ran:
            self.assertIn(name, scenarios.SCENARIOS)

    def test_ci_builds_its_kernels_in_the_order_its_steps_need_them(self):
        # Three kernels, all 6.12 (the stock guest is stock 6.12, the smoke
        # steps' patched guest patched 6.12; 6.1 and 7.3 boot by hand), each
        # once, in the order of the first step that boots it, and the steps
        # grouped by kernel: the background build (ci/prebuild-kernels.sh)
        # then works on the next group's kernel while a group runs.
        self.assertEqual(kernels.kernels_to_build(self.ci_lab_steps()),
                         [("6.12", "baseline"), ("6.12", "patched"), ("6.12", "labhost")])

    def test_a_scenario_that_boots_its_own_guests_is_told_their_kernel(self):
        # vmm-exits.sh boots /lab/guest/$(lab_arg kernel_patched).bzImage.
        self.assertEqual(kernels.own_kernel_knobs(scenarios.SCENARIOS["vmm-exits"]), {"kernel_patched": "patched-6.12"})
        self.assertEqual(kernels.own_kernel_knobs(scenarios.SCENARIOS["vmm-boot"]), {"kernel_stock": "baseline"})
        self.assertEqual(kernels.own_kernel_knobs(scenarios.SCENARIOS["smoke"]), {})
        # restore.sh runs the tool with its own column on the stock guest.
        self.assertEqual(kernels.own_kernel_knobs(scenarios.SCENARIOS["restore"]), {"kernel_stock": "baseline-6.12"})
        self.assertEqual(kernels.kernels_to_build(["restore"]), [("6.12", "baseline")])

    def test_scenarios_without_guests_need_no_kernel(self):
        self.assertEqual(kernels.kernels_to_build(["vfio-backend", "vmm-errors"]), [])
        self.assertEqual(kernels.kernels_to_build(["vmm-boot"]), [("6.1", "baseline")])
        self.assertEqual(kernels.kernels_to_build(["iommufd"]), [("6.12", "baseline"), ("6.12", "labhost")])
        with self.assertRaises(base.LabError):
            kernels.kernels_to_build(["no-such-scenario"])

    def test_the_tool_gets_two_kernels_named_by_knobs(self):
        specs, knobs = kernels.tool_specs(scenarios.SCENARIOS["compare"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12", "kernel_patched": "patched-6.12"})
        self.assertEqual(specs[3], "ours+patched-strict:vmm:viommu:patched:strict")
        self.assertEqual(specs[5], "no-viommu:qemu:none:baseline")
        specs, knobs = kernels.tool_specs(scenarios.SCENARIOS["smoke-6.12"]["runs"])
        self.assertEqual(knobs, {"kernel_patched": "patched-6.12"})
        _, knobs = kernels.tool_specs(scenarios.SCENARIOS["smoke"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12"})
        _, knobs = kernels.tool_specs(scenarios.SCENARIOS["compare-6.1"]["runs"])
        self.assertEqual(knobs, {"kernel_stock": "baseline", "kernel_patched": "patched"})
        # A second version of a variant goes to the tool by name.
        specs, knobs = kernels.tool_specs(["a:qemu:viommu:baseline-6.12", "b:qemu:viommu:baseline-7.3:noxsave",
                                       "c:vmm:viommu:baseline-7.3", "d:vmm:viommu:patched"])
        self.assertEqual(specs, ["a:qemu:viommu:baseline", "b:qemu:viommu:baseline-7.3:noxsave",
                                 "c:vmm:viommu:baseline-7.3", "d:vmm:viommu:patched"])
        self.assertEqual(knobs, {"kernel_stock": "baseline-6.12", "kernel_patched": "patched", "kernels": "baseline-7.3"})
        with self.assertRaisesRegex(base.LabError, "not baseline"):
            kernels.tool_specs(["a:vmm:viommu:stock-6.12"])

    def test_a_fetched_distribution_kernel_is_named_not_built(self):
        specs, knobs_ = kernels.tool_specs(["d:vmm:viommu:debian-6.12", "v:qemu:vtd:baseline-6.12"])
        self.assertEqual(specs, ["d:vmm:viommu:debian-6.12", "v:qemu:vtd:baseline"])
        self.assertEqual(knobs_, {"kernel_stock": "baseline-6.12", "kernels": "debian-6.12"})
        self.assertEqual(kernels.kernels_to_build(["distro-smoke"]), [])
        self.assertEqual(kernels.kernels_to_build(["vtd-smoke"]), [("6.12", "baseline"), ("6.12", "patched")])

    def test_the_series_on_debians_config_is_a_patched_kernel(self):
        # Alone in its role: the tool's patched kernel, the knob naming it.
        specs, knobs_ = kernels.tool_specs(["d:vmm:viommu:debian-6.12", "p:vmm:viommu:debpatched-6.12:lazy"])
        self.assertEqual(specs, ["d:vmm:viommu:debian-6.12", "p:vmm:viommu:patched:lazy"])
        self.assertEqual(knobs_, {"kernel_patched": "debpatched-6.12", "kernels": "debian-6.12"})
        # Beside the tinyconfig build: by name.
        specs, knobs_ = kernels.tool_specs(["a:vmm:viommu:patched-6.12", "b:vmm:viommu:debpatched-6.12"])
        self.assertEqual(specs, ["a:vmm:viommu:patched", "b:vmm:viommu:debpatched-6.12"])
        self.assertEqual(knobs_, {"kernel_patched": "patched-6.12", "kernels": "debpatched-6.12"})

    def test_the_judge_checks_the_iommu_each_guest_reported(self):
        from labkit import judge
        cell = lambda units, dom: {"column": "v", "round": 0, "boot": {"iommus": units, "nvme_domain": dom}}
        self.assertEqual(judge.iommu_problems([cell("dmar0", "DMA")], {"v": ("dmar", "DMA")}), [])
        p = judge.iommu_problems([cell("0000:00:02.0", "DMA-FQ")], {"v": ("dmar", "DMA")})
        self.assertEqual(len(p), 2, p)
        self.assertIn("expected a dmar unit", p[0])
        # virtio-iommu names its unit after its PCI function, as seen in
        # the lab with Debian 13's kernel behind our VMM.
        self.assertEqual(judge.iommu_problems([cell("0000:00:02.0", "DMA-FQ")], {"v": ("virtio", "DMA-FQ")}), [])
        self.assertEqual(judge.iommu_kind("ivhd0"), "ivhd")

    def test_scaling_runs_both_job_counts_in_each_guest(self):
        k = knobs.knobs_of(test_settings.SettingsTest.args(None, "run"), scenarios.SCENARIOS["scaling"])
        self.assertEqual((k["numjobs"], k["guest_cpus"], k["mode"]), ("1,2", "2", "fio"))
        # The demo's default guests are 6.12; 6.1 stays in CI as a smoke test.
        self.assertTrue(all(r.split(":")[3].endswith("-6.12") for r in scenarios.SCENARIOS["compare"]["runs"]))


if __name__ == "__main__":
    unittest.main()
