//! The device counters of a VMM, read at each fio phase's begin and end.
//!
//! Our VMM answers on its API socket. Today that is one JSON line
//! (`metrics\n` → `{"ok":true,"metrics":{...}}`, what `vmmctl SOCKET
//! metrics` prints); the API is moving to HTTP with Prometheus text at
//! `GET /metrics`. Only [`MetricsEndpoint`] and [`OursEndpoint`] know which:
//! switching means one more impl and changing the alias. Stock QEMU's
//! counters come from its trace file ([`crate::trace`]).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::trace::TraceCounter;

/// What the device did (cumulative, or the difference over one phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounters {
    /// virtio-iommu MAP requests.
    pub map_requests: u64,
    /// virtio-iommu UNMAP requests.
    pub unmap_requests: u64,
    /// virtio-iommu FLUSH requests (lazy-unmap extension).
    pub flush_requests: u64,
    /// Host DMA (VFIO) map and unmap calls.
    pub vfio_calls: u64,
    /// UNMAPs the device deferred to a FLUSH.
    pub deferred_unmaps: u64,
    /// VFIO calls FLUSHes made.
    pub flush_vfio_calls: u64,
    /// Mappings those calls removed (merged ranges).
    pub merged_ranges: u64,
}

impl DeviceCounters {
    /// `self - earlier`, per counter (0 where a counter went backwards).
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            map_requests: self.map_requests.saturating_sub(earlier.map_requests),
            unmap_requests: self.unmap_requests.saturating_sub(earlier.unmap_requests),
            flush_requests: self.flush_requests.saturating_sub(earlier.flush_requests),
            vfio_calls: self.vfio_calls.saturating_sub(earlier.vfio_calls),
            deferred_unmaps: self.deferred_unmaps.saturating_sub(earlier.deferred_unmaps),
            flush_vfio_calls: self
                .flush_vfio_calls
                .saturating_sub(earlier.flush_vfio_calls),
            merged_ranges: self.merged_ranges.saturating_sub(earlier.merged_ranges),
        }
    }

    /// MAP + UNMAP + FLUSH requests.
    pub fn requests(&self) -> u64 {
        self.map_requests + self.unmap_requests + self.flush_requests
    }
}

/// Reading counters failed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The endpoint did not answer.
    #[error("metrics endpoint {}: {source} (is the VMM running with --api-socket {}?)", path.display(), path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The endpoint answered something else than metrics.
    #[error(
        "metrics endpoint: unexpected answer {0:?}; is the VMM's API the version this tool knows?"
    )]
    BadAnswer(String),
    /// No answer in time.
    #[error("metrics endpoint {}: no answer within 5 s", .0.display())]
    Timeout(PathBuf),
}

/// Where our VMM's counters come from. One impl per API generation.
pub trait MetricsEndpoint {
    /// The device counters now (cumulative since the VMM started).
    fn fetch(&self) -> impl Future<Output = Result<DeviceCounters, MetricsError>>;
}

/// Today's API: one JSON line per request on a Unix socket.
#[derive(Debug, Clone)]
pub struct JsonSocket {
    path: PathBuf,
}

/// The endpoint this build talks to (switch here for the HTTP API).
pub type OursEndpoint = JsonSocket;

impl JsonSocket {
    /// The API socket at `path` (`vmm --api-socket`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonSocket { path: path.into() }
    }

    async fn ask(&self) -> Result<String, MetricsError> {
        let io = |source| MetricsError::Io {
            path: self.path.clone(),
            source,
        };
        let mut s = tokio::net::UnixStream::connect(&self.path)
            .await
            .map_err(io)?;
        s.write_all(b"metrics\n").await.map_err(io)?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).await.map_err(io)?;
        Ok(line)
    }
}

impl MetricsEndpoint for JsonSocket {
    async fn fetch(&self) -> Result<DeviceCounters, MetricsError> {
        let line = tokio::time::timeout(Duration::from_secs(5), self.ask())
            .await
            .map_err(|_| MetricsError::Timeout(self.path.clone()))??;
        parse_metrics_json(&line)
    }
}

