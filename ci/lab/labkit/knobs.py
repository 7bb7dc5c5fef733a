"""A scenario's settings: flags over the scenario's own over the demo's
over the lab's (knobs_of), the lab host's lab.NAME=VALUE knobs
(host_knobs), the bench tool's table flags (report_args) and --runs."""

from __future__ import annotations

from .base import tag_of
from .host import DEFAULT_OUTER_QEMU
from .presets import BLOCK_SIZES, DEMO

def knobs_of(args, sc: dict) -> dict:
    """The scenario's settings, flags over the scenario's own, over the demo's
    defaults (demo only), over the lab's."""
    demo = DEMO if args.cmd == "demo" else {}

    def pick(name, default):
        v = getattr(args, name, None)
        return v if v is not None else demo.get(name, sc.get(name, default))

    return {
        "mode": pick("mode", "smoke"),
        "bs": pick("bs", BLOCK_SIZES),
        "runtime": str(pick("runtime", 8)),
        "ramp": str(pick("ramp", 0)),
        "guest_cpus": str(pick("guest_cpus", 1)),
        "numjobs": str(pick("numjobs", 1)),
        "iodepth": str(pick("iodepth", 64)),
        "rw": pick("rw", "randread"),
        "host_iommu": pick("host_iommu", "vtd"),
        # The outer QEMU with our fix of the TCG race that crashed lab hosts
        # (docs/lab.md, "Lab host crashes"), built once and cached.
        "outer_qemu": pick("outer_qemu", DEFAULT_OUTER_QEMU),
        "outer_tcg": pick("outer_tcg", "multi"),
        "outer_mem": pick("outer_mem", "plain"),
        # "": the machine's clock; else the instruction counter's shift.
        "outer_icount": pick("outer_icount", ""),
        # "": the lab host kernel's own setting.
        "host_thp": pick("host_thp", ""),
        "host_kernel": pick("host_kernel", "6.12"),
        "vmm_qemu": pick("vmm_qemu", "7.2"),
        "nvme_ioqpairs": int(pick("nvme_ioqpairs", 0)),
        "nvme_mdts": int(pick("nvme_mdts", -1)),
        "nvme_lbs": int(pick("nvme_lbs", 0)),
        "nvme_multipath": bool(pick("nvme_multipath", False)),
        "nic": pick("nic", "none"),
        "rounds": int(pick("rounds", 1)),
        "lead": demo.get("lead"),
        "guest_timeout": str(args.guest_timeout),
        "stall": str(args.stall_seconds),
        "kvm_exits": "1" if getattr(args, "kvm_exits", False) else "0",
        # viommu-bench --breakdown: the flag, or a scenario that is about it.
        "breakdown": "1" if getattr(args, "breakdown", False) or sc.get("breakdown") else "0",
        "idle_ms": str(sc.get("idle_ms", 0)),
        # viommu-bench --hugepages, the pages reserved at the lab host's boot.
        "hugepages": "1" if pick("hugepages", False) else "0",
        # viommu-bench --guest-hugepages: fio's buffers in the guests' own
        # 2 MiB pages, so an I/O's MAP requests do not depend on the
        # guest's fragmentation.
        "guest_hugepages": "1" if pick("guest_hugepages", False) else "0",
        # viommu-bench --pin-vcpus.
        "pin_vcpus": "1" if pick("pin_vcpus", False) else "0",
        # A guest that hangs is run again, as a warning, in CI and in the
        # demo: the nested emulation corrupts a vCPU's saved state now and
        # then (the hung vCPU spins with the lab host's own registers, see
        # docs/lab.md); the same corruption
        # shows as guest double and triple faults, retried the same way.
        "retry_hung": "1",
        # Four more attempts for a crashed, reset or hung guest: in some lab
        # hosts more than half of the attempts of 6.12 guests behind our VMM
        # hit it (seen in a cold CI run: 7 of 10, while stock QEMU's
        # one 6.12 guest passed), mostly while the guest prints a result line.
        "retries": "4",
    }


def report_args(k: dict, specs: list[str], bdf: str) -> list[str]:
    """viommu-bench's flags for the table of these cells (--report-from)."""
    return ["--device", bdf, "--columns", ",".join(specs), "--mode", k["mode"], "--bs", k["bs"],
            "--runtime", k["runtime"], "--ramp", k["ramp"], "--numjobs", k["numjobs"], "--iodepth", k["iodepth"], "--rw", k["rw"], "--guest-cpus", k["guest_cpus"],
            "--rounds", str(k["rounds"])] + (["--lead", k["lead"]] if k.get("lead") and k["lead"] in {tag_of(t) for t in specs} else []) \
        + (["--hugepages"] if k.get("hugepages") == "1" else []) \
        + (["--guest-hugepages"] if k.get("guest_hugepages") == "1" else [])



def resolve_runs(runs: str, defaults: list[str]) -> list[str]:
    """--runs: full TAG:VMM:IOMMU:KERNEL[:OPTS] specs, or bare tags of the
    scenario's own columns (e.g. "qemu+stock,no-viommu" in the demo)."""
    by_tag = {tag_of(s): s for s in defaults}
    specs = []
    for s in runs.split(","):
        if ":" not in s and s not in by_tag:
            raise SystemExit(f"--runs: '{s}' is neither TAG:VMM:IOMMU:KERNEL[:OPTS] nor a column of this scenario ({', '.join(by_tag) or 'it has none'})")
        specs.append(by_tag.get(s, s) if ":" not in s else s)
    return specs



def host_knobs(sc: dict, k: dict, specs: list[str], round_no: int) -> dict[str, str]:
    """The lab.NAME=VALUE knobs of a lab host that runs SPECS of round
    ROUND_NO (host-lib.sh's lab_arg reads them): the scenario's script,
    the bench tool's settings, the lab host's NIC (lab.nic, when it has
    one), where the stock QEMU is (/lab/qemu for a
    --vmm-qemu other than 7.2; a userland scenario's is in its root, whose
    QEMU version the scenario checks: lab.userland)."""
    tags = {tag_of(s) for s in specs}
    knobs = {"scenario": sc["script"], "runs": ",".join(s for s in k["tool_specs"] if tag_of(s) in tags), "round": str(round_no),
             **{n: k[n] for n in ("mode", "bs", "runtime", "ramp", "guest_timeout", "guest_cpus", "numjobs", "iodepth", "stall", "rw",
                                  "kernel_stock", "kernel_patched", "kernels", "kvm_exits", "breakdown", "idle_ms", "retry_hung", "retries", "skip",
                                  "hugepages", "guest_hugepages", "pin_vcpus") if n in k}}
    if k.get("nic", "none") != "none":
        knobs["nic"] = k["nic"]
    if sc.get("userland"):
        knobs["userland"] = k["vmm_qemu"]
    elif k.get("vmm_qemu", "7.2") != "7.2":
        knobs["qemu"] = "/lab/qemu/qemu-system-x86_64"
    return knobs



