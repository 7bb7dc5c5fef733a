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

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use crate::columns::Counting;
use crate::columns::Launch;
use crate::plan::{is_breakdown_phase, is_count_phase};
use crate::run::breakdown::Serving;
use crate::run::console::{line_text, read_line_capped, MAX_LINE_BYTES};
use crate::run::counter_source::CounterSource;
use crate::run::footprint::Footprint;
use crate::run::guest::{parse_line, Marker};
use crate::run::hang::unkillable_vmm::{kernel_stacks, StuckVmm, STUCK_WAIT};
use crate::run::metrics::DeviceCounters;
use crate::run::results::{CellResult, CellStatus, PhaseResult};
use crate::units::human_duration;

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

/// Progress lines on stderr: cell, round, phase, ETA.
#[derive(Debug)]
pub struct Progress {
    /// Cells in the whole run.
    pub total: usize,
    /// Cells finished.
    pub done: usize,
    /// Rounds in the run.
    pub rounds: u32,
    /// The first round's number (`--first-round`): above 1, the run is a
    /// part of a longer one, whose total this run does not know.
    pub first_round: u32,
    /// Estimated duration of one cell (replaced by the measured mean).
    pub estimate: Duration,
    started: Instant,
}

impl Progress {
    /// A run of `total` cells in `rounds` rounds, each about `estimate`.
    pub fn new(total: usize, rounds: u32, estimate: Duration) -> Self {
        Progress {
            total,
            done: 0,
            rounds,
            first_round: 1,
            estimate,
            started: Instant::now(),
        }
    }

    /// Time left: the remaining cells at the mean cell time so far.
    pub fn eta(&self, into_current: Duration) -> Duration {
        let per = if self.done == 0 {
            self.estimate
        } else {
            self.started.elapsed().saturating_sub(into_current) / self.done as u32
        };
        (per * (self.total - self.done) as u32).saturating_sub(into_current)
    }

    /// Say where the run is.
    pub fn line(&self, column: &str, round: u32, what: &str, into_current: Duration) {
        eprintln!(
            "[viommu-bench] cell {}/{} round {}{} {column}: {what} (ETA {})",
            self.done + 1,
            self.total,
            round + 1,
            if self.first_round > 1 {
                String::new()
            } else {
                format!("/{}", self.rounds)
            },
            human_duration(self.eta(into_current)),
        );
    }
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
}

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

