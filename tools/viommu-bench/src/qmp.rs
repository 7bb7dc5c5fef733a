//! A minimal QMP client: stock QEMU's machine protocol over the Unix socket
//! of `-qmp unix:PATH,server=on,wait=off`. The bench uses it for one thing:
//! turning QEMU's trace events on and off (`trace-event-set-state`) around
//! the untimed counting phases, so no timed phase runs with them on (see
//! [`crate::trace`]).
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
pub(crate) mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;

    /// A fake QEMU QMP server at `path` for one connection: greets (unless
    /// `greeting` is None), then answers each command line with
    /// `answer(command, arguments)` (None: say nothing), and returns the
    /// commands it got.
    pub(crate) fn serve(
        path: &Path,
        greeting: Option<&'static str>,
        answer: impl Fn(&str, &Value) -> Option<String> + Send + 'static,
    ) -> tokio::task::JoinHandle<Vec<Value>> {
        serve_after(path, None, greeting, answer)
    }

    /// [`serve`], bound only once the file `after` exists (a fake QEMU
    /// started by the runner, which first removes a stale socket).
    pub(crate) fn serve_after(
        path: &Path,
        after: Option<PathBuf>,
        greeting: Option<&'static str>,
        answer: impl Fn(&str, &Value) -> Option<String> + Send + 'static,
    ) -> tokio::task::JoinHandle<Vec<Value>> {
        let bind = |p: &Path| tokio::net::UnixListener::bind(p).unwrap();
        let now = after.is_none().then(|| bind(path));
        let path = path.to_path_buf();
        tokio::spawn(async move {
            let l = match now {
                Some(l) => l,
                None => {
                    while !after.as_ref().is_some_and(|a| a.exists()) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    bind(&path)
                }
            };
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut got = Vec::new();
            if let Some(g) = greeting {
                w.write_all(format!("{g}\r\n").as_bytes()).await.unwrap();
            }
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).unwrap();
                let cmd = v["execute"].as_str().unwrap_or("").to_string();
                let reply = answer(&cmd, &v["arguments"]);
                got.push(v);
                if let Some(r) = reply {
                    w.write_all(format!("{r}\r\n").as_bytes()).await.unwrap();
                }
            }
            got
        })
    }

    pub(crate) const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 1, "major": 11}, "package": "Debian 1:11.1+dfsg-1"}, "capabilities": ["oob"]}}"#;

    #[tokio::test]
    async fn negotiates_then_sets_trace_events_skipping_async_events() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("q.sock");
        let server = serve(&p, Some(GREETING), |cmd, _| {
            Some(match cmd {
                // An asynchronous event may come before an answer.
                "trace-event-set-state" => {
                    r#"{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}
{"return": {}}"#
                        .to_string()
                }
                _ => r#"{"return": {}}"#.to_string(),
            })
        });
        let mut q = Qmp::connect(&p).await.unwrap();
        q.set_trace(&["virtio_iommu_map", "vfio_iommu_map_notify"], true)
            .await
            .unwrap();
        q.set_trace(&["virtio_iommu_map"], false).await.unwrap();
        drop(q);
        let got = server.await.unwrap();
        assert_eq!(got[0], json!({"execute": "qmp_capabilities"}));
        assert_eq!(
            got[1],
            json!({"execute": "trace-event-set-state", "arguments": {"name": "virtio_iommu_map", "enable": true}})
        );
        assert_eq!(got[2]["arguments"]["name"], "vfio_iommu_map_notify");
        assert_eq!(got[3]["arguments"]["enable"], false);
        assert_eq!(got.len(), 4);
    }

    #[tokio::test]
    async fn refusals_and_silence_are_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("q.sock");
        let _server = serve(&p, Some(GREETING), |cmd, args| match cmd {
            "qmp_capabilities" => Some(r#"{"return": {}}"#.into()),
            "trace-event-set-state" if args["name"] == "no_such_event" => Some(
                r#"{"error": {"class": "GenericError", "desc": "No such event 'no_such_event'"}}"#
                    .into(),
            ),
            _ => None,
        });
        let mut q = Qmp::connect(&p).await.unwrap();
        let e = q.set_trace(&["no_such_event"], true).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "QMP trace-event-set-state: QEMU answered GenericError: No such event 'no_such_event'"
        );
        // The fake says nothing to this one: a timeout naming the command.
        let e = q.execute("query-status", Value::Null).await.unwrap_err();
        assert!(
            matches!(&e, QmpError::Timeout { what, .. } if what == "query-status"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_socket_that_is_not_qmp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("q.sock");
        let e = Qmp::connect(&p).await.unwrap_err();
        assert!(
            e.to_string().contains("-qmp unix:") && matches!(e, QmpError::Io { .. }),
            "{e}"
        );
        let _server = serve(&p, Some(r#"{"hello": 1}"#), |_, _| None);
        let e = Qmp::connect(&p).await.unwrap_err();
        assert!(
            matches!(&e, QmpError::Protocol { what, line, .. } if what == "QEMU's greeting" && line.contains("hello")),
            "{e}"
        );
        let p2 = d.path().join("q2.sock");
        let _server = serve(&p2, Some("not json"), |_, _| None);
        assert!(matches!(
            Qmp::connect(&p2).await.unwrap_err(),
            QmpError::Protocol { .. }
        ));
    }
}