/// The counters in one answer of today's API (see vmm/src/api.rs
/// `counters_json`).
pub fn parse_metrics_json(line: &str) -> Result<DeviceCounters, MetricsError> {
    let bad = || MetricsError::BadAnswer(line.chars().take(200).collect());
    let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
    if v.get("ok").and_then(|o| o.as_bool()) != Some(true) {
        return Err(bad());
    }
    let m = v.pointer("/metrics/viommu").ok_or_else(bad)?;
    if m.is_null() {
        // No virtio-iommu (plain passthrough): nothing to count.
        return Ok(DeviceCounters::default());
    }
    let n = |p: &str| m.pointer(p).and_then(|x| x.as_u64()).unwrap_or(0);
    Ok(DeviceCounters {
        map_requests: n("/requests/map"),
        unmap_requests: n("/requests/unmap"),
        flush_requests: n("/requests/flush"),
        vfio_calls: n("/backend_map_calls") + n("/backend_unmap_calls"),
        deferred_unmaps: n("/lazy_unmap/deferred_unmaps"),
        flush_vfio_calls: n("/lazy_unmap/flush_backend_calls"),
        merged_ranges: n("/lazy_unmap/merged_ranges"),
    })
}

/// Where one guest's device counters come from.
#[derive(Debug)]
pub enum CounterSource {
    /// Our VMM's API.
    Ours(OursEndpoint),
    /// Stock QEMU's trace file (lower bounds).
    QemuTrace(PathBuf, TraceCounter),
    /// Nothing to count (no vIOMMU).
    None,
}

impl CounterSource {
    /// The source for a VMM started with this trace file or API socket.
    pub fn new(trace: Option<&Path>, api_socket: Option<&Path>) -> Self {
        match (trace, api_socket) {
            (_, Some(s)) => CounterSource::Ours(OursEndpoint::new(s)),
            (Some(t), None) => CounterSource::QemuTrace(t.to_path_buf(), TraceCounter::default()),
            (None, None) => CounterSource::None,
        }
    }

    /// Whether the counts are lower bounds (QEMU's log backend drops lines).
    pub fn lower_bound(&self) -> bool {
        matches!(self, CounterSource::QemuTrace(..))
    }

    /// The cumulative counters now; `Ok(None)` when there is nothing to count.
    pub async fn snapshot(&mut self) -> Result<Option<DeviceCounters>, MetricsError> {
        match self {
            CounterSource::Ours(e) => e.fetch().await.map(Some),
            CounterSource::QemuTrace(p, t) => {
                t.poll(p).map(Some).map_err(|source| MetricsError::Io {
                    path: p.clone(),
                    source,
                })
            }
            CounterSource::None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"{"ok":true,"metrics":{"viommu":{"requests":{"attach":1,"detach":0,"map":30240,"unmap":26877,"probe":1,"flush":1245,"malformed":0,"total":58364},"failed_requests":0,"batches":9,"backend_map_calls":30240,"backend_unmap_calls":9751,"lazy_unmap":{"deferred_unmaps":26877,"flushes":1245,"flush_backend_calls":9751,"merged_ranges":20000,"average_merged_run":2.0,"forced_unmaps":0}},"endpoints":[]}}"#;

    #[test]
    fn parses_todays_json() {
        let c = parse_metrics_json(ANSWER).unwrap();
        assert_eq!(c.map_requests, 30240);
        assert_eq!(c.flush_requests, 1245);
        assert_eq!(c.vfio_calls, 39991);
        assert_eq!(c.deferred_unmaps, 26877);
        assert_eq!(c.merged_ranges, 20000);
        assert_eq!(c.requests(), 30240 + 26877 + 1245);
        let none =
            parse_metrics_json(r#"{"ok":true,"metrics":{"viommu":null,"endpoints":[]}}"#).unwrap();
        assert_eq!(none, DeviceCounters::default());
        assert!(parse_metrics_json(r#"{"ok":false,"error":"x"}"#).is_err());
        assert!(parse_metrics_json("garbage").is_err());
    }

    #[test]
    fn differences_never_underflow() {
        let a = DeviceCounters {
            map_requests: 10,
            vfio_calls: 3,
            ..Default::default()
        };
        let b = DeviceCounters {
            map_requests: 4,
            vfio_calls: 5,
            ..Default::default()
        };
        let d = a.since(&b);
        assert_eq!((d.map_requests, d.vfio_calls), (6, 0));
    }

    #[tokio::test]
    async fn fetches_from_a_socket() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("api.sock");
        let l = tokio::net::UnixListener::bind(&p).unwrap();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut line = String::new();
            BufReader::new(r).read_line(&mut line).await.unwrap();
            assert_eq!(line, "metrics\n");
            w.write_all(format!("{ANSWER}\n").as_bytes()).await.unwrap();
        });
        let mut src = CounterSource::new(None, Some(&p));
        assert!(!src.lower_bound());
        let c = src.snapshot().await.unwrap().unwrap();
        assert_eq!(c.map_requests, 30240);
    }
}
