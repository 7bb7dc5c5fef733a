//! The command itself: flags, preflight, image, binding, the cells in
//! order, and the report; `main.rs` only calls [`main`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::cli::{Args, Config};
use crate::columns::{launch, Kernel, LaunchInputs};
use crate::plan::{self, rotation_from};
use crate::report::chart;
use crate::report::document::Results;
use crate::report::markdown::render_markdown;
use crate::report::summarize::summarize;
use crate::report::text::render_text;
use crate::run::faults::{apply_bar0, name_unretried_fault, retry_reason};
use crate::run::results::{utc_timestamp, CellResult, CellStatus, Place};
use crate::run::runner::{run_cell, CellCtx, Progress, RunError};
use crate::setup::bind::BindGuard;
use crate::setup::image::{self, ImageInputs};
use crate::setup::preflight::{Checks, Outcome};
use crate::setup::sysfs::Root;
use crate::units::human_duration;

/// The command: parse the flags, then run the plan or re-report saved results.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("viommu_bench=info")),
        )
        .init();
    let cfg = match Args::parse().validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("viommu-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("viommu-bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(rt.block_on(run(cfg)))
}

/// `vmm` next to this program, else the name for a PATH lookup.
fn default_vmm() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("vmm")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("vmm"))
}

/// Ctrl-C and SIGTERM flip the returned flag; the run then stops its VM,
/// restores the drive and writes what it has.
fn watch_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term_recv = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term_recv => {}
        }
        eprintln!("[viommu-bench] signal received: stopping the VM, restoring the drive, writing partial results");
        let _ = tx.send(true);
    });
    rx
}

fn preflight(cfg: &Config) -> Outcome {
    let a = &cfg.args;
    let mut kernels = Vec::new();
    if cfg.columns.iter().any(|c| c.kernel == Kernel::Stock) {
        if let Some(k) = &a.kernel_stock {
            kernels.push(("--kernel-stock", k.clone()));
        }
    }
    if cfg.columns.iter().any(|c| c.kernel == Kernel::Patched) {
        if let Some(k) = &a.kernel_patched {
            kernels.push(("--kernel-patched", k.clone()));
        }
    }
    for (name, path) in &cfg.kernels_named {
        if cfg
            .columns
            .iter()
            .any(|c| c.kernel == Kernel::Named(name.clone()))
        {
            kernels.push(("--kernel", path.clone()));
        }
    }
    if let Some(i) = &a.initramfs {
        kernels.push(("--initramfs", i.clone()));
    }
    Checks {
        root: Root::new(&a.root),
        bdf: cfg.bdf.clone(),
        consent: a.destroy_data.clone(),
        no_bind: a.no_bind,
        qemu: cfg.uses_qemu().then(|| a.qemu.clone()),
        vmm: cfg
            .uses_ours()
            .then(|| a.vmm.clone().unwrap_or_else(default_vmm)),
        build_image: a.initramfs.is_none(),
        kernels,
        guest_memory: cfg.memory_mib << 20,
        path_env: std::env::var_os("PATH"),
        kvm_exits: a.kvm_exits,
        breakdown: a.breakdown,
        block_sizes: cfg.bs.iter().map(|b| (b.label.clone(), b.bytes)).collect(),
    }
    .run()
}

