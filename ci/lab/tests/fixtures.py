"""Fixtures of the lab tests: cells and console lines as the bench tool
and the lab host print them, a boot record, a scenario judged from lines."""

import json
from pathlib import Path

from labkit import console, judge, scenarios

# ci/lab: the lab's scripts, beside the package and these tests.
LAB_DIR = Path(__file__).resolve().parent.parent

HOST = '@@LAB-HOST-READY@@ {"kernel":"6.1.0-56-cloud-amd64","nvme":"0000:00:01.0","vfio_group":1,"cpus":2,"bar0":"0xfebf0000-0xfebf3fff"}'


def fio(phase, iops, error=0, counters=None):
    return {"phase": phase, "numjobs": 1, "error": error, "read_kib": iops * 32, "read_bw_kib": iops * 4,
            "read_iops": iops, "read_ms": 8000, "write_kib": 0, "write_bw_kib": 0, "write_iops": 0,
            "write_ms": 0, "counters": counters or {}}


def cell(column, rnd=0, status=None, device=None, counters=None, warnings=()):
    """One @@LAB-CELL@@ record as viommu-bench --serial-report prints it."""
    return {
        "column": column, "round": rnd, "status": status or {"status": "ok"},
        "boot": {"kernel": "6.1.192", "nvme": True, "iommu_groups": "DMA:1", "cmdline": "x", "resv": ""},
        "phases": {
            "verify-4k": {"fio": fio("verify-4k", 10), "device": None},
            "randread-4k": {"fio": fio("randread-4k", 600, counters=counters), "device": device},
        },
        "errors": [], "warnings": list(warnings), "guest_rc": 0, "vmm_rc": 0, "guest_crash": None,
        "bar0_reserved": None, "lower_bound": False, "wall_s": 40.0, "command": "x", "log": "/tmp/bench/logs/x.log",
    }


def line(c):
    return "[  50.1] random kernel noise @@LAB-CELL@@ " + json.dumps(c)


def boot(col, rnd=1):
    return {"round": rnd, "attempt": 1, "host": col.host, "done_rc": col.done_rc, "log": "l",
            "host_crash": col.host_crash, "stalled": col.stalled, "timed_out": col.timed_out,
            "early_exit": col.early_exit, "teardown_hung": col.teardown_hung}


def judge_lines(scenario, specs, lines, rounds=1):
    col = console.Collector(len(specs))
    for ln in lines:
        col.feed(ln)
    doc = {"boots": [boot(col)], "cells": col.cells, "checks": col.checks, "rounds": rounds, "first_round": 1}
    return col, judge.judge(doc, scenarios.SCENARIOS[scenario], specs)


SPECS = ["qemu+stock:qemu:viommu:baseline", "ours:vmm:viommu:baseline"]
