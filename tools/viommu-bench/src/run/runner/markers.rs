//! The guest's console lines as the cell runs: the state they build
//! ([`Cell`]) and what each marker does: phase begins and ends read the
//! counters, an untimed phase is answered on the console once its
//! observer is on, a breakdown phase is recorded.

use std::collections::{BTreeMap, HashMap};

use tokio::io::AsyncWriteExt;
use tracing::{debug, warn};

use crate::plan::{is_breakdown_phase, is_count_phase};
use crate::run::breakdown::Serving;
use crate::run::counter_source::CounterSource;
use crate::run::cpu_time::CpuTimes;
use crate::run::guest::{parse_line, AttackRecord, BootInfo, Marker};
use crate::run::host_trace::{self, Recorder};
use crate::run::kvm_exits::KvmExits;
use crate::run::metrics::DeviceCounters;
use crate::run::results::PhaseResult;

use super::progress::Progress;

/// The state of a cell as its lines come in.
#[derive(Debug, Default)]
pub struct Cell {
    /// The guest's boot record.
    pub boot: Option<BootInfo>,
    /// What each phase measured.
    pub phases: BTreeMap<String, PhaseResult>,
    /// The guest's errors.
    pub errors: Vec<String>,
    /// What went wrong but did not end the cell.
    pub warnings: Vec<String>,
    /// The guest's exit status, once it is done.
    pub guest_rc: Option<i32>,
    /// A guest crash seen on the console.
    pub crash: Option<String>,
    /// A stall the guest's kernel reported before its boot record.
    pub boot_stall: Option<String>,
    /// The phase the guest is in.
    pub phase: String,
    /// The device's counters at each phase's begin marker.
    pub begin: HashMap<String, DeviceCounters>,
    /// The host's CPU times at each phase's begin marker.
    pub cpu_begin: HashMap<String, CpuTimes>,
    /// The most I/O the guest has reported.
    pub io_seen: u64,
    /// What a hostile guest's attackers reported.
    pub attacks: Vec<AttackRecord>,
    /// The guest's serial console input (stock QEMU's stdin, when it
    /// counts): the answer to a counting phase's begin marker.
    pub console: Option<tokio::process::ChildStdin>,
    /// The VMM's process id (its threads are what a breakdown records).
    pub vmm_pid: Option<u32>,
    /// fio's JSON output of the run in flight, chunk by chunk.
    pub fio_json: crate::run::fio_chunks::Assembler,
}

/// What the markers act on besides the cell's state: the counters, the
/// host's observers, and where the run is (for its progress lines).
pub struct Observers<'a> {
    /// The device's counters.
    pub src: &'a mut CounterSource,
    /// KVM exit counting per phase (`--kvm-exits`).
    pub kvm: Option<&'a KvmExits>,
    /// The host's recording of the breakdown phases (`--breakdown`).
    pub brk: Option<&'a host_trace::Settings>,
    /// The cell's column.
    pub column: &'a str,
    /// The cell's round.
    pub round: u32,
    /// The run's progress lines.
    pub progress: &'a Progress,
    /// When the cell started.
    pub start: std::time::Instant,
}

/// Take one console line; true when it shows progress.
pub async fn on_line(line: &str, st: &mut Cell, o: &mut Observers<'_>) -> bool {
    let column = o.column;
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
            o.say(&format!(
                "{n}, untimed: the host's tracefs records the VMM's threads"
            ));
            breakdown_phase(&n, st, o.src, o.brk, column).await;
            st.phase = n;
        }
        Marker::PhaseEnd(n) if is_breakdown_phase(&n) => {
            st.phase = format!("after {n}");
        }
        Marker::PhaseBegin(n) if is_count_phase(&n) => count_begin(n, st, o).await,
        Marker::PhaseEnd(n) if is_count_phase(&n) => count_end(n, st, o).await,
        Marker::PhaseBegin(n) => phase_begin(n, st, o).await,
        Marker::PhaseEnd(n) => phase_end(n, st, o).await,
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

impl Observers<'_> {
    /// A progress line saying the cell is at `what`.
    fn say(&self, what: &str) {
        self.progress
            .line(self.column, self.round, what, self.start.elapsed());
    }
}

/// A counting phase begins: QEMU's trace events on, its counters read,
/// and the guest told `go` (or `skip` when they could not be turned on).
async fn count_begin(n: String, st: &mut Cell, o: &mut Observers<'_>) {
    let column = o.column;
    o.say(&format!(
        "{n}, untimed: counting with QEMU's trace events on"
    ));
    let go = match o.src {
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

/// A counting phase ends: QEMU's trace events off, the phase's count the
/// trace's gain.
async fn count_end(n: String, st: &mut Cell, o: &mut Observers<'_>) {
    let column = o.column;
    if let (CounterSource::Qemu(q), Some(b)) = (&mut *o.src, st.begin.get(&n)) {
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

/// A timed phase begins: the device's counters, the KVM exits cleared,
/// the host's CPU times.
async fn phase_begin(n: String, st: &mut Cell, o: &mut Observers<'_>) {
    let column = o.column;
    o.say(&n);
    match o.src.snapshot().await {
        Ok(Some(c)) => {
            st.begin.insert(n.clone(), c);
        }
        Ok(None) => {}
        Err(e) => warn!("{column} {n}: {e}"),
    }
    if let Some(Err(e)) = o.kvm.map(|k| k.clear()) {
        warn!("{column} {n}: {e}");
    }
    if let Some(c) = CpuTimes::read_host() {
        st.cpu_begin.insert(n.clone(), c);
    }
    st.phase = n;
}

/// A timed phase ends: its KVM exits, host CPU time and device counts,
/// each the gain since its begin.
async fn phase_end(n: String, st: &mut Cell, o: &mut Observers<'_>) {
    let column = o.column;
    if let Some(k) = o.kvm {
        st.phases.entry(n.clone()).or_default().kvm_exits = Some(k.read());
    }
    if let (Some(end), Some(b)) = (CpuTimes::read_host(), st.cpu_begin.get(&n)) {
        st.phases.entry(n.clone()).or_default().host_cpu = Some(end.since(b));
    }
    match o.src.snapshot().await {
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

/// A breakdown phase `n`, from its begin marker: a tracefs instance for
/// the VMM's threads (or `skip` to the guest, and a warning, when it cannot
/// be had), `go`, the recording over [`crate::run::host_trace::Settings`]'s
/// window (our VMM's counters read at its two ends), the analysis into the
/// phase's `breakdown`; the instance is gone when this returns.
async fn breakdown_phase(
    n: &str,
    st: &mut Cell,
    src: &mut CounterSource,
    brk: Option<&host_trace::Settings>,
    column: &str,
) {
    let rec = match (brk, st.vmm_pid) {
        (Some(s), Some(pid)) => Recorder::create(s, pid)
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
