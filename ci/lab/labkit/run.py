"""Running a scenario: its columns and settings (the flags, the demo's, the
scenario's own), the outer and stock QEMUs, the lab image, its rounds of
lab host boots, then the verdict (judge) and its report."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .base import CACHE, LabError, tag_of
from .boot import boot_host
from .console import Collector
from .host import (FIXED_OUTER_QEMUS, IGB_OUTER_QEMUS, OUTER_QEMUS, SUITE_QEMUS, TMPFS_RUNS, icount_shift_problem, nvme_args, outer_qemu,
                   outer_version, userland_root)
from .images import BENCH_BINS, build_image, c_bins, cargo_bins, distro_drive
from .judge import judge
from .kernels import guest_kernels_of, own_kernel_knobs, tool_specs
from .knobs import knobs_of, report_args, resolve_runs
from .machine import reclaim_schemes
from .presets import DEMO, DEMO_LAZY_OPTS, DEMO_WHY, seven_three_runs
from .results import report
from .rounds import run_round
from .scenarios import SCENARIOS


def run_scenario(args) -> dict:
    """Run the scenario ARGS name (run or demo) and return its results
    document, judged and reported."""
    sc, specs = scenario_of(args)
    kernels = guest_kernels_of(sc, specs)
    bins = list(sc.get("cargo_bins", []))
    if specs or ("vmm", "vmm") in bins:
        # Always the same set: one cargo feature resolution, no rebuilds.
        bins += [b for b in BENCH_BINS if b not in bins]
    k = knobs_of(args, sc)
    if args.cmd == "demo":
        print("[lab] the demo's settings (flags of the same names override them):\n" + "\n".join(f"[lab]   {w}" for w in DEMO_WHY), file=sys.stderr)
    k["tool_specs"], kernel_knobs = tool_specs(specs)
    k.update(kernel_knobs)
    for knob, name in own_kernel_knobs(sc).items():
        k.setdefault(knob, name)
    # Each run builds its overlay and drive in a directory of its own, so
    # that runs can go on side by side; it is removed when the run ends.
    # --outer-mem locked: in tmpfs, out of the machine's reclaim (host.py).
    runs = TMPFS_RUNS if k["outer_mem"] == "locked" else CACHE / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{args.scenario}-", dir=runs))
    start = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_base = Path(args.log) if args.log else CACHE / "logs" / f"{args.scenario}-{stamp}.log"
    doc = {"scenario": args.scenario, "mode": k["mode"], "runs": specs, "rounds": k["rounds"], "first_round": 1, "host_iommu": k["host_iommu"],
           "hugepages": k["hugepages"] == "1", "guest_hugepages": k.get("guest_hugepages") == "1", "pin_vcpus": k.get("pin_vcpus") == "1", "outer_mem": k["outer_mem"], "machine_reclaim": reclaim_schemes(),
           "nvme": " ".join(nvme_args(k["nvme_ioqpairs"], k["nvme_mdts"], k["nvme_lbs"], k["nvme_multipath"])[1::2]),
           "boots": [], "cells": [], "checks": [], "ok": False}
    # An interleaved A/B's B-round parameters (boot.ab_round(); ci/lab/ab-split).
    if os.environ.get("LAB_HOST_APPEND_AB"):
        doc["host_append_ab"] = os.environ["LAB_HOST_APPEND_AB"]
    try:
        vmm_qemu, userland = qemus_of(args, sc, k, doc)
        distro = drive_of(sc, k, doc)
        shipped = cargo_bins(bins, quiet=args.cmd == "demo") + c_bins(sc.get("c_bins", []), run_dir) + (args.bin or [])
        image = build_image(kernels, shipped, run_dir, k["host_iommu"],
                            k["host_kernel"], vmm_qemu, userland, distro)
        for r in range(1, k["rounds"] + 1):
            def boot(todo: list[str], attempt: int, skip: list[str], r=r) -> Collector:
                log = log_base if (r, attempt) == (1, 1) else log_base.with_name(f"{log_base.stem}-r{r}{f'-retry{attempt - 1}' if attempt > 1 else ''}.log")
                return boot_host(args, sc, {**k, "skip": ",".join(skip)} if skip else k, todo, r, image, run_dir, log)
            run_round(doc, r, specs, boot)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    doc["elapsed_s"] = round(time.monotonic() - start, 1)
    doc["host"] = next((b["host"] for b in doc["boots"] if b["host"]), None)
    doc["log"] = str(log_base)
    # A trouble whose work a fresh lab host took over is only a warning
    # (judge() tells them apart by the boot records).
    doc["problems"], doc["warnings"] = judge(doc, sc, specs)
    doc["ok"] = not doc["problems"]
    doc["report_args"] = report_args(k, k["tool_specs"], (doc["host"] or {}).get("nvme", "0000:00:01.0")) if specs else []
    report(args, doc)
    return doc


def scenario_of(args) -> tuple[dict, list[str]]:
    """The scenario ARGS runs and its columns: the demo's own for the demo
    of compare (and its expectations), --runs over the scenario's, plus
    --with-7.3's columns."""
    sc = SCENARIOS[args.scenario]
    if args.cmd == "demo" and args.scenario == "compare" and not args.runs:
        sc = {**sc, "expect": DEMO["expect"], "expect_iommu": DEMO["expect_iommu"]}
    defaults = DEMO["runs"] if args.cmd == "demo" and args.scenario == "compare" else sc["runs"]
    specs = resolve_runs(args.runs, defaults) if args.runs else defaults
    if getattr(args, "with_73", False):
        extra = seven_three_runs(DEMO_LAZY_OPTS if args.cmd == "demo" else "")
        specs = specs + [s for s in extra if tag_of(s) not in {tag_of(x) for x in specs}]
    return sc, specs


