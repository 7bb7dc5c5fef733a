"""Judging a scenario's results: the problems that fail a run and the
warnings beside them, from its lab hosts' boot records (their troubles:
trouble.TROUBLES; a machine that was not quiet: machine.loud), its
checks, its cells, and what the scenario expects of them (counters, the
reuse cache's idle phase, a breakdown, the NVMe's largest request, a
hostile guest's bounds)."""

from __future__ import annotations

import re

from .base import cell_key, tag_of, vmm_of
from .console import TEARDOWN_GRACE
from .machine import loud
from .trouble import TROUBLES, Verdict, trouble_of

def counter_total(cells: list[dict], key: str) -> int:
    """KEY summed over the phases of CELLS: the device's counter of that
    name (deferred_unmaps, flush_requests, map_requests, vfio_calls), plus
    the guest's debugfs counters ending in /KEY (the pool's hits)."""
    total = 0
    for c in cells:
        for ph in c.get("phases", {}).values():
            total += (ph.get("device") or {}).get(key, 0)
            counters = (ph.get("fio") or {}).get("counters", {})
            total += sum(v for k, v in counters.items() if k.endswith("/" + key))
    return total


def idle_problems(cell: dict) -> tuple[list[str], list[str]]:
    """The idle phase of a lazy guest with the reuse cache (lab.idle_ms: a
    short burst of reads, then no I/O): at its end the cache holds nothing,
    and the host unmapped at least the bytes the cache held when it began (evictions go through the flush
    queue: deferred UNMAPs, then an IOTLB_FLUSH the device serves with
    host unmaps), with a flush if anything was held."""
    ph = cell.get("phases", {}).get("idle")
    if not ph or not ph.get("fio"):
        return ["no idle phase reported"], []
    fio, dev = ph["fio"], ph.get("device") or {}
    entries = fio.get("after", {}).get("iommu-dma-reuse/entries")
    if entries is None:
        return ["the guest has no iommu-dma-reuse counters"], []
    problems, warnings = [], []
    if entries != 0:
        problems.append(f"the reuse cache still held {entries} entries after the idle phase")
    # Hits lent to a mapping in use (guest patch 17): none once the I/O is over
    lent = fio.get("after", {}).get("iommu-dma-reuse/lent", 0)
    if lent != 0:
        problems.append(f"{lent} reuse cache hits were still lent (mapped, in use) after the idle phase: a lent entry outlived its unmap")
    held = -fio.get("counters", {}).get("iommu-dma-reuse/bytes", 0)
    freed = dev.get("bytes_unmapped", 0) - dev.get("bytes_mapped", 0)
    if freed < held:
        problems.append(f"the host unmapped {freed} bytes net in the idle phase, less than the {held} the cache held at its start")
    hits = fio.get("counters", {}).get("iommu-dma-reuse/hits", 0)
    if (held > 0 or hits > 0) and dev.get("flush_requests", 0) == 0:
        problems.append(f"the cache emptied in the idle phase (it held {held} bytes at its start, "
                        f"{hits} hits in its burst) without an IOTLB_FLUSH")
    if held <= 0 and hits <= 0:
        warnings.append("the reuse cache was not used in the idle phase's burst (only its emptiness was checked)")
    return problems, warnings


def judge(doc: dict, sc: dict, specs: list[str]) -> tuple[list[str], list[str]]:
    """Problems (fail the run) and warnings of a scenario's results."""
    problems, warnings = [], []
    for b in doc["boots"]:
        p, w = boot_problems(b)
        problems += p
        warnings += w
    if sc.get("checks"):
        problems += check_problems(doc, sc)
    p, w = cell_problems(doc, specs)
    problems += p
    warnings += w
    warnings += machine_warnings(doc["cells"])
    p, w = expectation_problems(doc, sc, specs)
    return problems + p, warnings + w


def machine_warnings(cells: list[dict]) -> list[str]:
    """A timed phase that ran while the machine was not quiet (its
    `machine` window: boot.PhaseClock), one warning each."""
    out = []
    for c in cells:
        for name, ph in sorted((c.get("phases") or {}).items()):
            if name.startswith(("verify", "count-", "breakdown")) or not isinstance(ph, dict):
                continue
            if why := loud(ph.get("machine")):
                out.append(f"{c.get('column')} round {c.get('round', 0) + 1} {name}: the machine was not quiet: {why}; that phase's IOPS are low by about as much")
    return out


