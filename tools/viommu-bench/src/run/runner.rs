//! Runs one cell: starts the VMM, follows the guest's marker lines, reads
//! the device counters at each phase's begin and end, and kills a guest
//! that stops completing I/O (reported `hung`, the run goes on).
//!
//! Timed phases are read with nothing turned on: our VMM's always-on
//! counters over its API, nothing from stock QEMU. Stock QEMU is counted in
//! the untimed counting phases (`count-PHASE`) that follow: at the begin
//! marker its trace events go on over QMP and the guest, waiting on its
//! console, is told `go` (or `skip` when they could not be turned on); at
//! the end marker they go off and the trace file's gain is the phase's
//! count (see [`crate::run::trace`]). With `--breakdown` every guest behind a
//! virtio-iommu then runs untimed breakdown phases (`breakdown-PHASE`): at
//! the begin marker a tracefs instance is set up for the VMM's threads,
//! the guest is told `go`, and the host records the middle of the run
//! (see [`crate::run::host_trace`]); stock QEMU's trace stays off in them.

pub mod markers;
pub mod progress;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, BufReader};
use tokio::process::Child;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::columns::Counting;
use crate::columns::Launch;
use crate::run::console::{line_text, read_line_capped, MAX_LINE_BYTES};
use crate::run::counter_source::CounterSource;
use crate::run::footprint::Footprint;
use crate::run::hang::unkillable_vmm::{
    bounded, kernel_stacks, kill, StuckVmm, STUCK_WAIT, UNKILLABLE,
};
use crate::run::results::{CellResult, CellStatus};

use markers::{on_line, Cell, Observers};
pub use progress::Progress;

/// How long the VMM may take to exit after the guest said it is done.
const EXIT_GRACE: Duration = Duration::from_secs(60);

/// The least stall window before the guest's boot record (tests: none).
const BOOT_STALL: Duration = if cfg!(test) {
    Duration::ZERO
} else {
    Duration::from_secs(120)
};

/// A cell could not be run at all, or the user stopped the run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Ctrl-C or SIGTERM.
    #[error("interrupted; the VM was stopped")]
    Interrupted,
    /// The VMM would not start.
    #[error("starting {}: {source}; check --qemu/--vmm", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An earlier cell's VMM is still in the host's kernel and holds the
    /// device: no VM can take it on this host until it leaves.
    #[error("the VMM of {cell} (pid {pid}) is still stuck in the host's kernel {waited_s} s after SIGKILL and holds the device; the cells after it cannot run on this host (its threads' kernel stacks are in the log of {cell}: look for the reset or ioctl they wait in, and reboot the host)")]
    StuckVmm {
        /// The cell whose VMM it is.
        cell: String,
        /// Its process id.
        pid: String,
        /// Seconds since it was killed.
        waited_s: u64,
    },
    /// The log file could not be written.
    #[error("{}: {source}; check --out", path.display())]
    Log {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What a cell run needs besides its command.
#[derive(Debug)]
pub struct CellCtx<'a> {
    /// No I/O progress and no marker this long: hung.
    pub stall: Duration,
    /// Bound on the whole cell.
    pub bound: Duration,
    /// Where the log goes.
    pub log_dir: &'a Path,
    /// Flips to true on Ctrl-C/SIGTERM.
    pub cancel: watch::Receiver<bool>,
    /// KVM exit counting per phase (`--kvm-exits`).
    pub kvm_exits: Option<&'a crate::run::kvm_exits::KvmExits>,
    /// The host's recording of the breakdown phases (`--breakdown`).
    pub breakdown: Option<&'a crate::run::host_trace::Settings>,
    /// A VMM of an earlier cell that SIGKILL did not end: the next cell
    /// waits for it (see [`crate::run::hang::unkillable_vmm`]).
    pub stuck: Option<StuckVmm>,
    /// `--pin-vcpus`: where the VMM's threads go.
    pub placement: Option<&'a crate::run::placement::Layout>,
}

