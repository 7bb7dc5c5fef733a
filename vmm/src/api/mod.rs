//! The control plane: a Unix socket speaking one JSON object per line.
//!
//! Requests are a command word, or `{"cmd": "..."}`:
//! - `info`: what the VM is (vCPUs, memory, kernel, devices)
//! - `metrics`: the counters (virtio-iommu requests, batches, backend
//!   calls, bytes, interrupts, per-endpoint DMA stats)
//! - `shutdown`: stop the VM (the VMM exits with code 0)
//!
//! Each answer is one line: `{"ok": true, ...}` or `{"ok": false, "error": ...}`.
//! The server runs on a current-thread tokio runtime of its own thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use dma_mapper::DmaStats;
use viommu_device::Counters;

use crate::devices::exit::{ExitReason, VmExit};

/// Produces the current metrics.
pub type MetricsFn = Box<dyn Fn() -> Value + Send + Sync>;

/// What the API answers from.
pub struct ApiState {
    /// Static description of the VM.
    pub info: Value,
    /// Live counters.
    pub metrics: MetricsFn,
    /// Where `shutdown` goes.
    pub exit: Arc<VmExit>,
}

/// Why the API socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Something that is not a socket is in the way.
    #[error("--api-socket {}: exists and is not a socket; remove it or pick another path", .0.display())]
    NotASocket(PathBuf),
    /// Binding or starting failed.
    #[error("--api-socket {}: cannot listen", path.display())]
    Listen {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The virtio-iommu counters as JSON.
pub fn counters_json(c: &Counters) -> Value {
    let r = &c.requests;
    json!({
        "requests": {
            "attach": r.attach, "detach": r.detach, "map": r.map, "unmap": r.unmap,
            "probe": r.probe, "flush": r.flush, "malformed": r.malformed,
            "total": r.total(),
        },
        "failed_requests": c.failed_requests,
        "batches": c.batches,
        "batch_size_histogram_log2": c.batch_sizes,
        "backend_map_calls": c.backend.map_calls,
        "backend_unmap_calls": c.backend.unmap_calls,
        "backend_failures": c.backend.failures(),
        "bytes_mapped": c.backend.bytes_mapped,
        "bytes_unmapped": c.backend.bytes_unmapped,
        "elided_maps": c.elided_maps,
        "interrupts": c.interrupts,
        "events_reported": c.events_reported,
        "events_dropped": c.events_dropped,
        "lazy_unmap": {
            "deferred_unmaps": c.deferred_unmaps,
            "flushes": c.flushes,
            "flush_backend_calls": c.flush_backend_calls,
            "merged_ranges": c.merged_ranges,
            "average_merged_run": c.average_merged_run(),
            "forced_unmaps": c.forced_unmaps,
        },
    })
}

/// One endpoint's host DMA calls as JSON.
pub fn dma_stats_json(s: &DmaStats) -> Value {
    json!({
        "map_calls": s.map_calls,
        "unmap_calls": s.unmap_calls,
        "bytes_mapped": s.bytes_mapped,
        "bytes_unmapped": s.bytes_unmapped,
        "map_failures": s.map_failures,
        "unmap_failures": s.unmap_failures,
    })
}

/// Answer one request line.
pub fn handle_line(line: &str, state: &ApiState) -> Value {
    let line = line.trim();
    let cmd = if line.starts_with('{') {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => v
                .get("cmd")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            Err(e) => return json!({"ok": false, "error": format!("bad JSON: {e}")}),
        }
    } else {
        line.to_string()
    };
    match cmd.as_str() {
        "info" => json!({"ok": true, "info": state.info}),
        "metrics" => json!({"ok": true, "metrics": (state.metrics)()}),
        "shutdown" => {
            state.exit.request(ExitReason::ApiShutdown);
            json!({"ok": true})
        }
        other => json!({
            "ok": false,
            "error": format!("unknown command {other:?}; try info, metrics or shutdown"),
        }),
    }
}

async fn serve_conn(stream: UnixStream, state: Arc<ApiState>) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let mut out = handle_line(&line, &state).to_string();
        out.push('\n');
        w.write_all(out.as_bytes()).await?;
    }
    Ok(())
}

