//! The command itself: flags, preflight, image, binding, the cells in
//! order, and the report; `main.rs` only calls [`main`].

mod announce;
mod cells;
mod conclude;
mod partial;
mod prepare;
mod restore;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tokio::sync::watch;

use crate::cli::{Args, Config};

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
    let args = Args::parse();
    if let Some(bdf) = &args.restore {
        return ExitCode::from(restore::main(&args, bdf));
    }
    let cfg = match args.validate() {
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

/// Ctrl-C, SIGTERM and SIGHUP flip the returned flag; the run then stops
/// its VM, writes what it has and restores the drive. After SIGHUP (the
/// terminal or the SSH session is gone) stdout and stderr go to
/// `hangup_log`, so the cleanup's messages are kept and no write to a
/// dead terminal fails.
fn watch_signals(hangup_log: PathBuf) -> watch::Receiver<bool> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let recv = |kind: SignalKind| {
            let mut s = signal(kind).ok();
            async move {
                match s.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
        };
        let hup = tokio::select! {
            _ = tokio::signal::ctrl_c() => false,
            _ = recv(SignalKind::terminate()) => false,
            _ = recv(SignalKind::hangup()) => true,
        };
        if hup {
            redirect_output(&hangup_log);
        }
        eprintln!("[viommu-bench] signal received: stopping the VM, writing partial results, restoring the drive");
        let _ = tx.send(true);
    });
    rx
}

/// Points stdout and stderr at `log` (appended), else at /dev/null.
fn redirect_output(log: &Path) {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .or_else(|_| std::fs::OpenOptions::new().write(true).open("/dev/null"));
    if let Ok(f) = file {
        // SAFETY: dup2 onto the process's own stdout and stderr; `f`
        // stays open until both are duplicated.
        unsafe {
            libc::dup2(f.as_raw_fd(), 1);
            libc::dup2(f.as_raw_fd(), 2);
        }
    }
}

/// The run: prepare, say what will happen, arm the host, run the cells,
/// report, give the drive back; the exit status.
async fn run(mut cfg: Config) -> u8 {
    if !cfg.args.report_from.is_empty() {
        return conclude::report_only(&cfg, &cfg.args.report_from);
    }
    // 1. Prerequisites, before anything changes.
    let p = match prepare::prepare(&mut cfg) {
        Ok(p) => p,
        Err(code) => return code,
    };
    // 2. Say what will happen.
    let what = announce::what_will_happen(&cfg, &p);
    if cfg.args.dry_run {
        return announce::dry_run(&cfg, &p, &what);
    }
    eprintln!("{what}");
    let cancel = watch_signals(p.out.join("hangup.log"));
    // 3. Directories, tracing, pinning; bind (restored when `guard`
    //    drops, whatever happens below).
    let mut armed = match prepare::arm(&cfg, &p) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let mut partial = match partial::PartialFile::create(&p.out, &partial_header(&cfg, &p)) {
        Ok(f) => {
            tracing::info!("each cell is appended to {} as it ends", f.path().display());
            Some(f)
        }
        Err(e) => {
            tracing::warn!("{e}: no partial results file; a run cut short leaves no results");
            None
        }
    };
    if cfg.args.serial_report {
        match serde_json::to_string(&p.provenance) {
            Ok(j) => println!("{} {j}", partial::PROVENANCE_MARK),
            Err(e) => tracing::warn!("the provenance as JSON: {e}"),
        }
    }
    // 4. Every cell, each appended to the partial file as it ends.
    let t0 = Instant::now();
    let ran = cells::run_cells(&cfg, &p, &armed, cancel, &mut partial).await;
    let _ = std::fs::remove_dir_all(&p.run_dir);
    // 5. Report first: giving the drive back can block on a VMM stuck in
    //    the kernel, and the results must not wait for it.
    let code = conclude::conclude(
        &cfg,
        &p.out,
        (p.pre.facts, p.host, p.provenance),
        ran.results,
        p.cells.len(),
        p.started,
        t0.elapsed().as_secs_f64(),
        ran.interrupted,
        armed.created.clone(),
    );
    // 6. Give the drive back, bounded.
    if let Some(mut g) = armed.guard.take() {
        if let Err(e) = g.restore() {
            eprintln!("viommu-bench: {e}");
            return if code == 0 { 1 } else { code };
        }
    }
    code
}

/// The partial file's first line: this run's settings.
fn partial_header(cfg: &Config, p: &prepare::Prepared) -> partial::Header {
    partial::Header {
        viommu_bench_partial: partial::RunInfo {
            tool: conclude::tool_name(),
            command: std::env::args().collect(),
            started: crate::run::results::utc_timestamp(p.started),
            device: cfg.bdf.clone(),
            columns: cfg.columns.iter().map(|c| c.tag.clone()).collect(),
            cells_planned: p.cells.len(),
            settings: conclude::settings(cfg, &p.pre.facts),
            provenance: Some(p.provenance.clone()),
        },
    }
}
