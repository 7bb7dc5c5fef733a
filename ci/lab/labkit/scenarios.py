"""The scenario catalogue: every scenario the lab runs, by name, in the
order `ci/lab/lab run --help` lists them, with the shorter forms CI runs.

A scenario is a dict: "help" (one line for --help), "script" (what the lab
host runs: scenarios/SCRIPT.sh, or guest-runs for the bench tool),
"runs" (its columns, TAG:VMM:IOMMU:KERNEL[:OPT], KERNEL one of the lab's
guest kernels: VARIANT or VARIANT-VERSION, e.g. baseline, patched,
baseline-6.12, patched-6.12; no version: 6.1), "timeout" (one lab host
boot's wall-clock bound), and optionally the bench tool's settings (mode,
bs, runtime, ramp, guest_cpus, numjobs, rounds), the lab host's (host_iommu,
host_kernel, outer_qemu, vmm_qemu, nvme_*), what it builds (cargo_bins,
c_bins: static C programs from ci/lab, guest_kernels, userland) and what the judge expects (checks,
no_skipped_checks, expect, expect_zero, idle_ms/idle_check, max_hw_kb,
hostile, breakdown)."""

from __future__ import annotations

from .scenarios_guests import GUEST_SCENARIOS
from .scenarios_programs import PROGRAM_SCENARIOS

# The order the scenarios are listed in (run's --help). A scenario defined
# in either module and missing here is an error at import.
LISTED = (
    "smoke", "qemu-baseline", "compare", "compare-6.1", "compare-stock", "guest-patches", "patched-smoke",
    "lazy-smoke", "smp-smoke", "icount-smoke", "smp-smoke-1qp", "poll-smoke", "vcpu-kicks", "levers", "reuse-7.3", "hostile",
    "lbs4k-smoke", "multipath", "vtd-smoke", "distro-smoke", "distro-vm", "own-kernel", "debian13-userland", "scaling", "smoke-6.12", "smoke-7.3",
    "fault-census", "breakdown", "vmm-boot", "vmm-smoke", "vmm-errors", "bench-tool", "restore", "vmm-exits",
    "vfio-backend", "iommufd", "tcg-race",
)


def _listed(*groups: dict) -> dict:
    """The scenarios of GROUPS in LISTED's order; every one listed once."""
    merged = {name: sc for group in groups for name, sc in group.items()}
    if sorted(merged) != sorted(LISTED) or len(merged) != sum(len(g) for g in groups):
        raise RuntimeError(f"scenarios.LISTED and the scenario modules disagree: {sorted(set(merged) ^ set(LISTED))}")
    return {name: merged[name] for name in LISTED}


SCENARIOS = _listed(GUEST_SCENARIOS, PROGRAM_SCENARIOS)


def without_columns(name: str, tags: tuple[str, ...], help_text: str) -> dict:
    """Scenario NAME without the columns TAGS (and what it expects of
    them): the shorter form CI runs."""
    sc = SCENARIOS[name]
    return {
        **sc,
        "help": help_text,
        "runs": [r for r in sc["runs"] if r.split(":", 1)[0] not in tags],
        "expect": {k: v for k, v in sc.get("expect", {}).items() if k not in tags},
    }


# The 7.3 series on one 7.3 kernel: smoke-7.3 without its stock 7.3 column,
# so that a cold machine builds one 7.3 kernel, not two (8-13 minutes each
# on 2 cores), and without the lazy guest that has the reuse cache off.
# What it keeps: the patched 7.3 guest behind stock QEMU and behind ours
# strict and lazy with the reuse cache (its link API requests too).
SCENARIOS["smoke-7.3-ci"] = without_columns(
    "smoke-7.3", ("qemu+stock", "ours+lazy"),
    "smoke-7.3 on one 7.3 kernel (run by hand; CI boots 6.12 guests only): the patched 7.3 guest only, behind stock QEMU and behind ours strict and lazy with the reuse cache (lazy without it: smoke-7.3)")
# smoke-6.12 as CI runs it (a cold CI run stays under an hour): without the
# guest that runs lazy without the reuse cache. The reuse guests run lazy
# too (deferred UNMAPs and IOTLB_FLUSHes are expected of them), with the
# pool; what only the dropped guest did is the lazy path with the cache
# off, which smp-smoke and smp-smoke-1qp run on 6.1 with 2 vCPUs.
SCENARIOS["smoke-6.12-ci"] = without_columns(
    "smoke-6.12", ("ours+lazy",),
    "smoke-6.12 as CI runs it: the patched 6.12 guest behind stock QEMU, behind ours strict, and lazy with the reuse cache at 500 ms with the pool and at 1 ms without (lazy without the cache runs by hand)")
