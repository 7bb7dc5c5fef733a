"""A round of a scenario: lab host boots until its guests (or a scenario
of checks: its checks) are done, a fresh lab host taking over the
unfinished work after a trouble (trouble.TROUBLES), up to
HOST_BOOTS_PER_ROUND lab hosts; each boot's record goes into the results."""

from __future__ import annotations

import sys
from typing import Callable

from .base import cell_key, tag_of
from .console import Collector
from .trouble import TROUBLES, lab_faults_only, trouble_of

# takes an interrupt in the window where KVM has loaded the guest's GS and
# not yet entered it (seen: a reschedule IPI at __svm_vcpu_run+0x9c, then
# a page-fault recursion on the guest's GS base). In one CI run the same
# round's host crashed twice in a row, so a round got two fresh hosts; in
# another vmm-exits' lab host crashed, then wedged twice (the third after
# its triple-fault check); in another smp-smoke's lab host crashed (a stack
# guard page hit), wedged, crashed again and the fourth passed: four fresh
# hosts. It needs guests with two vCPUs (KVM kicking a running vCPU on the
# other CPU with an IPI): of 322 lab host boots counted, 24 of the 150 that
# ran 2-vCPU guests crashed so (3 more in soft lockups), none of the 172
# with 1-vCPU guests (one soft lockup).
HOST_BOOTS_PER_ROUND = 5


# The Collector's fields a boot record keeps, in the results' order; the
# troubles the Collector records (TROUBLES) are among them.
BOOT_FIELDS = ("host", "done_rc", "log", "host_crash", "stalled", "timed_out", "early_exit", "teardown_hung", "unfit", "vmm_stuck", "machine", "outer_profile")
BOOT_FIELDS += tuple(t.key for t in TROUBLES if t.collected and t.key not in BOOT_FIELDS)


def boot_record(col: Collector, r: int, attempt: int) -> dict:
    """The results' record of lab host boot ATTEMPT of round R."""
    return {"round": r, "attempt": attempt, **{f: getattr(col, f) for f in BOOT_FIELDS}}


def run_round(doc: dict, r: int, specs: list[str], boot: Callable[[list[str], int, list[str]], Collector]) -> None:
    """Round R of SPECS: boot(todo, attempt, skip) boots a lab host for the
    guests in TODO (a scenario of checks: skipping the checks named in
    SKIP) and returns its Collector; its boots, cells and checks go into
    DOC. When the lab host meets a trouble that moves its work (TROUBLES:
    its kernel crashed, it wedged...), the guests it did not finish run in
    a fresh one, up to HOST_BOOTS_PER_ROUND lab hosts."""
    todo, skip = list(specs), []
    for attempt in range(1, HOST_BOOTS_PER_ROUND + 1):
        col = boot(todo, attempt, skip)
        record = boot_record(col, r, attempt)
        doc["boots"].append(record)
        doc["cells"] = [c for c in doc["cells"] if cell_key(c) not in {cell_key(x) for x in col.cells}] + col.cells
        doc["checks"] += col.checks
        if col.provenance:
            doc["provenance"] = col.provenance
        todo = unfinished(record, col, todo, r)
        # A lab host trouble: the guests it did not finish run in a fresh
        # one; a warning, not a failure. A fault of ours that troubles
        # every lab host still fails: the last one's is judged.
        kind = trouble_of(record)
        moves = kind is not None and kind.moves_work
        # A scenario of checks (no guests of the bench tool: vmm-exits)
        # goes on in a fresh lab host from where the trouble stopped it:
        # the checks that passed are kept and named to the fresh host
        # (lab.skip: host-lib.sh's lab_skip), the ones that failed on the
        # host that then crashed run again (seen: a guest triple-faulted
        # three times in a row, then that lab host's kernel crashed; the
        # earlier runs from the start each met a crash again ten minutes
        # in). Without trouble, a failed check is a result.
        script = not specs
        if script and not moves and any(not c["ok"] for c in col.checks):
            return
        if not (moves and (todo or script) and attempt < HOST_BOOTS_PER_ROUND):
            return
        if script:
            skip = resume_checks(doc, record, col)
        what = kind.what.format(record[kind.key])
        rerun = (f"the scenario's checks but {', '.join(skip)}" if skip else "the scenario from its start") if script else f"{len(todo)} unfinished guest(s) of round {r}"
        print(f"[lab] warning: the lab host {what}; running {rerun} in a fresh one", file=sys.stderr)
        record[kind.retried] = True
        record["rerun"] = ("the scenario's unfinished checks" if skip else "the scenario") if script else "its unfinished guests"


def unfinished(record: dict, col: Collector, todo: list[str], r: int) -> list[str]:
    """The specs of TODO whose guests the lab host of RECORD did not
    finish. A guest that met the emulation's faults in every attempt is
    not finished: it runs again in a fresh lab host (the "sick" trouble,
    noted in RECORD when the host shows no other). On a lab host whose
    trouble spoils hangs (it crashed or wedged after), its guests'
    undiagnosed hangs count as its faults too (seen: stock QEMU's guest
    hung twice in boot, hung once more and reset itself, out of attempts,
    and the lab host crashed two guests later)."""
    host_failed = any(getattr(col, t.key, None) for t in TROUBLES if t.spoils_hangs and t.collected)
    sick = [(c["column"], n) for c in col.cells if (n := lab_faults_only(c, host_failed))]
    if sick and not trouble_of(record):
        record["sick"] = ", ".join(f"{t} round {r}, {n} attempts" for t, n in sick)
    done = {c["column"] for c in col.cells} - {t for t, _ in sick}
    return [s for s in todo if tag_of(s) not in done]


def resume_checks(doc: dict, record: dict, col: Collector) -> list[str]:
    """A scenario of checks going on in a fresh lab host: drops the checks
    that failed on the troubled one (noted in RECORD as spoiled; they run
    again) and returns the names of those that passed (skipped there)."""
    spoiled = [c["name"] for c in col.checks if not c["ok"]]
    doc["checks"] = [c for c in doc["checks"] if c["ok"]]
    if spoiled:
        record["spoiled_checks"] = spoiled
    return [c["name"] for c in doc["checks"]]
