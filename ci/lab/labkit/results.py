"""What a run leaves: the verdict on stderr (with the serial logs on
failure), the table, results.json and chart the bench tool draws from the
cells (bench_report), --save's copy under benches/results/current/, and
the machine's record of every run (keep_record) that the fault census
counts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .base import RECORDS, REPO
from .images import BENCH_BINS, cargo_bins

# Where --save copies a run's table, JSON and chart.
SAVED = REPO / "benches" / "results" / "current"
# The machine's records (base.RECORDS): the newest RECORDS_KEPT are kept.
RECORDS_KEPT = 1000


def keep_record(doc: dict, text: str) -> Path:
    """Keep a run's results (DOC, as TEXT) among the machine's records,
    named by scenario and time; drop the oldest past RECORDS_KEPT."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / f"{time.strftime('%Y%m%d-%H%M%S')}-{doc['scenario']}-{os.getpid()}.json"
    path.write_text(text + "\n")
    for old in sorted(RECORDS.glob("*.json"))[:-RECORDS_KEPT]:
        old.unlink(missing_ok=True)
    return path


def report(args, doc: dict) -> None:
    """Prints the verdict (and on failure the serial logs) of a scenario."""
    for w in doc["warnings"]:
        # The demo's table notes name each column's findings (BAR0, retries)
        # and its hung guests; the demo prints only the lab hosts' own.
        if args.cmd != "demo" or w.startswith("lab host"):
            print(f"[lab] warning: {w}", file=sys.stderr)
    if doc["problems"]:
        print(f"[lab] {args.scenario} FAILED after {doc['elapsed_s']} s:", file=sys.stderr)
        for p in doc["problems"]:
            print(f"[lab]   {p}", file=sys.stderr)
        if args.cmd != "demo":
            for b in doc["boots"]:
                log_path = Path(b["log"])
                print(f"---- full serial log ({log_path}) ----", file=sys.stderr)
                sys.stderr.write(log_path.read_text(errors="replace"))
                print("---- end of serial log ----", file=sys.stderr)
        else:
            print(f"[lab] serial logs: {', '.join(b['log'] for b in doc['boots'])}", file=sys.stderr)
    else:
        print(f"[lab] {args.scenario} passed in {doc['elapsed_s']} s", file=sys.stderr)


def bench_report(doc: dict, out: Path) -> tuple[int, str]:
    """The table, results.json and chart.png of DOC's cells, drawn by the
    bench tool itself (viommu-bench --report-from) into OUT; returns its
    exit status and the table."""
    out.mkdir(parents=True, exist_ok=True)
    cells = out / "cells.jsonl"
    # The bench tool's provenance line first (the code and lab host the
    # cells ran on, for the table's header), then one cell a line.
    prov = f"@@LAB-PROVENANCE@@ {doc['provenance']}\n" if doc.get("provenance") else ""
    cells.write_text(prov + "".join(json.dumps(c) + "\n" for c in doc["cells"]))
    (out / "lab.json").write_text(json.dumps(doc, indent=1) + "\n")
    tool = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "viommu-bench"
    if not tool.is_file():
        cargo_bins(BENCH_BINS, quiet=True)
    p = subprocess.run([str(tool), *doc["report_args"], "--report-from", str(cells), "--out", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stderr.splitlines():
        if "chart.png has no text" in line or "warning" in line.lower():
            print(f"[lab] {line.strip()}", file=sys.stderr)
    return p.returncode, p.stdout


def save(doc: dict, out: Path, command: str) -> None:
    """Copy the run's table, JSON and chart into benches/results/current/."""
    dest = SAVED
    dest.mkdir(parents=True, exist_ok=True)
    name = f"{doc['scenario']}-{time.strftime('%Y-%m-%d')}"
    warn = "".join(f"\nWarning: {w}\n" for w in doc.get("warnings", []))
    (dest / f"{name}.md").write_text(f"Command: `{command}` (whole run {doc['elapsed_s']} s).\n{warn}\n" + (out / "table.md").read_text())
    shutil.copy(out / "results.json", dest / f"{name}.json")
    if (out / "chart.png").is_file():
        shutil.copy(out / "chart.png", dest / f"{name}.png")
    print(f"[lab] saved {dest / name}.{{json,md,png}}", file=sys.stderr)
