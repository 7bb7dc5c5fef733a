//! A minimal QMP client: stock QEMU's machine protocol over the Unix socket
//! of `-qmp unix:PATH,server=on,wait=off`. The bench uses it for one thing:
//! turning QEMU's trace events on and off (`trace-event-set-state`) around
//! the untimed counting phases, so no timed phase runs with them on (see
//! [`crate::run::trace`]).
//!
//! The protocol: QEMU greets with `{"QMP": {...}}`; the client sends
//! `{"execute": "qmp_capabilities"}` to leave negotiation, then one command
//! at a time; each answer is one line, `{"return": ...}` or `{"error":
//! {"class": ..., "desc": ...}}`, and asynchronous `{"event": ...}` lines
//! may come in between (skipped here).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// How long QEMU may take to greet or to answer one command (tests: less).
const ANSWER_WITHIN: Duration = if cfg!(test) {
    Duration::from_millis(500)
} else {
    Duration::from_secs(5)
};

/// Longest line read from QEMU (answers to our commands are short).
const MAX_LINE: usize = 1 << 20;

/// Talking to QEMU's QMP socket failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// The socket could not be reached or broke.
    #[error("QMP socket {}: {source} (is QEMU running with -qmp unix:{},server=on,wait=off?)", path.display(), path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// QEMU did not answer in time.
    #[error("QMP socket {}: no answer to {what} within {} ms", path.display(), ANSWER_WITHIN.as_millis())]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// What was waited for.
        what: String,
    },
    /// QEMU closed the connection.
    #[error("QMP socket {}: QEMU closed the connection while {what}", path.display())]
    Closed {
        /// The socket.
        path: PathBuf,
        /// What was going on.
        what: String,
    },
    /// A line that is not QMP.
    #[error("QMP socket {}: unexpected answer {line:?} to {what}", path.display())]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was waited for.
        what: String,
        /// The line (at most 200 characters).
        line: String,
    },
    /// QEMU refused a command.
    #[error("QMP {command}: QEMU answered {class}: {desc}")]
    Refused {
        /// The command.
        command: String,
        /// QEMU's error class (`GenericError`, `CommandNotFound`, ...).
        class: String,
        /// QEMU's description.
        desc: String,
    },
}

/// One QMP connection, past capabilities negotiation.
#[derive(Debug)]
pub struct Qmp {
    path: PathBuf,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Qmp {
    /// Connect to the QMP socket at `path`, read QEMU's greeting and leave
    /// negotiation mode.
    pub async fn connect(path: &Path) -> Result<Qmp, QmpError> {
        let s = tokio::net::UnixStream::connect(path)
            .await
            .map_err(|source| QmpError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let (r, w) = s.into_split();
        let mut q = Qmp {
            path: path.to_path_buf(),
            reader: BufReader::new(r),
            writer: w,
        };
        let greeting = q.read_message("QEMU's greeting").await?;
        if greeting.get("QMP").is_none() {
            return Err(q.protocol("QEMU's greeting", &greeting));
        }
        q.execute("qmp_capabilities", Value::Null).await?;
        Ok(q)
    }

    /// Run `command` with `arguments` (`Value::Null`: none) and return its
    /// `return` value.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        let mut msg = json!({ "execute": command });
        if !arguments.is_null() {
            msg["arguments"] = arguments;
        }
        let mut line = msg.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|source| QmpError::Io {
                path: self.path.clone(),
                source,
            })?;
        let what = command.to_string();
        loop {
            let m = self.read_message(&what).await?;
            if let Some(r) = m.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = m.get("error") {
                let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
                return Err(QmpError::Refused {
                    command: command.to_string(),
                    class: s("class"),
                    desc: s("desc"),
                });
            }
            if m.get("event").is_none() {
                return Err(self.protocol(&what, &m));
            }
        }
    }

    /// Turn the trace events `names` on or off (`trace-event-set-state`,
    /// one command per event, in order).
    pub async fn set_trace(&mut self, names: &[&str], enable: bool) -> Result<(), QmpError> {
        for n in names {
            self.execute(
                "trace-event-set-state",
                json!({ "name": n, "enable": enable }),
            )
            .await?;
        }
        Ok(())
    }

    /// The next JSON object QEMU sends.
    async fn read_message(&mut self, what: &str) -> Result<Value, QmpError> {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(ANSWER_WITHIN, async {
            loop {
                buf.clear();
                let n = (&mut self.reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut buf)
                    .await?;
                if n == 0 || !buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok::<usize, std::io::Error>(n);
                }
            }
        })
        .await
        .map_err(|_| QmpError::Timeout {
            path: self.path.clone(),
            what: what.to_string(),
        })?
        .map_err(|source| QmpError::Io {
            path: self.path.clone(),
            source,
        })?;
        if read == 0 {
            return Err(QmpError::Closed {
                path: self.path.clone(),
                what: format!("waiting for {what}"),
            });
        }
        let text = String::from_utf8_lossy(&buf);
        match serde_json::from_str::<Value>(text.trim()) {
            Ok(v) if v.is_object() => Ok(v),
            _ => Err(QmpError::Protocol {
                path: self.path.clone(),
                what: what.to_string(),
                line: text.trim().chars().take(200).collect(),
            }),
        }
    }

    fn protocol(&self, what: &str, v: &Value) -> QmpError {
        QmpError::Protocol {
            path: self.path.clone(),
            what: what.to_string(),
            line: v.to_string().chars().take(200).collect(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
