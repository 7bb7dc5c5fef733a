//! `vmm`: boot a Linux guest on KVM with a PCI segment, ACPI and a serial
//! console, a virtio-iommu and VFIO passthrough (see README.md).
//!
//! Exit codes: 0 guest powered off (or API shutdown), 3 guest reset
//! (reboot), 4 triple fault, 1 VMM error, 2 bad command line.

use std::process::ExitCode;

use clap::Parser;
use vmm::devices::exit::ExitReason;
use vmm::{cli, machine};

/// One line: the error and its causes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    if let Some(kind) = args.seccomp_selftest {
        let policy = vmm::seccomp::Policy {
            enabled: args.seccomp,
        };
        // Returns only if the denied call was not reported.
        if let Err(e) = vmm::seccomp::selftest(kind, policy) {
            eprintln!("vmm: {e}");
        }
        return ExitCode::from(1);
    }
    let cfg = match args.validate(&cli::HostDevices::default()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("vmm: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    match machine::run(cfg) {
        Ok(reason) => {
            if let ExitReason::Error(msg) = &reason {
                eprintln!("vmm: {msg}");
            }
            tracing::info!(?reason, "VM stopped");
            ExitCode::from(reason.exit_code())
        }
        Err(e) => {
            eprintln!("vmm: {}", chain(&e));
            ExitCode::from(1)
        }
    }
}
