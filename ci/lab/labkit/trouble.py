"""The lab host's troubles: the ways the nested emulation ends a lab host
early (its kernel crashed, it found itself unfit, a VMM stuck in its
kernel, it wedged, a guest met the emulation's faults in every attempt),
as one table, TROUBLES, that the console parser, the round runner, the
judge and ci/lab/fault-census read; and how a guest's failed attempts are
told to be the emulation's (lab_faults_only).

Adding a kind is adding a row: how the lab host's console shows it (a
marker of its own, a console line, or neither when the runner derives
it), whether its round's unfinished guests move to a fresh lab host, and
how it is judged when no fresh lab host took the work over."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Callable


class Verdict(enum.Enum):
    """How a trouble is judged on a round's last lab host (no fresh one
    took its work over)."""
    # A problem, and nothing else of that lab host is judged (it ran no guest).
    FAIL_ALONE = "fail-alone"
    # A problem, beside what else that lab host's record shows.
    FAIL = "fail"
    # A warning (its guests' cells are judged on their own).
    WARN = "warn"
    # Nothing of its own: its guests' cells are judged as they are.
    CELLS = "cells"


@dataclass(frozen=True)
class Trouble:
    """One kind of lab host trouble (a row of TROUBLES)."""
    # The key of the boot record (and the Collector's attribute, when it
    # is collected from the console) that holds its detail.
    key: str
    # The boot record's key set when that boot's work ran again elsewhere.
    retried: str
    # The warning when a fresh lab host took the work over ({} the detail).
    warning: str
    # How the rerun's line says what the lab host did ({} the detail).
    what: str
    # How it is judged on a round's last lab host, and the text ({} the
    # detail, {log} the lab host's log).
    verdict: Verdict
    verdict_text: str = ""
    # The lab host's marker (@@LAB-MARKER@@ JSON) that reports it, and the
    # detail taken from the marker's JSON and its raw text.
    marker: str | None = None
    from_marker: Callable[[dict, str], object] | None = None
    # A lab host console line (outside a failed guest's dump) that shows
    # it; the detail is the match, cut to 120 characters.
    console: re.Pattern | None = None
    # Whether the Collector records it (else the round runner derives it
    # from the cells after the boot).
    collected: bool = True
    # Whether the round's unfinished guests (a scenario of checks: its
    # unfinished checks) move to a fresh lab host.
    moves_work: bool = True
    # Whether it accounts for a console that ended without @@LAB-DONE@@
    # (else such a console counts as wedged, and the judge adds "never
    # finished the scenario").
    explains_no_done: bool = False
    # Whether the guests' hangs on such a lab host count as the emulation's
    # faults even undiagnosed (the host was sick before it showed).
    spoils_hangs: bool = False
    # ci/lab/fault-census's count of such lab host boots (None: not counted).
    census: str | None = None


# A crash of the lab host's own kernel, as its console prints it.
HOST_CRASH = re.compile(r"(Kernel panic - not syncing|BUG: |Oops: |general protection fault).*")

# In the order they are told apart when several show. All are the nested
# emulation's faults: a warning when a fresh lab host took the work over.
TROUBLES = (
    # Its own kernel crashed, even before it was ready (seen: "timer
    # doesn't work through Interrupt-remapped IO-APIC" at 0.6 s). With
    # every guest done on the round's last lab host, only a warning.
    Trouble("host_crash", "host_crash_retried", "the lab host crashed ({}, log {log})", "crashed ({})",
            Verdict.WARN, "the lab host crashed ({}, log {log})", console=HOST_CRASH,
            explains_no_done=True, spoils_hangs=True, census="lab host crashed"),
    # It found itself unfit to run guests (host-init's @@LAB-HOST-UNFIT@@:
    # e.g. KVM's TSC rate off the refined one).
    Trouble("unfit", "host_unfit_retried", "the lab host found itself unfit: {} (log {log})", "was unfit ({})",
            Verdict.FAIL_ALONE, "the lab host found itself unfit: {} (log {log})",
            marker="HOST-UNFIT", from_marker=lambda doc, rest: doc.get("why", rest),
            explains_no_done=True, census="lab host unfit"),
    # A VMM that SIGKILL did not end, in the lab host's kernel (seen after
    # a guest's triple fault, with no soft lockup printed), holding the
    # NVMe (the bench tool's @@LAB-HOST-STUCK@@; it then stops).
    Trouble("vmm_stuck", "vmm_stuck_retried", "a VMM stayed in the lab host's kernel after SIGKILL ({}, log {log})",
            "kept a VMM in its kernel ({})",
            Verdict.FAIL, "a VMM stayed in the lab host's kernel after SIGKILL: {} (log {log})",
            marker="HOST-STUCK", from_marker=lambda doc, rest: str(doc.get("why", rest))[:300]),
    # The whole lab host went silent (seen with a guest booting, the bench
    # tool inside it silent too), or its console ended without a cause:
    # set by the runner (HOST_STALL) and by Collector.finish(). A fault of
    # ours that wedges every lab host still fails: the last one's stall is
    # a problem.
    Trouble("stalled", "host_stall_retried", "{} (log {log})", "wedged ({})",
            Verdict.FAIL, "{}", explains_no_done=True, spoils_hangs=True, census="lab host wedged"),
    # A guest used up every attempt on the emulation's own faults (see
    # lab_faults_only), the lab host running on: the guest runs again in a
    # fresh lab host (seen: one lab host gave 6 of 8 attempts of 1-vCPU
    # 7.3 guests behind our VMM such a hang or a triple fault, where 12
    # earlier runs had 0-2 each).
    Trouble("sick", "host_sick_retried", "a guest met the emulation's faults in every attempt: {} (log {log})",
            "gave a guest the emulation's faults in every attempt ({})", Verdict.CELLS, collected=False),
)


def trouble_of(boot: dict) -> Trouble | None:
    """The first of TROUBLES a boot record shows, or None."""
    return next((t for t in TROUBLES if boot.get(t.key)), None)


def by_marker(kind: str) -> Trouble | None:
    """The trouble the lab host's marker KIND (e.g. HOST-UNFIT) reports."""
    return next((t for t in TROUBLES if t.marker == kind), None)