fn out_dir(cfg: &Config, now: u64) -> PathBuf {
    cfg.args.out.clone().unwrap_or_else(|| {
        let ts = utc_timestamp(now)
            .replace([':', '-'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_string();
        PathBuf::from("viommu-bench-results").join(ts)
    })
}

/// The guest image: --initramfs, or built (cached) from this host's programs.
/// In a dry run nothing is written: the path it would have.
fn guest_image(cfg: &Config, pre: &Outcome, dry: bool) -> Result<PathBuf, String> {
    if let Some(i) = &cfg.args.initramfs {
        return Ok(i.clone());
    }
    let cache = cfg.args.cache.clone().unwrap_or_else(image::default_cache);
    let (Some(bb), Some(fio)) = (&pre.tools.busybox, &pre.tools.fio) else {
        return Ok(cache.join("initramfs-<needs fio and busybox>.cpio"));
    };
    let inputs = ImageInputs::gather(bb, fio).map_err(|e| e.to_string())?;
    if dry {
        let key = inputs.key().map_err(|e| e.to_string())?;
        return Ok(cache.join(format!("initramfs-{key}.cpio")));
    }
    image::build_or_reuse(&inputs, &cache).map_err(|e| e.to_string())
}

async fn run(mut cfg: Config) -> u8 {
    if !cfg.args.report_from.is_empty() {
        return report_only(&cfg, &cfg.args.report_from);
    }
    let cancel = watch_signals();
    let a = &cfg.args;
    let dry = a.dry_run;
    let root = Root::new(&a.root);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    // 1. Prerequisites, before anything changes.
    let pre = preflight(&cfg);
    for p in &pre.problems {
        eprintln!("viommu-bench: {p}");
    }
    if !pre.problems.is_empty() && !dry {
        eprintln!(
            "viommu-bench: {} prerequisite(s) missing; nothing was changed",
            pre.problems.len()
        );
        return 2;
    }
    let facts = &pre.facts;
    cfg.drive_bytes = facts.namespace_bytes;
    let mut host = crate::setup::host::HostInfo::gather(
        &root,
        &cfg.bdf,
        pre.tools.qemu.as_deref().filter(|_| cfg.uses_qemu()),
    );
    // --pin: every VMM started from here on inherits this thread's CPUs.
    let pin = if a.pin {
        match crate::setup::host::pin_cpus(&root, &cfg.bdf) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return 2;
            }
        }
    } else {
        None
    };
    host.pinned_cpus = pin.as_ref().map(|(list, _)| list.clone());
    let out = out_dir(&cfg, started);
    let initramfs = match guest_image(&cfg, &pre, dry) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("viommu-bench: guest image: {e}");
            return 2;
        }
    };
    let run_dir = std::env::temp_dir().join(format!("viommu-bench-{}", std::process::id()));
    let inputs = LaunchInputs {
        qemu: pre.tools.qemu.clone().unwrap_or_else(|| a.qemu.clone()),
        vmm: pre
            .tools
            .vmm
            .clone()
            .unwrap_or_else(|| a.vmm.clone().unwrap_or_else(default_vmm)),
        kernel_stock: a
            .kernel_stock
            .clone()
            .unwrap_or_else(|| "<--kernel-stock>".into()),
        kernel_patched: a
            .kernel_patched
            .clone()
            .unwrap_or_else(|| "<--kernel-patched>".into()),
        kernels_named: cfg.kernels_named.clone(),
        initramfs,
        bdf: cfg.bdf.clone(),
        cpus: a.guest_cpus,
        memory_mib: cfg.memory_mib,
        count_runtime: a.count_runtime,
        breakdown: a.breakdown,
    };
    let cmdline = plan::guest_cmdline(&cfg, facts.logical_block_size);
    let cells = rotation_from(cfg.columns.len(), a.first_round - 1, a.rounds);
    let phases = plan::phases(&cfg);
    let estimate = plan::estimate_cell(&cfg);
    let total = plan::estimate_cells(&cfg, &cells);
    let counting = cfg.columns.iter().any(|c| c.counts_in_pass()) && a.count_runtime > 0;

    // 2. Say what will happen.
    let drive = format!(
        "{}{}{}",
        cfg.bdf,
        facts
            .model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default(),
        facts
            .serial
            .as_deref()
            .map(|s| format!(" serial {s}"))
            .unwrap_or_default()
    );
    let now_on = facts.driver.as_deref().unwrap_or("no driver");
    let binding = if a.no_bind {
        "use it as bound (--no-bind)".to_string()
    } else if now_on == "vfio-pci" {
        "use it on vfio-pci, where it already is".to_string()
    } else {
        format!(
            "bind it to vfio-pci (from {now_on}; given back at the end, also on failure or Ctrl-C)"
        )
    };
    let pinning = match &host.pinned_cpus {
        Some(list) => match host.numa_node.filter(|n| *n >= 0) {
            Some(n) => format!("; every VMM pinned to CPUs {list} (NUMA node {n} of the drive)"),
            None => format!(
                "; every VMM pinned to CPUs {list} (the drive reports no NUMA node: every online CPU)"
            ),
        },
        None => String::new(),
    };
    let count_note = if counting {
        format!(
            "; stock QEMU's vIOMMU VMs then run each again for {} s, untimed, with its trace on ({} more each; its counts come from these)",
            a.count_runtime,
            human_duration(plan::count_pass(&cfg))
        )
    } else {
        String::new()
    };
    let count_note = if a.breakdown {
        format!(
            "{count_note}; with --breakdown every vIOMMU VM then runs each again for {} s, untimed, while the host's tracefs records its VMM's threads ({} more each)",
            a.count_runtime,
            human_duration(plan::breakdown_pass(&cfg))
        )
    } else {
        count_note
    };
    let what = format!(
        "viommu-bench will: {binding}; DESTROY the data on {drive} with fio writes; boot {} VMs ({} columns x {} rounds; {} per VM: write+verify, then {} {} run(s) of {} s{count_note}); about {} in all; results in {}{pinning}",
        cells.len(),
        cfg.columns.len(),
        a.rounds,
        human_duration(estimate),
        phases.len(),
        a.rw.as_str(),
        a.runtime,
        human_duration(total),
        out.display()
    );
    let what = format!("{what}; {}", plan::precondition_note(&cfg));
    if dry {
        println!("DRY RUN: nothing is bound, built or started.\n{what}\n");
        println!("guest kernel command line: {cmdline}");
        println!("guest image: {}", inputs.initramfs.display());
        println!("\ncolumns:");
        for c in &cfg.columns {
            let l = launch(c, &inputs, &cmdline, &run_dir, &format!("{}-r1", c.tag));
            println!("  {}:\n    {}", c.tag, l.display());
        }
        println!("\norder:");
        for r in a.first_round - 1..a.first_round - 1 + a.rounds {
            let order: Vec<&str> = cells
                .iter()
                .filter(|c| c.round == r)
                .map(|c| cfg.columns[c.column].tag.as_str())
                .collect();
            println!("  round {}: {}", r + 1, order.join(", "));
        }
        // The phase names, each as NAME makes it.
        let names = |name: fn(&str) -> String| {
            phases
                .iter()
                .map(|p| name(&p.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("\nmeasured phases per VM: {}", names(|n| n.to_string()));
        if counting {
            println!(
                "untimed counting phases of stock QEMU's vIOMMU VMs ({} s each, its trace on; nothing is traced in the measured ones): {}",
                a.count_runtime,
                names(crate::plan::count_phase_name)
            );
        }
        if a.breakdown {
            println!(
                "untimed breakdown phases of every vIOMMU VM ({} s each, the host's tracefs recording its VMM's threads over the middle half; nothing is traced in the measured ones): {}",
                a.count_runtime,
                names(crate::plan::breakdown_phase_name)
            );
        }
        if !pre.problems.is_empty() {
            println!(
                "\n{} prerequisite(s) missing (see above): a real run would stop here.",
                pre.problems.len()
            );
            return 2;
        }
        return 0;
    }
    eprintln!("{what}");

    // What this run creates of --out, handed to the sudo user at the end.
    let created = crate::setup::host::first_missing(&out.join("logs"));
    for d in [out.join("logs"), run_dir.clone()] {
        if let Err(e) = std::fs::create_dir_all(&d) {
            eprintln!(
                "viommu-bench: cannot create {}: {e}; pick another --out",
                d.display()
            );
            return 2;
        }
    }

    // KVM exits per phase, when asked (triggers removed when this drops),
    // before the drive is bound: a kernel without them changes nothing.
    let kvm_exits = if a.kvm_exits {
        match crate::run::kvm_exits::KvmExits::install(None) {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return 2;
            }
        }
    } else {
        None
    };

    // --breakdown: the host's tracefs, checked (and mounted) before the
    // drive is bound; each breakdown phase makes and removes its instance.
    let breakdown = if a.breakdown {
        let s = crate::run::host_trace::Settings::new(a.count_runtime);
        if let Err(e) = s.check() {
            eprintln!("viommu-bench: {e}");
            return 2;
        }
        Some(s)
    } else {
        None
    };

    if let Some((list, cpus)) = &pin {
        if let Err(e) = crate::setup::host::pin_to(cpus) {
            eprintln!("viommu-bench: --pin: pinning to CPUs {list}: {e}; drop --pin");
            return 2;
        }
    }

    // 3. Bind (restored when `guard` drops, whatever happens below).
    let mut guard = None;
    if !a.no_bind {
        match BindGuard::bind(&root, &cfg.bdf, facts.driver.as_deref()) {
            Ok(g) => guard = Some(g),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return 1;
            }
        }
    }

    // 4. Every cell.
    let t0 = Instant::now();
    let mut progress = Progress::new(cells.len(), a.rounds, total / (cells.len().max(1) as u32));
    progress.first_round = a.first_round;
    let mut ctx = CellCtx {
        stall: Duration::from_secs(a.stall_seconds),
        bound: plan::cell_bound(&cfg),
        log_dir: &out.join("logs"),
        cancel: cancel.clone(),
        kvm_exits: kvm_exits.as_ref(),
        breakdown: breakdown.as_ref(),
        stuck: None,
    };
    let mut results = Vec::new();
    let mut interrupted = *cancel.borrow();
    // Which host boot the cells ran on, for the report's order table.
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    for (index, cell) in cells.iter().enumerate() {
        if interrupted {
            break;
        }
        let col = &cfg.columns[cell.column];
        let l = launch(
            col,
            &inputs,
            &cmdline,
            &run_dir,
            &format!("{}-r{}", col.tag, cell.round + 1),
        );
        let mut earlier: Vec<String> = Vec::new();
        let outcome = loop {
            let mut r = match run_cell(&l, &col.tag, cell.round, &mut ctx, &progress).await {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            apply_bar0(&mut r, col, facts.bar0.as_deref());
            r.place = Some(Place {
                boot: boot_id.clone(),
                index: index as u32,
            });
            let retry = (earlier.len() < a.retries as usize)
                .then(|| {
                    retry_reason(&r, col.vmm).or_else(|| match &r.status {
                        CellStatus::Hung {
                            phase,
                            after_s,
                            device_owes: false,
                        } if a.retry_hung => Some(format!(
                            "the guest hung in {phase} (no I/O for {after_s} s; --retry-hung)"
                        )),
                        _ => None,
                    })
                })
                .flatten();
            let Some(mut why) = retry else {
                name_unretried_fault(&mut r, col.vmm);
                r.warnings.append(&mut earlier);
                break Ok(r);
            };
            // A hang's diagnosis stays with the attempt it was made of:
            // the lab counts hangs by kind over every attempt.
            if let Some(state) = r
                .warnings
                .iter()
                .find(|w| w.starts_with("state at the hang"))
            {
                why = format!("{why}; {state}");
            }
            // Keep the first attempt's log next to the new one.
            let kept = r.log.with_file_name(format!(
                "{}-r{}-attempt{}.log",
                col.tag,
                cell.round + 1,
                earlier.len() + 1
            ));
            let _ = std::fs::rename(&r.log, &kept);
            warn!(
                "{} round {}: {why}; running it again (log of this attempt: {})",
                col.tag,
                cell.round + 1,
                kept.display()
            );
            if a.serial_report {
                print_log(
                    &format!(
                        "{}-r{} attempt {}",
                        col.tag,
                        cell.round + 1,
                        earlier.len() + 1
                    ),
                    &kept,
                );
            }
            earlier.push(format!(
                "{} ({why}); ran it again (log {})",
                crate::report::summarize::retry_warning_head(earlier.len() + 1),
                kept.display()
            ));
        };
        match outcome {
            Ok(r) => {
                if a.serial_report {
                    serial_cell(&r);
                }
                match &r.status {
                    CellStatus::Ok => info!(
                        "{} round {}: done in {:.0} s",
                        col.tag,
                        cell.round + 1,
                        r.wall_s
                    ),
                    CellStatus::Hung { phase, .. } => warn!(
                        "{} round {}: hung in {phase}; log {}",
                        col.tag,
                        cell.round + 1,
                        r.log.display()
                    ),
                    CellStatus::Failed { reason, .. } => warn!(
                        "{} round {}: failed: {reason}; log {}",
                        col.tag,
                        cell.round + 1,
                        r.log.display()
                    ),
                }
                results.push(r);
            }
            Err(RunError::Interrupted) => interrupted = true,
            Err(e) => {
                error!("{e}");
                if a.serial_report && matches!(e, RunError::StuckVmm { .. }) {
                    // The lab runs this host's unfinished cells in a fresh one.
                    println!(
                        "@@LAB-HOST-STUCK@@ {}",
                        serde_json::json!({ "why": e.to_string() })
                    );
                }
                break;
            }
        }
        if let Some(t) = &l.trace {
            // QEMU traces grow large; the counts are in the results.
            let _ = std::fs::remove_file(t);
        }
        progress.done += 1;
    }
    let _ = std::fs::remove_dir_all(&run_dir);

    // 5. Give the drive back before writing anything else.
    if let Some(mut g) = guard.take() {
        g.restore();
    }

    // 6. Report.
    conclude(
        &cfg,
        &out,
        (facts.clone(), host),
        results,
        cells.len(),
        started,
        t0.elapsed().as_secs_f64(),
        interrupted,
        created,
    )
}

/// `@@LAB-CELL@@ {json}` for a caller reading stdout, and the log of a cell
/// that did not end well.
fn serial_cell(r: &CellResult) {
    match serde_json::to_string(r) {
        Ok(j) => println!("@@LAB-CELL@@ {j}"),
        Err(e) => eprintln!("viommu-bench: cell {} as JSON: {e}", r.column),
    }
    // A VMM that would not exit is shown too: its log says what it did
    // last, the warnings where its threads were.
    let stuck = r
        .warnings
        .iter()
        .any(|w| w.starts_with(crate::run::runner::UNKILLABLE));
    if r.status != CellStatus::Ok || stuck {
        print_log(&format!("{}-r{}", r.column, r.round + 1), &r.log);
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

fn print_log(name: &str, log: &Path) {
    println!("---- guest {name} failed; its serial log and VMM output follow ----");
    match std::fs::read(log) {
        Ok(b) => print!("{}", String::from_utf8_lossy(&b)),
        Err(e) => println!("({}: {e})", log.display()),
    }
    println!("---- end of guest {name} log ----");
}

/// The run's settings, for results.json.
fn settings(
    cfg: &Config,
    facts: &crate::setup::preflight::DeviceFacts,
) -> std::collections::BTreeMap<String, String> {
    let a = &cfg.args;
    let join = |v: Vec<String>| v.join(",");
    [
        ("mode", a.mode.as_str().to_string()),
        ("rw", a.rw.as_str().to_string()),
        ("bs", join(cfg.bs.iter().map(|b| b.label.clone()).collect())),
        ("iodepth", a.iodepth.to_string()),
        (
            "numjobs",
            join(cfg.numjobs.iter().map(|n| n.to_string()).collect()),
        ),
        ("runtime_s", a.runtime.to_string()),
        ("ramp_s", a.ramp.to_string()),
        ("count_runtime_s", a.count_runtime.to_string()),
        ("breakdown", a.breakdown.to_string()),
        ("rounds", a.rounds.to_string()),
        ("guest_cpus", a.guest_cpus.to_string()),
        ("guest_memory_mib", cfg.memory_mib.to_string()),
        ("stall_seconds", a.stall_seconds.to_string()),
        ("pin", a.pin.to_string()),
        ("precondition", a.precondition.as_str().to_string()),
        (
            "precondition_bytes",
            match (a.precondition, plan::precondition_bytes(cfg)) {
                (crate::cli::Precondition::None, _) => "0".into(),
                (_, Some(b)) => b.to_string(),
                (_, None) => "unknown".into(),
            },
        ),
        (
            "guest_cmdline",
            plan::guest_cmdline(cfg, facts.logical_block_size),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Summary, files and table of `cells`; the exit status (0: `expected`
/// cells, all fine; 1: some hung or failed; 130: interrupted).
#[allow(clippy::too_many_arguments)]
fn conclude(
    cfg: &Config,
    out: &Path,
    (facts, host): (
        crate::setup::preflight::DeviceFacts,
        crate::setup::host::HostInfo,
    ),
    cells: Vec<CellResult>,
    expected: usize,
    started: u64,
    elapsed_s: f64,
    interrupted: bool,
    created: Option<PathBuf>,
) -> u8 {
    let a = &cfg.args;
    let phases = plan::phases(cfg);
    let mut summary = summarize(&cfg.columns, &phases, &cells, cfg.baseline, a.rounds);
    summary.lead = a.lead.clone();
    let doc = Results {
        tool: format!("viommu-bench {}", env!("CARGO_PKG_VERSION")),
        command: std::env::args().collect(),
        started: utc_timestamp(started),
        host_kernel: Root::new(&a.root)
            .read_trim("/proc/sys/kernel/osrelease")
            .unwrap_or_default(),
        host,
        device: cfg.bdf.clone(),
        settings: settings(cfg, &facts),
        device_facts: facts,
        columns: cfg.columns.clone(),
        cells,
        summary,
        elapsed_s,
        interrupted,
    };
    let code = match std::fs::create_dir_all(out)
        .map_err(|e| format!("cannot create {}: {e}; pick another --out", out.display()))
        .and_then(|()| write_outputs(&doc, out))
    {
        Ok(()) => {
            if interrupted {
                130
            } else if doc.cells.iter().all(|c| c.status == CellStatus::Ok)
                && doc.cells.len() == expected
            {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("viommu-bench: {e}");
            1
        }
    };
    if let Some((uid, gid)) = crate::setup::host::sudo_user() {
        hand_over(out, created.as_deref(), uid, gid);
    }
    print!("{}", render_text(&doc.summary));
    code
}

/// Under sudo: what this run wrote in `out` (the directories it created,
/// `created`, and the files it wrote) becomes the invoking user's, not
/// root's.
fn hand_over(out: &Path, created: Option<&Path>, uid: u32, gid: u32) {
    let files = ["results.json", "table.md", "chart.png"].map(|f| out.join(f));
    for p in created
        .map(Path::to_path_buf)
        .into_iter()
        .chain(files.into_iter().filter(|f| f.exists()))
    {
        if let Err(e) = crate::setup::host::chown_tree(&p, uid, gid) {
            warn!(
                "cannot give {} to uid {uid} (SUDO_UID): {e}; it stays root's",
                p.display()
            );
        }
    }
}

/// `--report-from`: the cells of the FILEs (each a results.json, or lines
/// holding one cell's JSON each, `@@LAB-CELL@@` prefixes allowed; a later
/// cell of the same column and round replaces an earlier one) as a
/// finished run; a later file's rounds are numbered after the earlier
/// files'.
fn report_only(cfg: &Config, files: &[PathBuf]) -> u8 {
    let mut cells: Vec<CellResult> = Vec::new();
    for file in files {
        let parsed = std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_cells(&t));
        let mut more = match parsed {
            Ok(c) => c,
            Err(e) => {
                eprintln!("viommu-bench: --report-from {}: {e}", file.display());
                return 2;
            }
        };
        let first = cells.iter().map(|c| c.round + 1).max().unwrap_or(0);
        for c in &mut more {
            c.round += first;
        }
        cells.append(&mut more);
    }
    let elapsed = cells.iter().map(|c| c.wall_s).sum();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = out_dir(cfg, now);
    let created = crate::setup::host::first_missing(&out);
    let expected = cfg.columns.len() * cfg.args.rounds as usize;
    conclude(
        cfg,
        &out,
        (Default::default(), Default::default()),
        cells,
        expected,
        now,
        elapsed,
        false,
        created,
    )
}

/// The cells in a results.json or in cell lines.
fn parse_cells(text: &str) -> Result<Vec<CellResult>, String> {
    if let Ok(doc) = serde_json::from_str::<Results>(text) {
        return Ok(doc.cells);
    }
    // Marked lines among other output (a console), else one cell a line.
    let marked = text.contains("@@LAB-CELL@@");
    let mut cells: Vec<CellResult> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        let json = match line.split_once("@@LAB-CELL@@") {
            Some((_, j)) => j.trim(),
            None if marked => continue,
            None => line,
        };
        if json.is_empty() {
            continue;
        }
        let c: CellResult =
            serde_json::from_str(json).map_err(|e| format!("line {}: not a cell: {e}", i + 1))?;
        cells.retain(|x| (x.column.as_str(), x.round) != (c.column.as_str(), c.round));
        cells.push(c);
    }
    Ok(cells)
}

fn write_outputs(doc: &Results, out: &Path) -> Result<(), String> {
    let w = |name: &str, body: &[u8]| {
        let p = out.join(name);
        std::fs::write(&p, body)
            .map_err(|e| format!("writing {}: {e}; pick another --out", p.display()))
    };
    let json = serde_json::to_string_pretty(doc).map_err(|e| format!("results.json: {e}"))?;
    w("results.json", json.as_bytes())?;
    let title = format!(
        "viommu-bench on {} ({}), {}{}",
        doc.device,
        doc.device_facts.model.as_deref().unwrap_or("NVMe"),
        doc.started,
        if doc.interrupted { ", INTERRUPTED" } else { "" }
    );
    let mut md = render_markdown(&doc.summary, &title);
    md += &format!(
        "\nCommand: `{}` ({:.0} s).\n",
        doc.command.join(" "),
        doc.elapsed_s
    );
    for c in doc.cells.iter().filter(|c| c.status != CellStatus::Ok) {
        md += &format!(
            "\n- {} round {}: {:?} (log `{}`)\n",
            c.column,
            c.round + 1,
            c.status,
            c.log.display()
        );
    }
    w("table.md", md.as_bytes())?;
    let labels = chart::load_font(&chart::FONT_CANDIDATES);
    if !labels {
        warn!(
            "no TrueType font found ({}); chart.png has no text",
            chart::FONT_CANDIDATES.join(", ")
        );
    }
    if let Err(e) = chart::write_chart(&doc.summary, &out.join("chart.png"), labels) {
        warn!("{e}");
    }
    eprintln!(
        "[viommu-bench] wrote {0}/results.json, {0}/table.md, {0}/chart.png, logs in {0}/logs",
        out.display()
    );
    Ok(())
}