/// Accept connections on `listener` forever.
pub async fn serve(listener: UnixListener, state: Arc<ApiState>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let state = state.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve_conn(stream, state).await {
                        tracing::debug!("API connection: {e}");
                    }
                });
            }
            Err(e) => {
                tracing::warn!("API accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

fn prepare_path(path: &Path) -> Result<(), ApiError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|source| ApiError::Listen {
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(_) => Err(ApiError::NotASocket(path.to_path_buf())),
        Err(_) => Ok(()),
    }
}

/// Listen on `path` and serve from a thread of its own.
pub fn spawn(path: &Path, state: ApiState) -> Result<(), ApiError> {
    prepare_path(path)?;
    let listen_err = |source| ApiError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(listen_err)?;
    let listener = {
        let _guard = rt.enter();
        UnixListener::bind(path).map_err(listen_err)?
    };
    let state = Arc::new(state);
    std::thread::Builder::new()
        .name("api".into())
        .spawn(move || rt.block_on(serve(listener, state)))
        .map_err(listen_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (ApiState, Arc<VmExit>) {
        let exit = Arc::new(VmExit::new().unwrap());
        (
            ApiState {
                info: json!({"cpus": 2}),
                metrics: Box::new(|| json!({"batches": 7})),
                exit: exit.clone(),
            },
            exit,
        )
    }

    #[test]
    fn metrics_json_shapes() {
        let mut c = Counters::default();
        c.requests.map = 3;
        c.requests.unmap = 2;
        c.batches = 1;
        c.batch_sizes[2] = 1;
        c.backend.map_calls = 1;
        c.requests.flush = 1;
        c.deferred_unmaps = 6;
        c.flushes = 1;
        c.flush_backend_calls = 2;
        c.merged_ranges = 6;
        let v = counters_json(&c);
        assert_eq!(v["requests"]["flush"], 1);
        assert_eq!(v["lazy_unmap"]["deferred_unmaps"], 6);
        assert_eq!(v["lazy_unmap"]["flush_backend_calls"], 2);
        assert_eq!(v["lazy_unmap"]["average_merged_run"], 3.0);
        assert_eq!(v["requests"]["total"], 6);
        assert_eq!(v["batch_size_histogram_log2"][2], 1);
        assert_eq!(v["backend_map_calls"], 1);
        let s = DmaStats {
            map_calls: 4,
            bytes_mapped: 0x4000,
            ..Default::default()
        };
        assert_eq!(dma_stats_json(&s)["bytes_mapped"], 0x4000);
    }

    #[test]
    fn commands() {
        let (s, exit) = state();
        assert_eq!(
            handle_line("info", &s),
            json!({"ok": true, "info": {"cpus": 2}})
        );
        assert_eq!(
            handle_line(r#" {"cmd":"metrics"} "#, &s),
            json!({"ok": true, "metrics": {"batches": 7}})
        );
        let bad = handle_line("reboot", &s);
        assert_eq!(bad["ok"], false);
        assert!(bad["error"]
            .as_str()
            .unwrap()
            .contains("info, metrics or shutdown"));
        assert_eq!(handle_line("{nope", &s)["ok"], false);
        assert_eq!(exit.reason(), None);
        assert_eq!(handle_line("shutdown", &s), json!({"ok": true}));
        assert_eq!(exit.reason(), Some(ExitReason::ApiShutdown));
    }

    #[test]
    fn serves_a_socket() {
        let dir = std::env::temp_dir().join(format!("vmm-api-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("api.sock");
        std::fs::write(&path, b"").unwrap();
        let (s, exit) = state();
        assert!(matches!(spawn(&path, s), Err(ApiError::NotASocket(_))));
        std::fs::remove_file(&path).unwrap();
        let (s, _) = state();
        spawn(&path, s).unwrap();
        // A second server on the same path replaces the stale socket.
        let (s, exit2) = state();
        spawn(&path, s).unwrap();

        use std::io::{BufRead, Write};
        let mut c = std::os::unix::net::UnixStream::connect(&path).unwrap();
        c.write_all(b"info\n\nmetrics\nshutdown\n").unwrap();
        let mut r = std::io::BufReader::new(c.try_clone().unwrap());
        let mut answers = Vec::new();
        for _ in 0..3 {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            answers.push(serde_json::from_str::<Value>(&l).unwrap());
        }
        assert_eq!(answers[0]["info"]["cpus"], 2);
        assert_eq!(answers[1]["metrics"]["batches"], 7);
        assert_eq!(answers[2]["ok"], true);
        assert_eq!(exit2.reason(), Some(ExitReason::ApiShutdown));
        assert_eq!(exit.reason(), None);
    }
}
