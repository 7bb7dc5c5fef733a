"""Host IOMMU map calls by a column's place on its lab host
(ci/lab/map-trips RESULTS.json...): the test of whether the order effect
comes from fragmented guest RAM.

A VFIO map costs the lab host one IOMMU map call (`iommu:map`) per
physically contiguous run of the guest's RAM under the buffer, and under
the lab's emulated IOMMU each call is a trip to the outer QEMU. A guest
booted on a fresh lab host may get its RAM in huge pages; one booted after
others may get it in 4 KiB pieces, and then the same 128 KiB MAP costs up
to 32 trips. `viommu-bench --kvm-exits` counts the calls per phase
(`iommu.map`, `iommu.map_kib` in each phase's `kvm_exits`); this groups
them, with the IOPS, by the column's place on its host (1 = the first guest
that host booted).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

_BS = re.compile(r"-(\d+)k(?:-|$)")


def ios_of(fio: dict, phase: str) -> float:
    """The I/Os of a phase's counter window: the drive's sectors the guest
    counted in it (block/sectors, 512 bytes) over its block size, as the
    bench tool's report divides (fio's own totals leave out its ramp); from
    guests without that count the KiB fio moved, else IOPS x time."""
    m = _BS.search(phase)
    sectors = (fio.get("counters") or {}).get("block/sectors") or 0
    kib = sectors / 2 if sectors > 0 else (fio.get("read_kib") or 0) + (fio.get("write_kib") or 0)
    if m and kib:
        return kib / int(m.group(1))
    return ((fio.get("read_iops") or 0) * (fio.get("read_ms") or 0)
            + (fio.get("write_iops") or 0) * (fio.get("write_ms") or 0)) / 1000


def samples(doc: dict) -> list[dict]:
    """One sample per measured phase of a cell that counted its map calls."""
    out = []
    for cell in doc.get("cells", []):
        place = (cell.get("place") or {}).get("index")
        if place is None:
            continue
        for name, ph in (cell.get("phases") or {}).items():
            fio, k = ph.get("fio") or {}, ph.get("kvm_exits") or {}
            if not k or name.startswith(("verify", "idle")):
                continue
            ios = ios_of(fio, name)
            if ios <= 0:
                continue
            calls = k.get("iommu.map", 0)
            out.append({"phase": name, "column": cell["column"], "place": place + 1,
                        "iops": fio.get("read_iops", 0) + fio.get("write_iops", 0),
                        "maps_per_io": calls / ios,
                        "kib_per_map": k.get("iommu.map_kib", 0) / calls if calls else None})
    return out


def table(rows: list[dict]) -> list[str]:
    """Markdown: per phase and column, each place's medians (and rounds)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["phase"], r["column"], r["place"]), []).append(r)
    lines = ["| phase | column | place | rounds | IOPS median | host IOMMU map calls / I/O | KiB per map call |",
             "|---|---|---|---|---|---|---|"]
    for (phase, col, place), rs in sorted(groups.items()):
        kib = [r["kib_per_map"] for r in rs if r["kib_per_map"] is not None]
        iops = statistics.median(r["iops"] for r in rs)
        maps = statistics.median(r["maps_per_io"] for r in rs)
        lines.append(f"| {phase} | {col} | {place} | {len(rs)} | {iops:.0f} | {maps:.2f} | "
                     f"{f'{statistics.median(kib):.0f}' if kib else '-'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/lab/map-trips", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="viommu-bench results.json of runs with --kvm-exits")
    a = p.parse_args(argv)
    rows = []
    for f in a.results:
        try:
            rows += samples(json.loads(f.read_text()))
        except (OSError, ValueError) as e:
            print(f"map-trips: {f}: {e}", file=sys.stderr)
            return 2
    if not rows:
        print("map-trips: no phase counted host IOMMU map calls (run the lab with --kvm-exits)", file=sys.stderr)
        return 1
    print("\n".join(table(rows)))
    return 0
