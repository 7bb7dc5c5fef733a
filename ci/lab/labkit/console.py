"""Reading a lab host's serial console: the @@LAB-...@@ markers (a marker
a kernel message cut is joined again), the bench tool's progress lines,
the lab host's own troubles it shows (trouble.TROUBLES), and how the
console ended (Collector.finish)."""

from __future__ import annotations

import json
import re
import time

from .trouble import TROUBLES, by_marker

MARK = re.compile(r"@@LAB-([A-Z0-9-]+)@@ ?(.*)$")
# A lab host kernel message's timestamp. One the console wrote into the
# middle of a marker line runs from its timestamp, the line's last, to the
# end of that line (the marker goes on at the start of the next).
KERNEL_STAMP = re.compile(r"\[\s*\d+\.\d+\] ")
# How many console lines a marker split by kernel messages may span.
MARKER_SPLIT_LINES = 20
# What the bench tool prints as it goes (its progress lines, its warnings).
BENCH_LINE = re.compile(r"\[viommu-bench\].*|viommu-bench: .*|\b(WARN|ERROR) .*")
# Once every guest has finished, how long the lab host may take to finish.
TEARDOWN_GRACE = 120
# No line from the lab host for this long: it is wedged; its round ends
# and its unfinished guests run in a fresh one. The bench tool in it prints
# a line at least every ~200 s while a guest runs: it gives a guest 120 s
# to boot and 60 s without I/O before it kills it and says so, and the VMM
# 60 s to exit (runner.rs: BOOT_STALL, --stall-seconds, EXIT_GRACE). 300 s
# leaves a margin over that; every wedge costs this much of a CI run (it
# was 420 s).
HOST_STALL = 300


