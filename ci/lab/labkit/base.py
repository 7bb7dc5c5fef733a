"""What every lab module shares: where the lab, the repository and the
cache are, the lab's error type, and the fields of a run spec
(TAG:VMM:IOMMU:KERNEL[:OPTS]) and of a cell."""

from __future__ import annotations

import math

import os
from pathlib import Path

# ci/lab: the scripts the lab host runs and builds from, beside this package.
LAB_DIR = Path(__file__).resolve().parent.parent
REPO = LAB_DIR.parent.parent
CACHE = Path(os.environ.get("VIOMMU_LAB_CACHE", Path.home() / ".cache" / "viommu-lab"))
# Every lab run's results on this machine (CI's lab steps and the demo
# too), kept by results.keep_record for `ci/lab/fault-census --records`.
RECORDS = CACHE / "records"


class LabError(Exception):
    """A lab step failed; the message says which and why."""


def tag_of(spec: str) -> str:
    """The column tag of a run spec."""
    return spec.split(":")[0]


def vmm_of(spec: str) -> str:
    """The VMM (qemu or vmm) of a run spec."""
    return spec.split(":")[1]


def cell_key(c: dict) -> tuple[str, int]:
    """A cell's column and round (0-based)."""
    return c["column"], c["round"]


def timed_iops(cell: dict) -> dict[str, float]:
    """A cell's timed phases and their IOPS: the randread* phases with a
    fio result (the bench tool's untimed phases, warm-up and the like,
    are named otherwise and left out)."""
    return {name: ph["fio"]["read_iops"] for name, ph in (cell.get("phases") or {}).items()
            if name.startswith("randread") and isinstance(ph, dict) and ph.get("fio", {}).get("read_iops")}



def phase_windows(cell: dict) -> list[tuple[str, float, float, float]]:
    """A cell's timed phases (timed_iops()) that carry their `machine`
    window's monotonic ends: (phase, IOPS, t0, t1). A phase without a
    window (a run from before windows had them) is left out."""
    out = []
    for name, iops in timed_iops(cell).items():
        w = cell["phases"][name].get("machine") or {}
        if "t0" in w and "t1" in w:
            out.append((name, iops, w["t0"], w["t1"]))
    return out


def usual_log_iops(cells: list[tuple[dict, dict[str, float]]]) -> dict[tuple[str, str], float]:
    """Each (column, phase)'s usual: the mean log IOPS of its guests over
    CELLS, (cell, its timed_iops()) pairs. A guest's factor is how far
    its phases sit from these."""
    logs: dict[tuple[str, str], list[float]] = {}
    for c, t in cells:
        for ph, v in t.items():
            logs.setdefault((c["column"], ph), []).append(math.log(v))
    return {k: sum(v) / len(v) for k, v in logs.items()}