"""The nested lab: real KVM, VFIO and an NVMe controller under QEMU TCG.

Boots a lab host (L2: Debian's 6.1 cloud kernel, KVM, VFIO, stock QEMU) with
an emulated VT-d and NVMe, binds the NVMe to vfio-pci, and runs a scenario
in it: usually viommu-bench (tools/viommu-bench), the comparison tool users
run on their own hosts, which boots the guests (L3) under a VMM with the
NVMe passed through and runs fio; it streams one @@LAB-CELL@@ line per
guest back over the serial console. One lab host boot per round; a lab
host that crashes or wedges hands the round's unfinished guests to a fresh
one (a scenario of checks runs again from its start). See docs/lab.md.

  ci/lab/lab run smoke            boot check + write/verify behind virtio-iommu
  ci/lab/lab run qemu-baseline    stock QEMU, vIOMMU vs none, 4 block sizes
  ci/lab/lab run debian13-userland
                                  viommu-bench chrooted into Debian 13 (its fio, busybox, QEMU 11.1)
  ci/lab/lab demo                 stock QEMU vs our VMM, stock vs patched 6.12 guest, vs no vIOMMU (README main job)

Results: one JSON document (stdout, or --results FILE); the full serial log
is kept (--log FILE) and printed on failure; `demo` prints the table
(viommu-bench --report-from) and leaves JSON, table and chart in a results
directory. Exit status 0 only when every guest booted, found the NVMe, and
every fio run (data verify included) passed. Only stdlib Python.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from .base import CACHE, REPO, LabError
from .boot import stop_lab_hosts
from .host import (DEFAULT_OUTER_QEMU, FIXED_OUTER_QEMUS, GUEST_RAM_MIB, HOST_IOMMUS, HOST_KERNELS, HOST_THP,
                   HUGEPAGES_MARGIN, NICS, OUTER_MEMS, OUTER_QEMUS, OUTER_TCG, hugepages_at_boot, icount_shift_problem)
from .images import build_image
from .kernels import kernels_to_build, outer_qemus_to_build
from .presets import BLOCK_SIZES, DEMO, LAB_7X_PARAMS
from .results import bench_report, keep_record, save
from .run import run_scenario
from .scenarios import SCENARIOS


def icount_shift(value: str) -> str:
    """--outer-icount's SHIFT: a whole number 0-10 (QEMU's own bound)."""
    problem = icount_shift_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return str(int(value))


def parser() -> argparse.ArgumentParser:
    """The command line: run, demo, build, kernels, table."""
    ap = argparse.ArgumentParser(prog="ci/lab/lab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run one scenario; prints results JSON")
    p.add_argument("scenario", choices=sorted(SCENARIOS), help="; ".join(f"{k}: {v['help']}" for k, v in SCENARIOS.items()))
    p.add_argument("--save", action="store_true", help="commit-ready copy (JSON, table, chart) under benches/results/current/")
    run_args(p)
    p = sub.add_parser("demo", help="the compare scenario in rounds: progress, then the table; JSON, table and chart in a results directory")
    p.add_argument("--scenario", default="compare", choices=sorted(SCENARIOS), help="(default compare)")
    p.add_argument("--out", help="results directory (default target/lab-demo/TIMESTAMP)")
    p.add_argument("--save", action="store_true", help="also a commit-ready copy (JSON, table, chart) under benches/results/current/")
    run_args(p, demo=True)
    p = sub.add_parser("build", help="build (or reuse) the guest kernels and lab images")
    p.add_argument("--guest-kernels", default="baseline")
    p.add_argument("--bin", action="append")
    p = sub.add_parser("kernels", help="the kernels these scenarios need, built by guest-patches/linux-VERSION/build.sh VARIANT: one 'VERSION VARIANT' line each, in the order the scenarios first need them (nothing is built)")
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO")
    p = sub.add_parser("outer-qemus", help="the fixed outer QEMUs these scenarios run their lab hosts under, built by ci/lab/outer-qemu/build --qemu VERSION: one VERSION line each (nothing is built)")
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO")
    p = sub.add_parser("table", help="print the table of a saved lab results JSON (lab.json)")
    p.add_argument("results")
    p.add_argument("--out", help="where the table, results.json and chart go (default: a temporary directory)")
    return ap


def run_args(p: argparse.ArgumentParser, demo: bool = False) -> None:
    """The flags of run and demo (DEMO: the demo's defaults in the help)."""
    d = lambda k, dflt: f" (default: {DEMO[k]})" if demo and k in DEMO else dflt  # noqa: E731
    p.add_argument("--runs", help="override the scenario's guests: TAG:VMM:IOMMU:KERNEL[:OPTS],... (VMM qemu|vmm, IOMMU viommu|none, KERNEL baseline|patched[-VERSION], e.g. patched-6.12, several versions of a variant allowed; OPTS: +-separated guest kernel parameters, strict, lazy, and --VMM-flags)")
    p.add_argument("--with-7.3", dest="with_73", action="store_true",
                   help="add the 7.3 guest's columns: stock 7.3 behind stock QEMU and behind ours, the 7.3 series lazy behind ours "
                        "(with the demo's reuse window in the demo); booted with " + LAB_7X_PARAMS + " (see LAB_7X_PARAMS)")
    p.add_argument("--mode", choices=["smoke", "mixed", "fio"], help="what each guest runs (default: the scenario's)")
    p.add_argument("--bs", help="block sizes, comma-separated" + d("bs", f" (default: the scenario's; {BLOCK_SIZES} for fio)"))
    p.add_argument("--runtime", type=int, help="seconds per measured fio run" + d("runtime", " (default: the scenario's, else 8)"))
    p.add_argument("--rounds", type=int, help="rounds, each in a lab host of its own, columns in a balanced order (forwards, then backwards)" + d("rounds", " (default 1)"))
    p.add_argument("--cpus", type=int, default=2, help="lab host vCPUs (default 2)")
    p.add_argument("--guest-cpus", type=int, help="vCPUs of every guest, both VMMs" + d("guest_cpus", " (default: the scenario's, else 1)"))
    p.add_argument("--rw", choices=["randread", "randread-buffered", "read", "randwrite", "randrw"], help="fio workload of the measured runs; randread-buffered reads through the guest's page cache (fresh pages: the reuse cache's miss workload) (default randread)")
    p.add_argument("--iodepth", type=int, help="fio iodepth of every measured run, per job (default 64)")
    p.add_argument("--ramp", type=int, help="seconds each measured run goes on unmeasured first (fio --ramp_time; the counters start after them too): steady state (default 0)")
    p.add_argument("--host-iommu", choices=sorted(HOST_IOMMUS), help="the lab host's emulated IOMMU: vtd (QEMU's VT-d, Debian's kernel; its 1024-entry IOTLB thrashes behind a vIOMMU beyond 1024 pages in flight) or virtio (QEMU's virtio-iommu, no IOTLB; the lab's own host kernel, built once) (default vtd)")
    p.add_argument("--host-kernel", choices=HOST_KERNELS, help="the lab host's own kernel behind --host-iommu virtio: 6.12 (iommufd and VFIO cdevs built in) or 6.1; with vtd the lab host runs Debian 12's 6.1 cloud kernel" + d("host_kernel", " (default 6.12)"))
    p.add_argument("--vmm-qemu", choices=OUTER_QEMUS, help="stock QEMU as the VMM under test in the lab host: 7.2 (Debian 12's, in the lab image) or 10.0/11.1 (Debian 13's, from the root ci/lab/debian-root makes), untraced in timed phases either way; debian13-userland: the QEMU of its Debian 13 root, 11.1 or 10.0" + d("vmm_qemu", " (default 7.2)"))
    p.add_argument("--outer-qemu", choices=OUTER_QEMUS + FIXED_OUTER_QEMUS, help="the outer emulator that runs the lab host: 7.2 (Debian 12's, this machine's) or 10.0/11.1 (Debian 13's, from a root ci/lab/debian-root makes once and caches, about 30 s and 250 MB); 10.0-fixed/11.1-fixed: that QEMU built from Debian's source with ci/lab/outer-qemu/patches (the TCG race behind the lab host crashes), once, about 10 min" + d("outer_qemu", f" (default {DEFAULT_OUTER_QEMU})"))
    p.add_argument("--outer-tcg", choices=OUTER_TCG, help="the outer emulator's TCG threading: multi (a host thread per lab host vCPU) or single (all lab host vCPUs on one host thread in turn: slower, never two at once; for telling lab faults apart: 2-vCPU guests then hang in boot)" + d("outer_tcg", " (default multi)"))
    p.add_argument("--outer-icount", type=icount_shift, metavar="SHIFT", help="drive the lab host's clocks by the outer emulator's instruction count (QEMU's -icount shift=SHIFT,sleep=on: each emulated instruction 2^SHIFT ns, 0-10; single-threaded TCG): a phase's IOPS then counts the instructions its I/O costs rather than the machine's price for them (docs/lab.md); LAB_OUTER_ICOUNT_AB=SHIFT turns it on in an A/B's B rounds only" + d("outer_icount", " (default off: the machine's clock)"))
    p.add_argument("--outer-mem", choices=OUTER_MEMS, help="what the machine under the lab may reclaim: plain (the outer QEMU's RAM and the drive's page cache are ordinary memory: a reclaim scheme such as this machine's DAMON pageout evicts the drive's cached blocks) or locked (the outer QEMU locks its memory as it faults it in, -overcommit mem-lock=on-fault, and the run's directory with the drive lives in /dev/shm; up to about 3 GiB resident and locked per lab host); locked was not quieter than plain (docs/lab.md)" + d("outer_mem", " (default plain)"))
    p.add_argument("--nvme-ioqpairs", type=int, help="I/O queue pairs of the lab host's emulated NVMe (QEMU's max_ioqpairs; 1: every guest vCPU shares one queue and its interrupt)" + d("nvme_ioqpairs", " (default: QEMU's, 64)"))
    p.add_argument("--nvme-mdts", type=int, help="the emulated NVMe's maximum transfer as a power of two of 4 KiB pages (QEMU's mdts; 3 = 32 KiB: large I/O is split)" + d("nvme_mdts", " (default: QEMU's, 7 = 512 KiB)"))
    p.add_argument("--nvme-lbs", type=int, choices=[512, 4096], help="the emulated NVMe's logical block size in bytes" + d("nvme_lbs", " (default 512)"))
    p.add_argument("--nvme-multipath", action="store_true", default=None, help="the lab host's NVMe as a dual-port drive: an NVMe subsystem of two controllers sharing namespace 1 (native multipath: nvmeXcYnZ path devices); host-init binds the first controller" + d("nvme_multipath", " (default: the scenario's, else one controller)"))
    p.add_argument("--nic", choices=sorted(NICS), help="the lab host's NIC: none, or igb (QEMU's 82576 with SR-IOV: the lab host drives the PF and passes a VF through; needs --outer-qemu 10.0 or 11.1)" + d("nic", " (default: the scenario's, else none)"))
    p.add_argument("--numjobs", help="fio jobs, comma-separated: each value one more measured run per block size" + d("numjobs", " (default: the scenario's, else 1)"))
    p.add_argument("--timeout", type=int, help="wall-clock bound of one lab host boot in seconds (default: the scenario's)")
    p.add_argument("--guest-timeout", type=int, default=600, help="bound on one guest in seconds (default 600)")
    p.add_argument("--stall-seconds", type=int, default=60, help="a guest that completes no I/O this long is killed and reported hung (default 60)")
    p.add_argument("--bin", action="append", help="program to put in the lab host's /lab/bin (repeatable)")
    p.add_argument("--results", help="write the results JSON here (default: stdout)")
    p.add_argument("--log", help="keep the full serial log here (more rounds: next to it)")
    p.add_argument("--kvm-exits", action="store_true", help="count the lab host's KVM exits by reason per measured phase (viommu-bench --kvm-exits): a 'KVM exits per I/O' table")
    p.add_argument("--breakdown", action="store_true", help="where a request's time goes in the VMM (viommu-bench --breakdown): every vIOMMU guest runs each fio job again, untimed, while the lab host's tracefs records its VMM's threads; a 'where a request's time goes' table (the lab host needs the syscall trace events: --host-iommu virtio --host-kernel 6.12, or Debian's kernel)")
    p.add_argument("--hugepages", action="store_true", default=None,
                   help=f"every column's guest RAM in 2 MiB huge pages (viommu-bench --hugepages): the lab host reserves {hugepages_at_boot()} "
                        f"at boot (hugepages=N: one guest's {GUEST_RAM_MIB} MiB and {HUGEPAGES_MARGIN} pages more) and gets "
                        f"{2 * HUGEPAGES_MARGIN} MiB more RAM for the margin (default: the scenario's, else off); under the outer "
                        "QEMU's TCG every column runs 1.2-6x slower with it and no quieter (docs/lab.md, \"How precise the lab is\"): "
                        "for checking the option, not for measuring")
    p.add_argument("--guest-hugepages", action="store_true", default=None,
                   help="fio's I/O buffers inside every guest in 2 MiB huge pages the guest reserves at its start (viommu-bench "
                        "--guest-hugepages): each I/O is one physically contiguous range, so the MAP requests a guest sends per I/O "
                        "do not depend on how fragmented its memory is, which differs per boot and with what ran before "
                        "(default: the scenario's, else off)")
    p.add_argument("--pin-vcpus", action="store_true", default=None,
                   help="every guest's vCPU thread on a lab-host CPU of its own, the VMM's other threads and the drive's interrupts on the other "
                        "(viommu-bench --pin-vcpus; guests of 1 vCPU, the lab host has 2) (default: the scenario's, else off)")
    p.add_argument("--host-thp", choices=HOST_THP, help="the lab host's transparent huge pages (its kernel's transparent_hugepage=): "
                   "always, madvise (both VMMs ask for them for guest RAM; in the lab every guest then gets them for all of it) "
                   "or never (every guest's RAM in 4 KiB pages); madvise against never: no difference in the lab's noise or "
                   "speed found (default: the lab host kernel's own, madvise on our 6.12 lab host, always on Debian's 6.1)")
    p.add_argument("-v", "--verbose", action="store_true", help="echo the whole serial console")


def main() -> int:
    """The lab's command line (ci/lab/lab); returns its exit status."""
    args = parser().parse_args()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_lab_hosts)
    try:
        if args.cmd == "build":
            for k, v in build_image(set(args.guest_kernels.split(",")), args.bin or [], CACHE / "run").items():
                print(f"{k}={v}")
            return 0
        if args.cmd == "kernels":
            for version, variant in kernels_to_build(args.scenarios):
                print(version, variant)
            return 0
        if args.cmd == "outer-qemus":
            for version in outer_qemus_to_build(args.scenarios):
                print(version)
            return 0
        if args.cmd == "table":
            doc = json.loads(Path(args.results).read_text())
            with tempfile.TemporaryDirectory() as tmp:
                _, text = bench_report(doc, Path(args.out or tmp))
            print(text, end="")
            return 0
        doc = run_scenario(args)
        text = json.dumps(doc, indent=1)
        keep_record(doc, text)
        if args.results:
            Path(args.results).write_text(text + "\n")
        if args.cmd == "demo" or args.save:
            out = Path(getattr(args, "out", None) or REPO / "target" / "lab-demo" / time.strftime("%Y%m%d-%H%M%S"))
            if doc["cells"]:
                _, table = bench_report(doc, out)
                print(table, end="")
                print(f"[lab] results: {out}/ (table.md, results.json, chart.png, lab.json, cells.jsonl)", file=sys.stderr)
                if args.save:
                    save(doc, out, f"ci/lab/lab {' '.join(sys.argv[1:])}")
        elif not args.results:
            print(text)
        return 0 if doc["ok"] else 1
    except LabError as e:
        print(f"[lab] error: {e}", file=sys.stderr)
        return 2