/// The state of a cell as its lines come in.
#[derive(Debug, Default)]
struct Cell {
    boot: Option<crate::run::guest::BootInfo>,
    phases: std::collections::BTreeMap<String, PhaseResult>,
    errors: Vec<String>,
    warnings: Vec<String>,
    guest_rc: Option<i32>,
    crash: Option<String>,
    boot_stall: Option<String>,
    phase: String,
    begin: HashMap<String, DeviceCounters>,
    /// The host's CPU times at each phase's begin marker.
    cpu_begin: HashMap<String, crate::run::cpu_time::CpuTimes>,
    io_seen: u64,
    /// What a hostile guest's attackers reported.
    attacks: Vec<crate::run::guest::AttackRecord>,
    /// The guest's serial console input (stock QEMU's stdin, when it
    /// counts): the answer to a counting phase's begin marker.
    console: Option<tokio::process::ChildStdin>,
    /// The VMM's process id (its threads are what a breakdown records).
    vmm_pid: Option<u32>,
    /// fio's JSON output of the run in flight, chunk by chunk.
    fio_json: crate::run::fio_chunks::Assembler,
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
    let log_err = |source| RunError::Log {
        path: log_path.clone(),
        source,
    };
    if let Some(stuck) = ctx.stuck.take() {
        wait_for_stuck(stuck, column, round, progress).await?;
    }
    let mut log = std::fs::File::create(&log_path).map_err(log_err)?;
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
    let start = Instant::now();
    progress.line(column, round, "booting", Duration::ZERO);
    debug!("{}", launch.display());
    // A counting guest waits for its answers on the console: QEMU's stdin.
    let stdin = if launch.console_input() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut child = tokio::process::Command::new(&launch.program)
        .args(&launch.args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| RunError::Spawn {
            program: launch.program.clone(),
            source,
        })?;
    // The VMM's own memory, about once a second while it runs.
    let pid = child.id();
    let mut footprint = Footprint::default();
    let mut sample_tick = tokio::time::interval(Duration::from_secs(1));
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (tx, mut rx) = mpsc::channel(1024);
    if let Some(o) = child.stdout.take() {
        spawn_lines(o, false, tx.clone());
    }
    if let Some(e) = child.stderr.take() {
        spawn_lines(e, true, tx.clone());
    }
    drop(tx);
    let mut src = CounterSource::new(
        launch.trace.as_deref(),
        launch.qmp.as_deref(),
        launch.api_socket.as_deref(),
    );
    let mut st = Cell {
        phase: "boot".into(),
        console: child.stdin.take(),
        vmm_pid: pid,
        ..Default::default()
    };
    let mut last_progress = Instant::now();
    let mut done_at: Option<Instant> = None;
    let mut exit: Option<std::process::ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    let mut streams_open = true;
    let mut hung: Option<CellStatus> = None;
    // Set when SIGKILL did not end the VMM (when it was first killed).
    let mut unkillable: Option<Instant> = None;
    loop {
        if exit.is_some() && !streams_open {
            break;
        }
        let now = Instant::now();
        // Which deadline applies now, and what passing it means.
        let (deadline, why) = if let Some(t) = exited_at {
            (t + Duration::from_secs(5), "drain")
        } else if let Some(t) = done_at {
            (t + EXIT_GRACE, "exit")
        } else {
            // Until the guest reports its boot, give it at least BOOT_STALL:
            // firmware and kernel boot print no progress lines.
            let window = if st.boot.is_none() {
                ctx.stall.max(BOOT_STALL)
            } else {
                ctx.stall
            };
            let stall = last_progress + window;
            let bound = start + ctx.bound;
            if stall < bound {
                (stall, "stall")
            } else {
                (bound, "bound")
            }
        };
        tokio::select! {
            msg = rx.recv(), if streams_open => match msg {
                None => streams_open = false,
                Some((is_err, line)) => {
                    let _ = writeln!(log, "{}{line}", if is_err { "[vmm] " } else { "" });
                    if is_err {
                        footprint.log_line(&line, st.guest_rc.is_some());
                    }
                    if !is_err {
                        if st.crash.is_none() {
                            st.crash = crate::run::faults::crash_in(&line);
                        }
                        if st.boot.is_none() && st.boot_stall.is_none() {
                            st.boot_stall = crate::run::faults::stall_in(&line);
                        }
                        if on_line(&line, &mut st, &mut src, (ctx.kvm_exits, ctx.breakdown), (column, round, progress, start)).await {
                            last_progress = Instant::now();
                        }
                        if st.guest_rc.is_some() && done_at.is_none() {
                            done_at = Some(Instant::now());
                        }
                    }
                }
            },
            _ = sample_tick.tick(), if exit.is_none() => {
                if let Some(pid) = pid {
                    footprint.sample(pid);
                }
            },
            status = child.wait(), if exit.is_none() => {
                exit = Some(status.map_err(|source| RunError::Spawn { program: launch.program.clone(), source })?);
                exited_at = Some(Instant::now());
            },
            _ = tokio::time::sleep_until((deadline.max(now)).into()) => {
                match why {
                    "drain" => break,
                    "exit" => {
                        // Where it is, before the kill changes it.
                        let at = pid.map(kernel_stacks).unwrap_or_default();
                        let _ = writeln!(log, "# the VMM did not exit after the guest powered off; its threads: {at}");
                        st.warnings.push(format!("the VMM did not exit within {} s after the guest powered off; killed (its threads then: {})", EXIT_GRACE.as_secs(), bounded(&at)));
                        let killed = Instant::now();
                        if !kill(&mut child).await {
                            note_unkillable(&mut st, &mut log, pid, column, round);
                            unkillable = Some(killed);
                            break;
                        }
                    }
                    _ => {
                        let after_s = if why == "stall" { last_progress.elapsed().as_secs() } else { start.elapsed().as_secs() };
                        warn!("{column} round {}: no I/O progress in {} for {after_s} s; killing the VM", round + 1, st.phase);
                        let mut device_owes = false;
                        let syms = launch.kernel.as_deref().and_then(crate::run::hang::kernel_symbols::Symbols::beside);
                        let state = if let Some(sock) = &launch.api_socket {
                            Some(hang_state(sock, syms.as_ref()).await)
                        } else if let Some(mon) = &launch.monitor {
                            Some(qemu_hang_state(mon, pid, syms.as_ref()).await)
                        } else {
                            None
                        };
                        if let Some((why, owes)) = state {
                            device_owes = owes;
                            warn!("{column} round {}: state at the hang: {why}", round + 1);
                            let _ = writeln!(log, "# state at the hang: {why}");
                            st.warnings.push(format!("state at the hang: {why}"));
                        }
                        progress.line(column, round, &format!("HUNG in {}, killed", st.phase), start.elapsed());
                        hung = Some(CellStatus::Hung { phase: st.phase.clone(), after_s, device_owes });
                        let killed = Instant::now();
                        if !kill(&mut child).await {
                            // Stuck in the host kernel: waiting longer
                            // would only kill it again and again.
                            note_unkillable(&mut st, &mut log, pid, column, round);
                            unkillable = Some(killed);
                            break;
                        }
                    }
                }
            },
            _ = ctx.cancel.changed() => {
                kill(&mut child).await;
                return Err(RunError::Interrupted);
            },
        }
    }
    let vmm_rc = exit.and_then(|e| e.code());
    let _ = writeln!(log, "# VMM exit: {exit:?}");
    if let Some(since) = unkillable {
        // The next cell waits for it to let go of the device.
        ctx.stuck = Some(StuckVmm::new(
            format!("{column} round {}", round + 1),
            child,
            since,
        ));
    }
    let status = hung.unwrap_or_else(|| judge(&st, vmm_rc));
    let counting = match (&launch.counting, &src) {
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
    Ok(CellResult {
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
        footprint: Some(footprint),
        wall_s: start.elapsed().as_secs_f64(),
        command: launch.display(),
        log: log_path,
    })
}

/// Our VMM's liveness gauges read twice, a second apart, and its vCPUs'
/// registers, with what they say (see [`crate::run::hang::our_vmm`]), and whether
/// the device owes the driver a request (never retried).
async fn hang_state(
    sock: &std::path::Path,
    syms: Option<&crate::run::hang::kernel_symbols::Symbols>,
) -> (String, bool) {
    let ep = crate::run::metrics::HttpSocket::new(sock);
    let first = match ep.text().await {
        Ok(t) => t,
        Err(e) => return (format!("the VMM's API did not answer ({e})"), false),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let then = ep.text().await.unwrap_or_default();
    let (a, b) = (
        crate::run::hang::our_vmm::parse(&first),
        crate::run::hang::our_vmm::parse(&then),
    );
    // Where the vCPUs are (our VMM's vm.vcpus; older builds have none).
    let vcpus = ep.body("/api/v1/vm.vcpus").await.unwrap_or_default();
    judge_hang(&a, &b, &vcpus, syms)
}

/// A hang judged from the gauges read a second apart (`a`, `b`) and the
/// vCPUs' answer `raw` (`vm.vcpus` JSON), the same for both VMMs: the
/// diagnosis, where the vCPUs are, and whether the device owes the
/// driver a request (see [`crate::run::hang::our_vmm`]).
fn judge_hang(
    a: &crate::run::hang::our_vmm::Gauges,
    b: &crate::run::hang::our_vmm::Gauges,
    raw: &str,
    syms: Option<&crate::run::hang::kernel_symbols::Symbols>,
) -> (String, bool) {
    let where_ = crate::run::hang::our_vmm::vcpus(raw, syms, host_symbols().as_ref());
    let verdict = crate::run::hang::our_vmm::owed(b, &where_, syms.is_some());
    let mut text = format!("{} [{:?}]", crate::run::hang::our_vmm::diagnose(a, b), b);
    if let Some(v) = &verdict {
        text = format!("{v}; {text}");
    }
    if !where_.is_empty() {
        let list: Vec<String> = where_.iter().map(|v| v.to_string()).collect();
        text += &format!("; vCPUs: {}", list.join("; "));
    } else if !raw.trim().is_empty() {
        text += &format!("; vCPUs: {}", raw.trim());
    }
    (text, verdict.is_some())
}

/// The host kernel's symbols (root reads real addresses in
/// /proc/kallsyms; elsewhere they are zeros and name nothing): they name
/// a vCPU address the guest's do not.
fn host_symbols() -> Option<crate::run::hang::kernel_symbols::Symbols> {
    std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .map(|t| crate::run::hang::kernel_symbols::Symbols::parse(&t))
}

/// Stock QEMU at a hang, through its monitor socket `mon`
/// ([`crate::run::hang::stock_qemu`]): its virtio-iommu's request queue, its vCPUs'
/// registers and stacks and their threads' CPU time over a second, read
/// and judged as ours are (see [`hang_state`]).
async fn qemu_hang_state(
    mon: &std::path::Path,
    pid: Option<u32>,
    syms: Option<&crate::run::hang::kernel_symbols::Symbols>,
) -> (String, bool) {
    let first = match crate::run::hang::stock_qemu::read(mon, pid).await {
        Ok(r) => r,
        Err(e) => return (format!("stock QEMU's monitor did not answer ({e})"), false),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let then = crate::run::hang::stock_qemu::read_gauges(mon, pid)
        .await
        .unwrap_or_default();
    let (text, owes) = judge_hang(&first.gauges, &then, &first.vcpus.to_string(), syms);
    (format!("stock QEMU: {text}"), owes)
}

/// What a VMM that SIGKILL does not end is reported as.
pub const UNKILLABLE: &str = "the VMM did not exit within 30 s of SIGKILL: it is stuck in the host's kernel (look for a soft lockup or hung task in the host's log); the cell is given up";

/// At most this much of a thread listing goes into a warning (the log
/// has all of it).
const WARNING_STACKS: usize = 600;

/// `s` cut to [`WARNING_STACKS`] bytes at a character boundary.
fn bounded(s: &str) -> String {
    if s.len() <= WARNING_STACKS {
        return s.to_string();
    }
    let mut end = WARNING_STACKS;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
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

/// SIGKILL the VMM and wait up to 30 s; whether it exited.
async fn kill(child: &mut tokio::process::Child) -> bool {
    let _ = child.start_kill();
    matches!(
        tokio::time::timeout(Duration::from_secs(30), child.wait()).await,
        Ok(Ok(_))
    )
}

/// Take one console line; true when it shows progress.
async fn on_line(
    line: &str,
    st: &mut Cell,
    src: &mut CounterSource,
    (kvm, brk): (
        Option<&crate::run::kvm_exits::KvmExits>,
        Option<&crate::run::host_trace::Settings>,
    ),
    (column, round, progress, start): (&str, u32, &Progress, Instant),
) -> bool {
    let m = match parse_line(line) {
        Ok(Some(m)) => m,
        Ok(None) => return false,
        Err(e) => {
            warn!("{column}: {e}");
            return false;
        }
    };
    match m {
        Marker::PhaseBegin(n) if is_breakdown_phase(&n) => {
            progress.line(
                column,
                round,
                &format!("{n}, untimed: the host's tracefs records the VMM's threads"),
                start.elapsed(),
            );
            breakdown_phase(&n, st, src, brk, column).await;
            st.phase = n;
        }
        Marker::PhaseEnd(n) if is_breakdown_phase(&n) => {
            st.phase = format!("after {n}");
        }
        Marker::PhaseBegin(n) if is_count_phase(&n) => {
            progress.line(
                column,
                round,
                &format!("{n}, untimed: counting with QEMU's trace events on"),
                start.elapsed(),
            );
            let go = match src {
                CounterSource::Qemu(q) => match q.begin().await {
                    Ok(c) => {
                        st.begin.insert(n.clone(), c);
                        true
                    }
                    Err(e) => {
                        debug!("{column} {n}: not counted: {e}");
                        false
                    }
                },
                _ => false,
            };
            answer(st, go).await;
            st.phase = n;
        }
        Marker::PhaseEnd(n) if is_count_phase(&n) => {
            if let (CounterSource::Qemu(q), Some(b)) = (&mut *src, st.begin.get(&n)) {
                match q.end(&n).await {
                    Ok(Some(end)) => {
                        st.phases.entry(n.clone()).or_default().device = Some(end.since(b));
                    }
                    // No trace at all: said once, at the cell's end.
                    Ok(None) => {}
                    Err(e) => warn!("{column} {n}: not counted: {e}"),
                }
            }
            st.phase = format!("after {n}");
        }
        Marker::PhaseBegin(n) => {
            progress.line(column, round, &n, start.elapsed());
            match src.snapshot().await {
                Ok(Some(c)) => {
                    st.begin.insert(n.clone(), c);
                }
                Ok(None) => {}
                Err(e) => warn!("{column} {n}: {e}"),
            }
            if let Some(Err(e)) = kvm.map(|k| k.clear()) {
                warn!("{column} {n}: {e}");
            }
            if let Some(c) = crate::run::cpu_time::CpuTimes::read_host() {
                st.cpu_begin.insert(n.clone(), c);
            }
            st.phase = n;
        }
        Marker::PhaseEnd(n) => {
            if let Some(k) = kvm {
                st.phases.entry(n.clone()).or_default().kvm_exits = Some(k.read());
            }
            if let (Some(end), Some(b)) = (
                crate::run::cpu_time::CpuTimes::read_host(),
                st.cpu_begin.get(&n),
            ) {
                st.phases.entry(n.clone()).or_default().host_cpu = Some(end.since(b));
            }
            match src.snapshot().await {
                Ok(Some(end)) => {
                    if let Some(b) = st.begin.get(&n) {
                        st.phases.entry(n.clone()).or_default().device = Some(end.since(b));
                    }
                }
                Ok(None) => {}
                Err(e) => warn!("{column} {n}: {e}"),
            }
            st.phase = format!("after {n}");
        }
        Marker::FioChunk(c) => st.fio_json.chunk(c),
        Marker::Fio(r) => match st.fio_json.complete(r) {
            Ok(r) => {
                let name = r.phase.clone();
                st.phases.entry(name).or_default().fio = Some(r);
            }
            Err(e) => {
                let why = format!("{e}; the phase has no fio result");
                warn!("{column}: {why}");
                st.warnings.push(why);
            }
        },
        Marker::Boot(b) => st.boot = Some(b),
        Marker::Error(e) => {
            warn!("{column}: guest error: {e}");
            st.errors.push(e);
        }
        Marker::Done(rc) => st.guest_rc = Some(rc),
        Marker::Attack(a) => {
            if !a.ok {
                warn!("{column}: attack {} could not run: {}", a.name, a.detail);
            }
            st.attacks.push(a);
        }
        Marker::Progress(r, w) => {
            let total = r + w;
            let moved = total > st.io_seen;
            st.io_seen = st.io_seen.max(total);
            return moved;
        }
    }
    true
}

/// A breakdown phase `n`, from its begin marker: a tracefs instance for
/// the VMM's threads (or `skip` to the guest, and a warning, when it cannot
/// be had), `go`, the recording over [`crate::run::host_trace::Settings`]'s
/// window (our VMM's counters read at its two ends), the analysis into the
/// phase's `breakdown`; the instance is gone when this returns.
async fn breakdown_phase(
    n: &str,
    st: &mut Cell,
    src: &mut CounterSource,
    brk: Option<&crate::run::host_trace::Settings>,
    column: &str,
) {
    let rec = match (brk, st.vmm_pid) {
        (Some(s), Some(pid)) => crate::run::host_trace::Recorder::create(s, pid)
            .map(|r| (s, r))
            .map_err(|e| e.to_string()),
        (None, _) => Err("the tool was not asked for --breakdown".into()),
        (_, None) => Err("the VMM's process id is unknown".into()),
    };
    let (s, mut rec) = match rec {
        Ok(r) => r,
        Err(e) => {
            let why = format!("{n}: not recorded: {e}");
            warn!("{column} {why}");
            st.warnings.push(why);
            answer(st, false).await;
            return;
        }
    };
    answer(st, true).await;
    tokio::time::sleep(s.delay).await;
    let before = src.snapshot().await.ok().flatten();
    let started = rec.start();
    if started.is_ok() {
        tokio::time::sleep(s.window).await;
    }
    let stopped = started.and_then(|()| rec.stop());
    let after = src.snapshot().await.ok().flatten();
    let device = before.zip(after).map(|(b, a)| a.since(&b));
    // The thread that made the most map/unmap ioctls serves the requests,
    // found the same way for both VMMs: a vCPU for stock QEMU and for
    // ours by default (`--viommu-kicks vcpu`), ours' device thread
    // `viommu` with `--viommu-kicks thread`.
    match stopped.and_then(|()| rec.collect(Serving::DmaCaller, device)) {
        Ok(b) => {
            if let Some(why) = &b.server_missing {
                let w = format!("{n}: no request-serving thread found: {why}");
                warn!("{column} {w}");
                st.warnings.push(w);
            }
            if b.missing_events() > 0 {
                let w = format!(
                    "{n}: the trace buffer lost or dropped {} event(s) (its counts and times are lower bounds{})",
                    b.missing_events(),
                    if b.cut {
                        "; the window ends where the first CPU's buffer filled"
                    } else {
                        ""
                    }
                );
                warn!("{column} {w}");
                st.warnings.push(w);
            }
            if let Some(why) = &b.pins_missing {
                debug!("{column} {n}: page pinning not traced: {why}");
            }
            st.phases.entry(n.to_string()).or_default().breakdown = Some(b);
        }
        Err(e) => {
            let why = format!("{n}: not recorded: {e}");
            warn!("{column} {why}");
            st.warnings.push(why);
        }
    }
    drop(rec);
}

/// Answer an untimed phase's begin marker on the guest's console: `go`
/// (the observer is on) or `skip`. A guest with no console input (not a
/// counting VMM) waits out its own timeout.
async fn answer(st: &mut Cell, go: bool) {
    let Some(c) = st.console.as_mut() else {
        return;
    };
    let word: &[u8] = if go { b"go\n" } else { b"skip\n" };
    if let Err(e) = async {
        c.write_all(word).await?;
        c.flush().await
    }
    .await
    {
        warn!("the guest's console input: {e}");
        st.console = None;
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
            crate::setup::preflight::GUEST_KERNEL_OPTIONS.join(", ")
        )),
        (_, None) => failed(format!("the VMM exited {rc} before the guest finished")),
        (_, Some(_)) if !st.errors.is_empty() => failed(st.errors.join("; ")),
        (_, Some(g)) if g != 0 => failed(format!("the guest finished with rc={g}")),
        _ if !st.phases.keys().any(|n| n.starts_with("verify-")) => {
            failed("no write+verify pass ran".into())
        }
        // The guest's end is the VMM's: power-off exits 0, a guest that
        // reboots (lab.end=reboot) 3 or 4 (our VMM's reset and triple
        // fault); anything else (a seccomp kill, 159; a crash) is the
        // VMM failing after a good run.
        _ if vmm_rc.is_some_and(|c| !matches!(c, 0 | 3 | 4)) => failed(format!(
            "the guest finished but the VMM exited {rc} (not 0, 3 or 4; see the log)"
        )),
        _ => CellStatus::Ok,
    }
}

#[cfg(test)]
mod tests;