def drive_of(sc: dict, k: dict, doc: dict) -> str:
    """A distribution VM's drive (a scenario's "distro_vm"): made or taken
    from the cache, its image the lab host's NVMe from the start (into K)
    and recorded in DOC; returns its directory for build_image(), or ""."""
    if not sc.get("distro_vm"):
        return ""
    d = distro_drive()
    k["nvme_image"] = str(d / "disk.img")
    pkgs = dict(line.split(" ", 1) for line in (d / "PACKAGES").read_text().splitlines() if " " in line)
    doc["distro_vm"] = {"drive": d.name, "release": (d / "RELEASE").read_text().strip(),
                        "packages": {n: pkgs.get(n) for n in ("linux-image-amd64", "initramfs-tools", "systemd", "fio")}}
    return str(d)


def outer_qemu_fits(version: str, k: dict, how: str) -> None:
    """Refuse an outer QEMU VERSION (chosen by HOW: a flag or variable)
    that lacks what K asks of it: igb for --nic, mem-lock for --outer-mem
    locked."""
    if k["nic"] != "none" and version not in IGB_OUTER_QEMUS:
        raise LabError(f"{how} {version} with --nic {k['nic']}: QEMU {version} has no igb; use "
                       f"{' or '.join(IGB_OUTER_QEMUS[:2])}")
    if k["outer_mem"] == "locked" and version == "7.2":
        raise LabError(f"{how} 7.2 with --outer-mem locked: QEMU 7.2 has no -overcommit mem-lock=on-fault; use "
                       "10.0-fixed (the default) or drop --outer-mem")


def qemus_of(args, sc: dict, k: dict, doc: dict) -> tuple[str, str]:
    """The outer QEMU (into K and DOC; one that has the NIC K asks for;
    LAB_OUTER_QEMU_AB's for an A/B's B rounds beside it)
    and what build_image() takes for the stock VMM under test: a Debian 13
    root's QEMU wrapper (none for 7.2, the image's own), or for a userland
    scenario that root's wrapper."""
    outer_qemu_fits(k["outer_qemu"], k, "--outer-qemu")
    doc["nic"] = k["nic"]
    k["outer_qemu_bin"] = outer_qemu(k["outer_qemu"])
    doc["outer_qemu"] = outer_version(k["outer_qemu_bin"])
    doc["outer_tcg"] = "single" if k["outer_icount"] else k["outer_tcg"]
    doc["outer_icount"] = k["outer_icount"]
    # An interleaved A/B of the lab's clock: B rounds (boot.ab_round())
    # count instructions (boot.outer_icount_of()).
    icount_ab = os.environ.get("LAB_OUTER_ICOUNT_AB")
    if icount_ab:
        problem = icount_shift_problem(icount_ab)
        if problem:
            raise LabError(f"LAB_OUTER_ICOUNT_AB={problem}")
        k["outer_icount_ab"] = doc["outer_icount_ab"] = str(int(icount_ab))
    # An interleaved A/B of outer QEMUs: B rounds (boot.ab_round()) run
    # their lab host under LAB_OUTER_QEMU_AB's version instead.
    ab = os.environ.get("LAB_OUTER_QEMU_AB")
    if ab:
        if ab not in OUTER_QEMUS + FIXED_OUTER_QEMUS:
            raise LabError(f"LAB_OUTER_QEMU_AB={ab}: not an outer QEMU this lab has; one of {', '.join(OUTER_QEMUS + FIXED_OUTER_QEMUS)}")
        outer_qemu_fits(ab, k, "LAB_OUTER_QEMU_AB")
        k["outer_qemu_ab_bin"] = outer_qemu(ab)
        doc["outer_qemu_ab"] = outer_version(k["outer_qemu_ab_bin"])
    doc["host_thp"] = k["host_thp"] or "the lab host kernel's own"
    doc["vmm_qemu"] = k["vmm_qemu"]
    if not sc.get("userland"):
        return ("" if k["vmm_qemu"] == "7.2" else outer_qemu(k["vmm_qemu"])), ""
    # The stock QEMU is the userland's own, in its root: no /lab/qemu.
    if k["vmm_qemu"] == "7.2":
        raise LabError(f"{args.scenario}: the Debian 13 userland has QEMU {' or '.join(SUITE_QEMUS)}, not 7.2 (--vmm-qemu)")
    userland = userland_root(k["vmm_qemu"], tuple(sc["userland"]))
    doc["userland"] = {"qemu": k["vmm_qemu"], "packages": sc["userland"]}
    return "", userland
