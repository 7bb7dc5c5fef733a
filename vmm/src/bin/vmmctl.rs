//! `vmmctl SOCKET COMMAND`: one request to a running vmm's `--api-socket`,
//! the JSON answer on stdout. Exit code 0 when the answer says ok.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Talk to a running vmm's control socket.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The socket given to `vmm --api-socket`.
    socket: PathBuf,
    /// info, metrics or shutdown.
    command: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let answer = (|| -> std::io::Result<String> {
        let mut s = UnixStream::connect(&args.socket)?;
        s.write_all(format!("{}\n", args.command.trim()).as_bytes())?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        Ok(line)
    })();
    match answer {
        Ok(line) => {
            print!("{line}");
            let ok = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v.get("ok").and_then(serde_json::Value::as_bool))
                .unwrap_or(false);
            if ok {
                ExitCode::SUCCESS
            } else {
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
