"""Count what went wrong over lab runs: the guests that hung (by what the
hang's diagnosis said), the guests that crashed or reset themselves, and
the lab hosts that crashed, wedged or found themselves unfit, per cell:
the outer emulator (the QEMU that runs the lab host, results'
"outer_qemu"), the lab host (its kernel and emulated IOMMU), the workload
(the scenario: fault-census, or compare for the demo) and the VMM under
test. A last table adds the workloads up per outer emulator and VMM.

  ci/lab/fault-census RESULTS.json...      (the lab's --results files)
  ci/lab/fault-census --records            (every run this machine made:
                                           $VIOMMU_LAB_CACHE/records, the
                                           newest 1000, CI's lab steps too)

A hang is classified from the cell's "state at the hang" warning (the
bench tool's diagnosis, tools/viommu-bench/src/liveness.rs):
  owed        a vCPU waited in the virtio-iommu driver for requests the
              device had not completed (never retried: a bug)
  untaken     requests published and not taken by the device, no vCPU
              seen waiting for them (a lazy guest's UNMAPs rest in the
              ring until its next sync; with symbols this is not a wait)
  uncompleted requests taken and not completed
  idle        no request outstanding
  other       anything else (stock QEMU's guests have no diagnosis)
Every attempt counts as a guest boot (a retried one from its "attempt N
failed (REASON); ran it again" warning, the last from the cell's status).
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict

from .base import RECORDS

from .trouble import census_of

KINDS = [
    ("owed", re.compile(r"THE DEVICE OWES THE DRIVER")),
    ("untaken", re.compile(r"published virtio-iommu requests the device has not taken")),
    ("uncompleted", re.compile(r"took virtio-iommu requests it has not completed")),
    ("idle", re.compile(r"has no request outstanding")),
]


def hang_kind(text: str) -> str:
    for name, rx in KINDS:
        if rx.search(text):
            return name
    return "other"


# "attempt N failed (REASON); ran it again" (older runs: "first attempt ...")
ATTEMPT = re.compile(r"^(?:attempt \d+|\w+ attempt) failed \((.*)\); ran it again", re.S)


def failure_kind(reason: str) -> str:
    """A failed attempt's kind from the bench tool's reason text."""
    if re.search(r"hung|no I/O for", reason):
        return "guest hang"
    if re.search(r"double fault|triple fault|reset itself|crash|PANIC|panic|Oops|BUG", reason):
        return "guest crash or reset"
    return "guest other failure"


def short_outer(version: str | None) -> str:
    """'QEMU emulator version 11.1.3 (Debian ...)' -> 'QEMU 11.1.3';
    one built with the lab's patches (ci/lab/outer-qemu: '... + viommu-lab
    patches)') -> 'QEMU 10.0.13 fixed'."""
    m = re.search(r"version (\S+)", version or "")
    if not m:
        return version or "QEMU 7.2 (not recorded)"
    return f"QEMU {m.group(1)}" + (" fixed" if "viommu-lab patches" in version else "")


def outer_of(d: dict) -> str:
    """The outer emulator of a run, with its TCG threading when it was not
    the default multi-threaded one (--outer-tcg single) and its clock when
    it counted instructions (--outer-icount)."""
    if d.get("outer_icount"):
        return short_outer(d.get("outer_qemu")) + f" (icount shift {d['outer_icount']})"
    tcg = d.get("outer_tcg", "multi")
    return short_outer(d.get("outer_qemu")) + ("" if tcg == "multi" else f" (TCG {tcg})")


def lab_host_of(d: dict) -> str:
    """The lab host a run used: its kernel's X.Y and emulated IOMMU."""
    kernel = next((b["host"]["kernel"] for b in d.get("boots", []) if b.get("host")), None) or (d.get("host") or {}).get("kernel")
    m = re.match(r"(\d+\.\d+)", kernel or "")
    return f"{m.group(1) if m else '?'} {d.get('host_iommu') or 'vtd'}"


