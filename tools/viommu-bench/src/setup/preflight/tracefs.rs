//! What `--kvm-exits` and `--breakdown` need of the host's tracefs.
use super::{problem, Checks, Problem};

/// Where the kernel's tracefs is (or is mounted by the tool).
const TRACEFS: &str = "/sys/kernel/tracing";

impl Checks {
    /// What `--kvm-exits` needs: root, tracefs with the KVM events, and
    /// hist triggers (CONFIG_HIST_TRIGGERS: each event has a `hist` file).
    /// An unmounted tracefs is mounted later, then checked again.
    pub(super) fn check_kvm_exits(&self, p: &mut Vec<Problem>) {
        let r = &self.root;
        let t = TRACEFS;
        if !self.check_tracefs("--kvm-exits", "ftrace triggers", "CONFIG_HIST_TRIGGERS", p) {
            return;
        }
        if !r.exists(format!("{t}/events/kvm/kvm_exit")) {
            p.push(problem(
                format!("--kvm-exits: no KVM trace events in {t}/events/kvm"),
                "load KVM (modprobe kvm_intel or kvm_amd), or drop --kvm-exits",
            ));
        } else if !r.exists(format!("{t}/events/kvm/kvm_exit/hist")) {
            p.push(problem(
                "--kvm-exits: the kernel has no hist triggers (no events/kvm/kvm_exit/hist)",
                "boot a kernel with CONFIG_HIST_TRIGGERS, or drop --kvm-exits",
            ));
        }
    }

    /// What `--breakdown` needs: root, tracefs with instances, the
    /// scheduler's and the system calls' trace events. An unmounted
    /// tracefs is mounted later, then checked again.
    pub(super) fn check_breakdown(&self, p: &mut Vec<Problem>) {
        let r = &self.root;
        let t = TRACEFS;
        if !self.check_tracefs(
            "--breakdown",
            "tracefs instances",
            "CONFIG_FTRACE_SYSCALLS",
            p,
        ) {
            return;
        }
        for (ev, config) in [
            (
                "sched/sched_switch",
                "CONFIG_FTRACE (the scheduler's tracepoints)",
            ),
            ("raw_syscalls/sys_enter", "CONFIG_FTRACE_SYSCALLS"),
        ] {
            if !r.exists(format!("{t}/events/{ev}")) {
                p.push(problem(
                    format!("--breakdown: no trace event {ev} in {t}/events"),
                    format!("boot a kernel with {config}, or drop --breakdown"),
                ));
            }
        }
        if !r.exists(format!("{t}/instances")) {
            p.push(problem(
                format!("--breakdown: no {t}/instances (tracefs instances)"),
                "boot a kernel whose tracefs has instances (Linux 3.x on), or drop --breakdown",
            ));
        }
    }

    /// What every tracefs option (`FLAG`) needs first: root (for `what`,
    /// which are root's) and a tracefs (a kernel with CONFIG_FTRACE and
    /// `config`). Whether the tracefs is mounted, so that its events can
    /// be checked (an unmounted one is mounted later by the tool, then
    /// checked again).
    fn check_tracefs(&self, flag: &str, what: &str, config: &str, p: &mut Vec<Problem>) -> bool {
        if self.euid() != Some(0) {
            p.push(problem(
                format!("{flag}: not running as root"),
                format!("run it with sudo ({what} are root's), or drop {flag}"),
            ));
        }
        if !self.root.exists(TRACEFS) {
            p.push(problem(
                format!("{flag}: this kernel has no tracefs ({TRACEFS})"),
                format!("boot a kernel with CONFIG_FTRACE and {config} (Debian's, Ubuntu's and Fedora's have both), or drop {flag}"),
            ));
            return false;
        }
        self.root.exists(format!("{TRACEFS}/events"))
    }
}