class Collector:
    """Turns one lab host boot's serial lines into its host record, the
    bench tool's cells, and the checks."""

    def __init__(self, expected_cells: int = 0):
        self.host: dict | None = None
        self.cells: list[dict] = []
        # The bench tool's provenance line (code and host), as it printed it.
        self.provenance: str | None = None
        self.checks: list[dict] = []
        self.done_rc: int | None = None
        self.expected_cells = expected_cells
        self.last_cell = 0.0
        self.in_guest_dump = False
        # One attribute per trouble the console shows (host_crash, unfit,
        # vmm_stuck, stalled: trouble.TROUBLES), None until it shows.
        for t in TROUBLES:
            if t.collected:
                setattr(self, t.key, None)
        self.timed_out: str | None = None
        self.early_exit: str | None = None
        self.teardown_hung = False
        # The lab host's console log this was collected from.
        self.log = ""
        # How quiet the real machine was meanwhile (machine.quiet_of).
        self.machine: dict | None = None
        self.outer_profile: dict | None = None  # LAB_OUTER_PROFILE: its perf file and the outer PID (outer_profile.py)
        # A marker cut by a kernel message: its kind, its text so far, and
        # the console lines it has spanned.
        self.split_marker: tuple[str, str, int] | None = None

    def finish(self, returncode: int | None) -> None:
        """Classify how the lab host's console ended. A console that ended
        without @@LAB-DONE@@ and without a known cause (a crash the log
        shows, no output for HOST_STALL, the wall-clock bound) counts as
        wedged, whatever the cause: its round's unfinished guests run in a
        fresh lab host (seen in a demo: the log simply ended after a
        guest's retry, and the round was lost)."""
        if self.split_marker is not None:
            # The console ended inside a marker a kernel message cut.
            kind, head, _ = self.split_marker
            self.split_marker = None
            self._take_marker(kind, head, MARKER_SPLIT_LINES)
        if self.host is None and returncode not in (None, 0) and not self.timed_out:
            self.early_exit = f"the lab host's QEMU exited with status {returncode} before the host was ready"
            return
        explained = any(getattr(self, t.key) for t in TROUBLES if t.collected and t.explains_no_done)
        unexplained = self.done_rc is None and not (explained or self.timed_out or self.early_exit or self.teardown_hung)
        if unexplained and returncode == 0 and self.host is not None and not self.stalled:
            # QEMU runs the lab host with -no-reboot and the host powers
            # off only after @@LAB-DONE@@: a clean exit before it is the
            # lab host resetting, with no time to print (a triple fault;
            # seen in tcg-race, the outer QEMU's TCG race).
            self.host_crash = "the lab host reset without a message (its QEMU exited with status 0 under -no-reboot: a triple fault)"
            return
        if unexplained:
            self.stalled = f"its console ended without @@LAB-DONE@@ (its QEMU exited with status {returncode}): counted as wedged"

    def all_cells_in(self) -> bool:
        """Whether every expected cell came in and the scenario has not yet
        said it is done (the lab host may be tearing a VMM down)."""
        return self.expected_cells > 0 and len(self.cells) >= self.expected_cells and self.done_rc is None

    def feed(self, line: str) -> bool:
        """Take one serial line; True when it shows progress (a marker or a
        line of the bench tool)."""
        if self.split_marker is not None:
            return self._continue_marker(line)
        self._watch_host(line)
        m = MARK.search(line)
        if not m:
            return bool(BENCH_LINE.search(line))
        return self._take_marker(m.group(1), m.group(2), 1)

    def _continue_marker(self, line: str) -> bool:
        """A line after a marker that a kernel message cut: another whole
        kernel line (the message went on), or the marker's rest."""
        kind, head, spanned = self.split_marker
        self.split_marker = None
        if MARK.search(line):
            # Another marker: the cut one never went on.
            self._take_marker(kind, head, MARKER_SPLIT_LINES)
            return self.feed(line)
        if KERNEL_STAMP.match(line) and spanned < MARKER_SPLIT_LINES:
            self._watch_host(line)
            self.split_marker = (kind, head, spanned + 1)
            return True
        return self._take_marker(kind, head + line, spanned + 1, len(head))

    def _take_marker(self, kind: str, rest: str, spanned: int, new_from: int = 0) -> bool:
        """Take marker KIND with text REST, which has spanned SPANNED
        console lines (its text from NEW_FROM on is the latest line's)."""
        trouble = by_marker(kind)
        if kind in ("HOST-READY", "CELL", "CHECK") or trouble:
            doc = marker_json(rest)
            cut = [m.start() for m in KERNEL_STAMP.finditer(rest, new_from)] if doc is None else []
            if cut and spanned < MARKER_SPLIT_LINES:
                # The lab host's kernel printed into the line (seen: the
                # "hrtimer: interrupt took" warning inside a cell's JSON):
                # its message is whole on this line, the marker goes on
                # on the next.
                self._watch_host(rest[cut[-1]:])
                self.split_marker = (kind, rest[:cut[-1]], spanned)
                return True
            if doc is None:
                # A marker whose JSON does not parse (a console line the
                # kernel wrote into, a script's unescaped text): a failed
                # check naming it, never a traceback that loses the run.
                self.checks.append({"name": f"unreadable-{kind.lower()}-marker", "ok": False,
                                    "detail": f"@@LAB-{kind}@@ {rest[:200]}"})
                return True
        if trouble:
            setattr(self, trouble.key, trouble.from_marker(doc, rest))
        elif kind == "HOST-READY":
            self.host = doc
        elif kind == "CELL":
            self.cells.append(doc)
            self.last_cell = time.monotonic()
        elif kind == "CHECK":
            self.checks.append(doc)
        elif kind == "PROVENANCE" and (prov := marker_json(rest)) is not None:
            # Only for the table's header: a line the kernel cut is dropped.
            self.provenance = json.dumps(prov)
        elif kind == "DONE":
            self.done_rc = int(rest.split("=", 1)[1])
        return True

    def _watch_host(self, line: str) -> None:
        """Notes the first crash of the lab host's own kernel: a panic, BUG
        or Oops printed outside the dump of a failed guest's log (those are
        the guest's; the bench tool prints them between '---- guest ...'
        lines). The nested emulation sometimes crashes L2 (seen: a stack
        guard page hit in KVM_RUN); that is the lab's failure, not a result
        about the code under test."""
        if MARK.search(line) or BENCH_LINE.search(line):
            return  # the bench tool's own lines quote guest crashes
        if line.startswith("---- guest ") and line.endswith("follow ----"):
            self.in_guest_dump = True
        elif line.startswith("---- end of guest "):
            self.in_guest_dump = False
        elif not self.in_guest_dump:
            for t in TROUBLES:
                m = t.console.search(line) if t.console and getattr(self, t.key) is None else None
                if m:
                    setattr(self, t.key, m.group(0)[:120])


def marker_json(rest: str) -> dict | None:
    """The JSON object at the start of a marker's REST (control characters
    inside its strings are taken, text after it, such as a console's
    carriage return, is ignored), or None when none parses."""
    try:
        doc, _ = json.JSONDecoder(strict=False).raw_decode(rest.strip())
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None