def census(docs: list[dict]) -> tuple[dict, dict]:
    """Per (outer emulator, lab host, workload): the lab hosts' counts; per
    (outer emulator, lab host, workload, VMM): guest boots (every attempt)
    and what went wrong in them."""
    hosts: dict = defaultdict(Counter)
    guests: dict = defaultdict(Counter)
    walls: dict = defaultdict(list)
    for d in docs:
        stack = (outer_of(d), lab_host_of(d), d.get("scenario", "?"))
        vmm_of = {s.split(":")[0]: s.split(":")[1] for s in d.get("runs", [])}
        for b in d.get("boots", []):
            hosts[stack]["lab host boots"] += 1
            # Its trouble as the census counts it (trouble.TROUBLES); a lab
            # host that reached its wall-clock bound counts as wedged.
            kind = census_of(b) or ("lab host wedged" if b.get("timed_out") else None)
            if kind:
                hosts[stack][kind] += 1
        for c in d.get("cells", []):
            g = guests[(*stack, vmm_of.get(c["column"], "?"))]
            warnings = c.get("warnings", [])
            for w in warnings:
                m = ATTEMPT.match(w)
                if m:
                    g["guest boots"] += 1
                    g[failure_kind(m.group(1))] += 1
                if "state at the hang" in w:
                    g[f"hang diagnosis: {hang_kind(w)}"] += 1
            g["guest boots"] += 1  # the attempt whose status is final
            if c.get("wall_s") and c["status"]["status"] == "ok" and not any(ATTEMPT.match(w) for w in warnings):
                walls[(*stack, vmm_of.get(c["column"], "?"))].append(c["wall_s"])
            st = c["status"]
            if st["status"] != "ok":
                kind = "guest hang" if st["status"] == "hung" else failure_kind(json.dumps(st))
                g[kind] += 1
                g[f"final: {st['status']}"] += 1
    for k, w in walls.items():
        w.sort()
        guests[k]["median wall s"] = round(w[len(w) // 2], 1) if w else 0
    return hosts, guests


COLUMNS = ["guest boots", "guest hang", "guest crash or reset", "guest other failure"]


def vmm_name(vmm: str) -> str:
    return "ours" if vmm == "vmm" else "stock QEMU" if vmm == "qemu" else vmm


def guest_row(cells: list[str], g: Counter) -> str:
    n = g["guest boots"]
    bad = g["guest hang"] + g["guest crash or reset"] + g["guest other failure"]
    return (f"| {' | '.join(cells)} | {n} | {g['guest hang']} | {g['guest crash or reset']} | {g['guest other failure']} | "
            f"{bad / n:.2f} | {g.get('median wall s') or '-'} |") if n else f"| {' | '.join(cells)} | 0 | - | - | - | - | - |"


def table(hosts: dict, guests: dict) -> str:
    """Markdown: one row per cell (outer emulator, lab host, workload, VMM),
    rates per guest boot; the lab hosts' crashes, wedges and unfit boots;
    the workloads added up per outer emulator and VMM."""
    head = "| guest boots | hangs | crashes/resets | other | faults per boot | median s per guest (first attempts that passed) |"
    out = ["| outer emulator | lab host | workload | VMM under test " + head, "|---|---|---|---" + "|---" * 6 + "|"]
    for (outer, host, work, vmm), g in sorted(guests.items()):
        out.append(guest_row([outer, host, work, vmm_name(vmm)], g))
    out += ["", "| outer emulator | lab host | workload | lab host boots | crashed | wedged | unfit |", "|---|---|---|---|---|---|---|"]
    for (outer, host, work), h in sorted(hosts.items()):
        out.append(f"| {outer} | {host} | {work} | {h['lab host boots']} | {h['lab host crashed']} | {h['lab host wedged']} | {h['lab host unfit']} |")
    totals: dict = defaultdict(Counter)
    for (outer, _host, _work, vmm), g in guests.items():
        totals[(outer, vmm)].update({k: v for k, v in g.items() if k != "median wall s"})
    out += ["", "All workloads and lab hosts, per outer emulator and VMM:", "", "| outer emulator | VMM under test " + head,
            "|---|---" + "|---" * 6 + "|"]
    for (outer, vmm), g in sorted(totals.items()):
        out.append(guest_row([outer, vmm_name(vmm)], g))
    diag = {k: g for k, g in guests.items() if any(x.startswith("hang diagnosis") for x in g)}
    for key, g in sorted(diag.items()):
        out.append(f"\n{', '.join(key[:3])}, {vmm_name(key[3])}: " + ", ".join(f"{k}: {v}" for k, v in sorted(g.items()) if k.startswith(("hang diagnosis", "final"))))
    return "\n".join(out)


def main() -> int:
    """ci/lab/fault-census RESULTS.json...: print the census; returns the
    exit status."""
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files = sys.argv[1:]
    if files == ["--records"]:
        files = [str(p) for p in sorted(RECORDS.glob("*.json"))]
        if not files:
            print(f"fault-census: no records in {RECORDS} yet (every ci/lab/lab run adds one)", file=sys.stderr)
            return 2
    docs = []
    for f in files:
        try:
            with open(f) as fh:
                docs.append(json.load(fh))
        except (OSError, ValueError) as e:
            print(f"fault-census: {f}: {e}", file=sys.stderr)
            return 2
    hosts, guests = census(docs)
    print(f"{len(docs)} run(s)\n")
    print(table(hosts, guests))
    return 0