def boot_problems(b: dict) -> tuple[list[str], list[str]]:
    """Problems and warnings of one lab host boot's record B: its trouble
    (trouble.TROUBLES: a warning when a fresh lab host took its work over,
    else judged by the trouble's verdict), and how its scenario ended."""
    problems, warnings = [], []
    where = f"lab host of round {b['round']}"
    rerun = b.get("rerun", "its unfinished guests")
    if why := loud(b.get("machine")):
        warnings.append(f"{where}: the machine was not quiet: {why}; its guests' timings are noisier than the rest")
    if b.get("spoiled_checks"):
        warnings.append(f"{where}: check(s) {', '.join(b['spoiled_checks'])} failed on a lab host that then crashed or wedged; "
                        "they ran again in a fresh one (judged there)")
    kind = trouble_of(b)
    if kind and b.get(kind.retried):
        # Its unfinished work ran again in a fresh lab host (judged
        # there): a warning.
        warnings.append(f"{where}: {kind.warning.format(b[kind.key], log=b['log'])}; {rerun} ran again in a fresh one")
        return problems, warnings
    # Not retried (the round's last lab host, or nothing left to run):
    # each trouble it shows as its verdict says.
    shown = [t for t in TROUBLES if b.get(t.key)]
    verdict = {t: f"{where}: {t.verdict_text.format(b[t.key], log=b['log'])}" for t in shown}
    alone = [verdict[t] for t in shown if t.verdict is Verdict.FAIL_ALONE]
    if alone:
        return problems + alone[:1], warnings
    if b.get("early_exit"):
        problems.append(f"{where}: {b['early_exit']}")
    elif b["host"] is None:
        problems.append(f"{where}: never reported ready (KVM/VFIO setup failed)")
    problems += [verdict[t] for t in shown if t.verdict is Verdict.FAIL]
    if b.get("timed_out"):
        problems.append(f"{where}: {b['timed_out']}")
    explained = any(t.explains_no_done for t in shown)
    if b.get("teardown_hung"):
        warnings.append(f"{where}: every guest finished, then the lab host did not finish within {TEARDOWN_GRACE} s (tearing down a VMM)")
    elif b["done_rc"] is None and not (explained or b.get("timed_out")):
        problems.append(f"{where}: never finished the scenario")
    elif b["done_rc"] not in (None, 0):
        problems.append(f"{where}: the scenario exited {b['done_rc']}")
    warnings += [verdict[t] for t in shown if t.verdict is Verdict.WARN]
    return problems, warnings


def check_problems(doc: dict, sc: dict) -> list[str]:
    """A scenario of checks: it reported some, and every one passed (and,
    where it says so, none was skipped)."""
    problems = []
    if not doc["checks"] and any(b["host"] for b in doc["boots"]):
        problems.append("the scenario reported no check")
    problems += [f"check {c['name']}: {c['detail']}" for c in doc["checks"] if not c["ok"]]
    if sc.get("no_skipped_checks"):
        # A scenario whose point is the backend it checks: a host
        # without it is a failure, not a pass with nothing checked.
        problems += [f"check {c['name']}: skipped: {c['detail']}" for c in doc["checks"] if c.get("skipped")]
    return problems


def cell_problems(doc: dict, specs: list[str]) -> tuple[list[str], list[str]]:
    """Every column's cell of every round: there, not failed, not hung (a
    hang of stock QEMU's guest is a warning, a result about stock QEMU),
    no fio error; the cells' own warnings pass on."""
    problems, warnings = [], []
    cells = {cell_key(c): c for c in doc["cells"]}
    vmm = {tag_of(s): vmm_of(s) for s in specs}
    for r in range(doc["first_round"], doc["first_round"] + doc["rounds"]):
        for spec in specs:
            t = tag_of(spec)
            c = cells.get((t, r - 1))
            if c is None:
                problems.append(f"{t} round {r}: no result (its lab host stopped before it ran)")
                continue
            status = c["status"]
            name = f"{t} round {r}"
            if status["status"] == "hung":
                msg = f"{name}: hung in {status['phase']} (no I/O completed for {status['after_s']} s; killed)"
                if status.get("device_owes"):
                    # A vCPU waited in the virtio-iommu driver for requests
                    # the device had not completed: a bug of a VMM or of
                    # the guest's driver, never the emulation's; the bench
                    # tool did not run it again, and it fails whatever VMM.
                    problems.append(msg + ": the device owed the driver a request (see the cell's 'state at the hang')")
                    continue
                # Stock QEMU's guest hanging is a result about stock QEMU
                # (shown as 'hung' in the table); ours must not hang.
                (problems if vmm.get(t) == "vmm" else warnings).append(msg)
            elif status["status"] == "failed":
                problems.append(f"{name}: {status['reason']}")
            for ph_name, ph in c.get("phases", {}).items():
                err = (ph.get("fio") or {}).get("error", 0)
                if err:
                    problems.append(f"{name}: fio {ph_name} error {err}")
            warnings += [f"{name}: {w}" for w in c.get("warnings", [])]
    return problems, warnings


