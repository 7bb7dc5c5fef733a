//! `vmmctl SOCKET COMMAND`: one request to a running vmm's `--api-socket`
//! (HTTP over the Unix socket), the answer's body on stdout.
//!
//! - `metrics`: `GET /metrics`, the counters as Prometheus text;
//! - `info`: `GET /api/v1/vm.info`, JSON;
//! - `vcpus`: `GET /api/v1/vm.vcpus`, where each vCPU is now, JSON;
//! - `shutdown`: `PUT /api/v1/vm.shutdown`;
//! - `reboot`: `PUT /api/v1/vm.reboot`.
//!
//! Exit code 0 on a 2xx answer, 1 on another answer, 2 when the socket
//! cannot be reached or the answer does not come within `--timeout-secs`
//! (10) or is larger than `--max-answer-bytes` (16 MiB).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

/// Talk to a running vmm's control socket.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The socket given to `vmm --api-socket`.
    socket: PathBuf,
    /// What to ask.
    command: Command,
    /// Give up after this many seconds without the whole answer.
    #[arg(long, default_value_t = 10)]
    timeout_secs: u64,
    /// Refuse an answer larger than this many bytes.
    #[arg(long, default_value_t = vmm::api::CLIENT_MAX_ANSWER)]
    max_answer_bytes: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Command {
    /// The counters, as Prometheus text.
    Metrics,
    /// What the VM is, as JSON.
    Info,
    /// Where each vCPU is now (registers, CPU time), as JSON.
    Vcpus,
    /// Stop the VM.
    Shutdown,
    /// Reboot the guest (what `vmm --on-reboot` says a reboot does).
    Reboot,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (method, path) = match args.command {
        Command::Metrics => ("GET", "/metrics"),
        Command::Info => ("GET", "/api/v1/vm.info"),
        Command::Vcpus => ("GET", "/api/v1/vm.vcpus"),
        Command::Shutdown => ("PUT", "/api/v1/vm.shutdown"),
        Command::Reboot => ("PUT", "/api/v1/vm.reboot"),
    };
    let timeout = std::time::Duration::from_secs(args.timeout_secs.max(1));
    match vmm::api::request_within(&args.socket, method, path, timeout, args.max_answer_bytes) {
        Ok((status, body)) => {
            print!("{body}");
            if (200..300).contains(&status) {
                ExitCode::SUCCESS
            } else {
                eprintln!("vmmctl: {method} {path}: HTTP {status}");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!(
                "vmmctl: {}: {e} (is vmm running with --api-socket {}?)",
                args.socket.display(),
                args.socket.display()
            );
            ExitCode::from(2)
        }
    }
}