/// Sends each line of `r` to `tx`, marked whether it is stderr.
fn spawn_lines<R: AsyncRead + Unpin + Send + 'static>(
    r: R,
    stderr: bool,
    tx: mpsc::Sender<(bool, String)>,
) {
    tokio::spawn(async move {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match read_line_capped(&mut r, &mut buf, MAX_LINE_BYTES).await {
                Ok((0, _)) | Err(_) => break,
                Ok((_, cut)) => {
                    let line = line_text(&buf, cut);
                    if tx.send((stderr, line)).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
}

/// Run `launch` as the cell `column` round `round`.
pub async fn run_cell(
    launch: &Launch,
    column: &str,
    round: u32,
    ctx: &mut CellCtx<'_>,
    progress: &Progress,
) -> Result<CellResult, RunError> {
    let log_path = ctx.log_dir.join(format!("{column}-r{}.log", round + 1));
    if let Some(stuck) = ctx.stuck.take() {
        wait_for_stuck(stuck, column, round, progress).await?;
    }
    let log = open_log(&log_path, launch)?;
    let start = Instant::now();
    progress.line(column, round, "booting", Duration::ZERO);
    debug!("{}", launch.display());
    let mut vm = Vm::spawn(launch, log, (column, round, progress, start))?;
    vm.watch(ctx).await?;
    Ok(vm.finish(ctx, log_path))
}

/// The cell's log, headed by its command line, with the files an earlier
/// run of the same cell left removed.
fn open_log(log_path: &Path, launch: &Launch) -> Result<std::fs::File, RunError> {
    let log_err = |source| RunError::Log {
        path: log_path.to_path_buf(),
        source,
    };
    let mut log = std::fs::File::create(log_path).map_err(log_err)?;
    writeln!(log, "# {}", launch.display()).map_err(log_err)?;
    for stale in [
        &launch.trace,
        &launch.qmp,
        &launch.monitor,
        &launch.api_socket,
    ]
    .into_iter()
    .flatten()
    {
        let _ = std::fs::remove_file(stale);
    }
    Ok(log)
}

/// Which deadline applies now, and what passing it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    /// The VMM exited: its output has a few seconds to drain.
    Drain,
    /// The guest is done: the VMM has [`EXIT_GRACE`] to exit.
    Exit,
    /// No I/O progress and no marker for the stall window.
    Stall,
    /// The bound on the whole cell.
    Bound,
}

/// One running VM and what its cell has gathered so far.
struct Vm<'a> {
    launch: &'a Launch,
    column: &'a str,
    round: u32,
    progress: &'a Progress,
    start: Instant,
    child: Child,
    pid: Option<u32>,
    log: std::fs::File,
    lines: mpsc::Receiver<(bool, String)>,
    src: CounterSource,
    st: Cell,
    footprint: Footprint,
    placer: crate::run::placement::Placer,
    last_progress: Instant,
    done_at: Option<Instant>,
    exit: Option<ExitStatus>,
    exited_at: Option<Instant>,
    streams_open: bool,
    hung: Option<CellStatus>,
    /// Set when SIGKILL did not end the VMM (when it was first killed).
    unkillable: Option<Instant>,
}

impl<'a> Vm<'a> {
    /// Starts the VMM of `launch`, its output read line by line.
    fn spawn(
        launch: &'a Launch,
        log: std::fs::File,
        (column, round, progress, start): (&'a str, u32, &'a Progress, Instant),
    ) -> Result<Self, RunError> {
        // A counting guest waits for its answers on the console: QEMU's stdin.
        let stdin = if launch.console_input() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        let mut cmd = tokio::process::Command::new(&launch.program);
        cmd.args(&launch.args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A SIGKILL of the tool takes the VMM with it: no orphan holds
        // the drive.
        crate::run::vmm_child::die_with_this_process(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
            program: launch.program.clone(),
            source,
        })?;
        let pid = child.id();
        let (tx, lines) = mpsc::channel(1024);
        if let Some(o) = child.stdout.take() {
            spawn_lines(o, false, tx.clone());
        }
        if let Some(e) = child.stderr.take() {
            spawn_lines(e, true, tx.clone());
        }
        drop(tx);
        let src = CounterSource::new(
            launch.trace.as_deref(),
            launch.qmp.as_deref(),
            launch.api_socket.as_deref(),
        );
        let st = Cell {
            phase: "boot".into(),
            console: child.stdin.take(),
            vmm_pid: pid,
            ..Default::default()
        };
        Ok(Vm {
            launch,
            column,
            round,
            progress,
            start,
            child,
            pid,
            log,
            lines,
            src,
            st,
            footprint: Footprint::default(),
            placer: Default::default(),
            last_progress: Instant::now(),
            done_at: None,
            exit: None,
            exited_at: None,
            streams_open: true,
            hung: None,
            unkillable: None,
        })
    }

    /// Follows the VM until it has exited and its output is read, or it
    /// is killed (hung, or not exiting), or the run is interrupted.
    async fn watch(&mut self, ctx: &mut CellCtx<'_>) -> Result<(), RunError> {
        // The VMM's own memory, about once a second while it runs.
        let mut sample_tick = tokio::time::interval(Duration::from_secs(1));
        sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.exit.is_some() && !self.streams_open {
                return Ok(());
            }
            let now = Instant::now();
            let (deadline, why) = self.deadline(ctx);
            tokio::select! {
                msg = self.lines.recv(), if self.streams_open => match msg {
                    None => self.streams_open = false,
                    Some((is_err, line)) => self.on_output(is_err, &line, ctx).await,
                },
                _ = sample_tick.tick(), if self.exit.is_none() => {
                    if let Some(pid) = self.pid {
                        self.footprint.sample(pid);
                        if let Some(layout) = ctx.placement {
                            self.placer.apply(layout, pid, Path::new("/proc"));
                        }
                    }
                },
                status = self.child.wait(), if self.exit.is_none() => {
                    self.exit = Some(status.map_err(|source| RunError::Spawn { program: self.launch.program.clone(), source })?);
                    self.exited_at = Some(Instant::now());
                },
                _ = tokio::time::sleep_until((deadline.max(now)).into()) => {
                    let go_on = match why {
                        Deadline::Drain => false,
                        Deadline::Exit => self.on_no_exit().await,
                        Deadline::Stall | Deadline::Bound => self.on_hang(why).await,
                    };
                    if !go_on {
                        return Ok(());
                    }
                },
                _ = ctx.cancel.changed() => {
                    kill(&mut self.child).await;
                    return Err(RunError::Interrupted);
                },
            }
        }
    }

    /// Which deadline applies now, and what passing it means.
    fn deadline(&self, ctx: &CellCtx<'_>) -> (Instant, Deadline) {
        if let Some(t) = self.exited_at {
            (t + Duration::from_secs(5), Deadline::Drain)
        } else if let Some(t) = self.done_at {
            (t + EXIT_GRACE, Deadline::Exit)
        } else {
            // Until the guest reports its boot, give it at least BOOT_STALL:
            // firmware and kernel boot print no progress lines.
            let window = if self.st.boot.is_none() {
                ctx.stall.max(BOOT_STALL)
            } else {
                ctx.stall
            };
            let stall = self.last_progress + window;
            let bound = self.start + ctx.bound;
            if stall < bound {
                (stall, Deadline::Stall)
            } else {
                (bound, Deadline::Bound)
            }
        }
    }

    /// One line of the VMM's output (`is_err`: its stderr) or the guest's
    /// console: logged, and read for crashes, stalls and markers.
    async fn on_output(&mut self, is_err: bool, line: &str, ctx: &CellCtx<'_>) {
        let st = &mut self.st;
        let _ = writeln!(self.log, "{}{line}", if is_err { "[vmm] " } else { "" });
        if is_err {
            self.footprint.log_line(line, st.guest_rc.is_some());
            return;
        }
        if st.crash.is_none() {
            st.crash = crate::run::faults::crash_in(line);
        }
        if st.boot.is_none() && st.boot_stall.is_none() {
            st.boot_stall = crate::run::faults::stall_in(line);
        }
        let mut o = Observers {
            src: &mut self.src,
            kvm: ctx.kvm_exits,
            brk: ctx.breakdown,
            column: self.column,
            round: self.round,
            progress: self.progress,
            start: self.start,
        };
        if on_line(line, st, &mut o).await {
            self.last_progress = Instant::now();
        }
        if st.guest_rc.is_some() && self.done_at.is_none() {
            self.done_at = Some(Instant::now());
        }
    }

    /// The guest powered off but the VMM did not exit: where its threads
    /// are, then SIGKILL; whether to go on watching (it exited).
    async fn on_no_exit(&mut self) -> bool {
        // Where it is, before the kill changes it.
        let at = self.pid.map(kernel_stacks).unwrap_or_default();
        let _ = writeln!(
            self.log,
            "# the VMM did not exit after the guest powered off; its threads: {at}"
        );
        self.st.warnings.push(format!(
            "the VMM did not exit within {} s after the guest powered off; killed (its threads then: {})",
            EXIT_GRACE.as_secs(),
            bounded(&at)
        ));
        self.kill_or_give_up().await
    }

    /// No I/O progress for the stall window, or past the cell's bound: the
    /// state at the hang, then SIGKILL; whether to go on watching (it
    /// exited).
    async fn on_hang(&mut self, why: Deadline) -> bool {
        let (column, round) = (self.column, self.round);
        let after_s = if why == Deadline::Stall {
            self.last_progress.elapsed().as_secs()
        } else {
            self.start.elapsed().as_secs()
        };
        warn!(
            "{column} round {}: no I/O progress in {} for {after_s} s; killing the VM",
            round + 1,
            self.st.phase
        );
        let mut device_owes = false;
        if let Some((why, owes)) = crate::run::hang::state::read(self.launch, self.pid).await {
            device_owes = owes;
            warn!("{column} round {}: state at the hang: {why}", round + 1);
            let _ = writeln!(self.log, "# state at the hang: {why}");
            self.st.warnings.push(format!("state at the hang: {why}"));
        }
        self.progress.line(
            column,
            round,
            &format!("HUNG in {}, killed", self.st.phase),
            self.start.elapsed(),
        );
        self.hung = Some(CellStatus::Hung {
            phase: self.st.phase.clone(),
            after_s,
            device_owes,
        });
        // Stuck in the host kernel: waiting longer would only kill it
        // again and again.
        self.kill_or_give_up().await
    }

    /// SIGKILL the VMM; when that does not end it, say so and give the
    /// cell up. Whether it exited.
    async fn kill_or_give_up(&mut self) -> bool {
        let killed = Instant::now();
        if kill(&mut self.child).await {
            return true;
        }
        note_unkillable(
            &mut self.st,
            &mut self.log,
            self.pid,
            self.column,
            self.round,
        );
        self.unkillable = Some(killed);
        false
    }

    /// The cell's result from what the VM left; a VMM that SIGKILL did not
    /// end is handed to the next cell in `ctx`.
    fn finish(mut self, ctx: &mut CellCtx<'_>, log_path: PathBuf) -> CellResult {
        let (column, round, launch) = (self.column, self.round, self.launch);
        let exit = self.exit;
        let vmm_rc = exit.and_then(|e| e.code());
        let _ = writeln!(self.log, "# VMM exit: {exit:?}");
        if let Some(since) = self.unkillable {
            // The next cell waits for it to let go of the device.
            ctx.stuck = Some(StuckVmm::new(
                format!("{column} round {}", round + 1),
                self.child,
                since,
            ));
        }
        let mut st = self.st;
        let status = self.hung.unwrap_or_else(|| judge(&st, vmm_rc));
        let counting = match (&launch.counting, &self.src) {
            (Counting::Pass, CounterSource::Qemu(q)) => q.counting(),
            (c, _) => c.clone(),
        };
        // A counting pass that was asked for and gave nothing is said (a guest
        // that never got to it, hung or failed, says why in its status).
        let lost = match &counting {
            Counting::NoTrace { why } => Some(why),
            Counting::NotCounted { why } if status == CellStatus::Ok => Some(why),
            _ => None,
        };
        if let (Counting::Pass, Some(why)) = (&launch.counting, lost) {
            warn!("{column} round {}: {why}", round + 1);
            st.warnings.push(why.clone());
        }
        // A booted guest whose threads were not all placed ran unlike the
        // others: said, not hidden (a VM that never booted may not have
        // started its vCPUs).
        if let (Some(layout), CellStatus::Ok) = (ctx.placement, &status) {
            if let Some(why) = self.placer.shortfall(layout) {
                warn!("{column} round {}: {why}", round + 1);
                st.warnings.push(why);
            }
        }
        CellResult {
            column: column.into(),
            round,
            status,
            boot: st.boot,
            phases: st.phases,
            errors: st.errors,
            warnings: st.warnings,
            guest_rc: st.guest_rc,
            vmm_rc,
            guest_crash: st.crash,
            boot_stall: st.boot_stall,
            bar0_reserved: None,
            lower_bound: counting == Counting::Pass,
            counting: Some(counting),
            place: None,
            attacks: st.attacks,
            footprint: Some(self.footprint),
            wall_s: self.start.elapsed().as_secs_f64(),
            command: launch.display(),
            log: log_path,
        }
    }
}

/// Say that SIGKILL did not end the VMM, with where its threads are in the
/// host's kernel (log and warning).
fn note_unkillable(
    st: &mut Cell,
    log: &mut std::fs::File,
    pid: Option<u32>,
    column: &str,
    round: u32,
) {
    let at = pid.map(kernel_stacks).unwrap_or_default();
    warn!(
        "{column} round {}: {UNKILLABLE}; its threads: {at}",
        round + 1
    );
    let _ = writeln!(log, "# {UNKILLABLE}; its threads: {at}");
    st.warnings
        .push(format!("{UNKILLABLE}; its threads: {}", bounded(&at)));
}

/// Before a VM starts: wait (at most [`STUCK_WAIT`]) for an earlier cell's
/// VMM that SIGKILL did not end, which still holds the device.
async fn wait_for_stuck(
    stuck: StuckVmm,
    column: &str,
    round: u32,
    progress: &Progress,
) -> Result<(), RunError> {
    let what = format!(
        "waiting up to {} s for the VMM of {} (pid {}) to leave the host's kernel",
        STUCK_WAIT.as_secs(),
        stuck.cell,
        stuck.pid.map_or("?".into(), |p| p.to_string())
    );
    progress.line(column, round, &what, Duration::ZERO);
    match stuck.wait(STUCK_WAIT).await {
        Ok(after) => {
            warn!(
                "{column} round {}: the earlier VMM left the host's kernel {} s after SIGKILL; going on",
                round + 1,
                after.as_secs()
            );
            Ok(())
        }
        Err(still) => Err(RunError::StuckVmm {
            pid: still.pid.map_or("?".into(), |p| p.to_string()),
            waited_s: still.since.elapsed().as_secs(),
            cell: still.cell,
        }),
    }
}

/// How a cell that was not killed ended.
fn judge(st: &Cell, vmm_rc: Option<i32>) -> CellStatus {
    let failed = |reason: String| CellStatus::Failed {
        verify_failed: st.errors.iter().any(|e| e.starts_with("fio verify-"))
            || st.phases.iter().any(|(n, p)| {
                n.starts_with("verify-") && p.fio.as_ref().is_some_and(|f| f.error != 0)
            }),
        reason,
    };
    let rc = vmm_rc.map_or("a signal".to_string(), |c| c.to_string());
    match (&st.boot, st.guest_rc) {
        (None, _) => failed(format!(
            "the guest never reached its init (VMM exited {rc}; see the log)"
        )),
        (Some(b), _) if !b.nvme => failed(format!(
            "the guest saw no NVMe (/dev/nvme0n1): its kernel ({}) must have {} built in (=y; the guest image loads no modules)",
            if b.kernel.is_empty() { "?" } else { b.kernel.as_str() },
            crate::setup::preflight::guest_kernel::GUEST_KERNEL_OPTIONS.join(", ")
        )),
        (_, None) => failed(format!("the VMM exited {rc} before the guest finished")),
        (_, Some(_)) if !st.errors.is_empty() => failed(st.errors.join("; ")),
        (_, Some(g)) if g != 0 => failed(format!("the guest finished with rc={g}")),
        _ if !st.phases.keys().any(|n| n.starts_with("verify-")) => {
            failed("no write+verify pass ran".into())
        }
        // The guest's end is the VMM's: power-off exits 0, a guest that
        // reboots (lab.end=reboot) 3 or 4 (our VMM's reset, with the
        // --on-reboot exit it is run with, and triple fault); anything else (a seccomp kill, 159; a crash) is the
        // VMM failing after a good run.
        _ if vmm_rc.is_some_and(|c| !matches!(c, 0 | 3 | 4)) => failed(format!(
            "the guest finished but the VMM exited {rc} (not 0, 3 or 4; see the log)"
        )),
        _ => CellStatus::Ok,
    }
}

#[cfg(test)]
mod tests;