def expectation_problems(doc: dict, sc: dict, specs: list[str]) -> tuple[list[str], list[str]]:
    """What the scenario expects of its cells: the reuse cache's idle
    phase, counters that must move or stay 0, a breakdown, the NVMe's
    largest request, a hostile guest's bounds."""
    problems, warnings = [], []
    vmm = {tag_of(s): vmm_of(s) for s in specs}
    for t in sc.get("idle_check", []):
        for c in (c for c in doc["cells"] if c["column"] == t):
            p, w = idle_problems(c)
            problems += [f"{t} round {c['round'] + 1}: {x}" for x in p]
            warnings += [f"{t} round {c['round'] + 1}: {x}" for x in w]
    for t, keys in sc.get("expect", {}).items():
        mine = [c for c in doc["cells"] if c["column"] == t]
        if not mine or t not in vmm:
            continue
        for key in keys:
            # "a|b": either moving is the path under test taken (polling:
            # it found requests, or its spare-CPU check said the host had
            # no CPU to spare, which depends on the lab host's load).
            alternatives = key.split("|")
            if sum(counter_total(mine, k) for k in alternatives) <= 0:
                what = key if len(alternatives) == 1 else "each of " + ", ".join(alternatives)
                problems.append(f"{t}: {what} stayed 0 in every phase (the path under test was not taken)")
    for t, keys in sc.get("expect_zero", {}).items():
        mine = [c for c in doc["cells"] if c["column"] == t]
        for key in keys:
            moved = counter_total(mine, key)
            if moved > 0:
                problems.append(f"{t}: {key} moved ({moved}) where it must stay 0")
    if sc.get("breakdown"):
        problems += breakdown_problems(doc["cells"], specs)
    problems += max_hw_problems(doc["cells"], sc.get("max_hw_kb", {}))
    problems += iommu_problems(doc["cells"], sc.get("expect_iommu", {}))
    if sc.get("hostile"):
        problems += hostile_problems(doc["cells"], sc["hostile"])
    return problems, warnings


def hostile_problems(cells: list[dict], spec: dict) -> list[str]:
    """A hostile guest's cells (SPEC's column) against its calm twin's
    (SPEC's control) in the same round: every attack ran (at least its
    operations), the VMM's memory apart from guest RAM (the bench tool's
    footprint: peak_own_rss_kib) at most rss_growth_mib above the calm
    VMM's and rss_mib at all, its log lines at most the calm VMM's plus
    log_per_s over the cell's wall-clock time plus log_slack, the rate
    limiter cut the flood at least once (else the attack did not reach
    it), and neither VMM logged an error after its guest's end (the
    release). The cells' status, verify and exit code are judge()'s."""
    problems = []
    column, control = spec["column"], spec.get("control")
    controls = {c["round"]: c for c in cells if c["column"] == control}
    for c in cells:
        if c["column"] not in (column, control):
            continue
        name = f"{c['column']} round {c['round'] + 1}"
        fp = c.get("footprint")
        if not fp:
            problems.append(f"{name}: no footprint of the VMM (log lines, memory) in the cell")
            continue
        if fp.get("errors_after_done", 0):
            problems.append(f"{name}: the VMM logged {fp['errors_after_done']} ERROR line(s) after the guest's end (its release; see {c.get('log')})")
        if c["column"] != column:
            continue
        attacks = {a["name"]: a for a in c.get("attacks", [])}
        for a, least in spec.get("attacks", {}).items():
            rec = attacks.get(a)
            if rec is None:
                problems.append(f"{name}: attack {a} reported nothing")
            elif not rec.get("ok"):
                problems.append(f"{name}: attack {a} could not run: {rec.get('detail', '')}")
            elif rec.get("ops", 0) < least:
                problems.append(f"{name}: attack {a} made {rec.get('ops', 0)} operations in {rec.get('seconds', 0)} s, fewer than {least}: it did not load the VMM")
        if not fp.get("rate_limited_lines"):
            problems.append(f"{name}: the rate limiter never dropped a guest-triggered warning (no 'guest-triggered warnings dropped' line): the flood did not reach it")
        own = fp.get("peak_own_rss_kib", 0)
        if not fp.get("samples"):
            problems.append(f"{name}: the VMM's memory was never sampled")
        elif own > spec.get("rss_mib", 256) * 1024:
            problems.append(f"{name}: the VMM's memory apart from guest RAM peaked at {own // 1024} MiB, more than {spec.get('rss_mib', 256)} MiB")
        calm = (controls.get(c["round"]) or next(iter(controls.values()), None)) if control else None
        calm_fp = (calm or {}).get("footprint")
        if control and not calm_fp:
            problems.append(f"{name}: no footprint of the calm guest {control}'s VMM to compare with")
            continue
        if not calm_fp:
            continue
        grow = spec.get("rss_growth_mib", 32)
        if fp.get("samples") and calm_fp.get("samples") and own > calm_fp["peak_own_rss_kib"] + grow * 1024:
            problems.append(f"{name}: the VMM's memory apart from guest RAM peaked at {own // 1024} MiB, "
                            f"more than the calm guest's {calm_fp['peak_own_rss_kib'] // 1024} MiB + {grow} MiB")
        limit = calm_fp.get("log_lines", 0) + int(spec.get("log_per_s", 11) * c.get("wall_s", 0)) + spec.get("log_slack", 50)
        if fp.get("log_lines", 0) > limit:
            problems.append(f"{name}: the VMM logged {fp['log_lines']} lines in {c.get('wall_s', 0):.0f} s, more than {limit} "
                            f"(the calm guest's {calm_fp.get('log_lines', 0)} + {spec.get('log_per_s', 11)} a second + {spec.get('log_slack', 50)})")
    return problems