def census_of(boot: dict) -> str | None:
    """ci/lab/fault-census's count a boot record falls in, by the first of
    TROUBLES it shows that the census counts; else None."""
    return next((t.census for t in TROUBLES if t.census and boot.get(t.key)), None)


# A hang the nested emulation made: a vCPU whose saved state is the lab
# host's own (the bench tool's diagnosis; docs/lab.md, "Guests that spin
# at the lab host's __svm_vcpu_run+0x9c"), with no request owed.
EMULATION_HANG = "the vCPU's saved state is the host's"
# A guest that reset itself (a triple fault) or died of a double fault:
# the same corruption of a vCPU's state, retried the same way.
EMULATION_RESET = re.compile(r"reset itself|triple fault|double fault")
# A hang the bench tool's diagnosis ties to the virtio-iommu (liveness.rs:
# requests not taken or not completed, a notification still being served):
# never the lab host's, whatever happened to the host after it.
DEVICE_HANG = re.compile(r"has not taken|has not completed|serving one notification")
# "attempt N failed (REASON); ran it again (log ...)" in a cell's warnings.
ATTEMPT_FAILED = re.compile(r"^attempt \d+ failed \((.*)\); ran it again", re.S)


def lab_faults_only(c: dict, host_failed: bool = False) -> int:
    """How many attempts cell C made if every one of them failed of the
    nested emulation's faults (an EMULATION_HANG or EMULATION_RESET), else
    0. A hang with a request owed, or any other failure, is never one: it
    is judged as it is. HOST_FAILED: the lab host C ran on then crashed or
    wedged; a hang with no sign of the virtio-iommu in it (DEVICE_HANG)
    counts too, diagnosed or not (a stock QEMU whose monitor did not
    answer leaves a hang without one)."""
    status = c["status"]

    def emulation_hang(diagnosis: str) -> bool:
        """Whether a hang with DIAGNOSIS counts as the emulation's."""
        return EMULATION_HANG in diagnosis or (host_failed and not DEVICE_HANG.search(diagnosis))
    if status["status"] == "hung":
        last = " ".join(w for w in c.get("warnings", []) if w.startswith("state at the hang"))
        if status.get("device_owes") or not emulation_hang(last):
            return 0
    elif status["status"] != "failed" or not EMULATION_RESET.search(status.get("reason", "")):
        return 0
    reasons = [m.group(1) for m in map(ATTEMPT_FAILED.match, c.get("warnings", [])) if m]
    if not all(("hung" in r and emulation_hang(r)) or (EMULATION_RESET.search(r) and "hung" not in r) for r in reasons):
        return 0
    return len(reasons) + 1