def breakdown_problems(cells: list[dict], specs: list[str]) -> list[str]:
    """A breakdown scenario's point: every guest behind a virtio-iommu that
    finished recorded at least one breakdown phase (viommu-bench
    --breakdown) in which its request-serving thread was found."""
    problems = []
    viommu = {tag_of(s) for s in specs if s.split(":")[2] == "viommu"}
    for c in (c for c in cells if c["column"] in viommu and c["status"]["status"] == "ok"):
        got = [ph["breakdown"] for n, ph in c.get("phases", {}).items() if n.startswith("breakdown-") and ph.get("breakdown")]
        if not any(b.get("server_tid") is not None for b in got):
            why = "; ".join(w for w in c.get("warnings", []) if w.startswith("breakdown-")) or "no breakdown phase ran"
            problems.append(f"{c['column']} round {c['round'] + 1}: no breakdown with a request-serving thread ({why})")
    return problems


def iommu_kind(unit: str) -> str:
    """What a /sys/class/iommu name is: "dmar" (VT-d), "ivhd" (AMD-Vi), or
    "virtio" for virtio-iommu, which names its unit after the PCI function
    it sits on (e.g. 0000:00:02.0)."""
    if re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", unit):
        return "virtio"
    return unit.rstrip("0123456789")


def iommu_problems(cells: list[dict], want: dict) -> list[str]:
    """The IOMMU each guest reported at boot (/sys/class/iommu names) and
    its NVMe's domain type, against the scenario's (unit kind, domain
    type) per column: e.g. ("dmar", "DMA") behind QEMU's VT-d,
    ("virtio", "DMA-FQ") behind a virtio-iommu with a lazy guest."""
    problems = []
    for t, (unit, domain) in want.items():
        for c in (c for c in cells if c["column"] == t and c.get("boot")):
            b = c["boot"]
            units = [u for u in (b.get("iommus") or "").split(",") if u]
            name = f"{t} round {c['round'] + 1}"
            if not any(iommu_kind(u) == unit for u in units):
                problems.append(f"{name}: the guest's IOMMU units are {units or 'none'}, expected a {unit} unit")
            if b.get("nvme_domain") != domain:
                problems.append(f"{name}: the NVMe's domain is {b.get('nvme_domain')!r}, expected {domain!r}")
    return problems


def max_hw_problems(cells: list[dict], bounds: dict) -> list[str]:
    """The NVMe's largest request (KiB) each guest reported at boot, against
    the scenario's (low, high) bounds per column: guest patch 15 (6.12)
    lifts it above the IOVA caches' 128 KiB for lazy domains with the
    reuse cache, and only for them."""
    problems = []
    for t, (lo, hi) in bounds.items():
        for c in (c for c in cells if c["column"] == t and c.get("boot")):
            kb = c["boot"].get("max_hw_kb")
            name = f"{t} round {c['round'] + 1}"
            if kb is None:
                problems.append(f"{name}: the guest did not report its NVMe's largest request (max_hw_kb)")
            elif (lo is not None and kb < lo) or (hi is not None and kb > hi):
                want = " and ".join(x for x in (lo is not None and f">= {lo}", hi is not None and f"<= {hi}") if x)
                problems.append(f"{name}: the NVMe's largest request is {kb} KiB, expected {want} KiB")
    return problems



