//! The device counters of a VMM, read at each fio phase's begin and end.
//!
//! Our VMM answers HTTP on its API socket (`vmm --api-socket`): `GET
//! /metrics` is Prometheus text (what `vmmctl SOCKET metrics` prints),
//! e.g. `viommu_requests_total{type="map"} 30240`. Only [`MetricsEndpoint`]
//! and [`OursEndpoint`] know the protocol.
//!
//! Our VMM's counters are always on: its device thread bumps plain
//! integers where each thing happens, times each notification (two clock
//! reads, `viommu_busy_ns_total`) and copies them into a mutex-guarded
//! snapshot after it (vmm/src/devices/viommu.rs), in every run, measured
//! or not: no flag or build leaves them out, so what is measured is what
//! users run. The tool reads them only at each phase's begin and end
//! marker, off the request path, with nothing turned on for the
//! measurement; the counts are exact. (They are not atomics, and not free:
//! their cost is part of our VMM's IOPS, as it is of every user's.) Stock
//! QEMU's counters come from its trace file, written only in untimed
//! counting phases ([`crate::run::trace`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    /// Nanoseconds the device spent serving requests (`viommu_busy_ns_total`;
    /// our VMM only, 0 for stock QEMU).
    #[serde(default)]
    pub busy_ns: u64,
    /// Nanoseconds of that in host DMA (VFIO) map and unmap calls
    /// (`viommu_backend_{map,unmap}_ns_total`; our VMM only).
    #[serde(default)]
    pub vfio_ns: u64,
    /// Bytes the device's successful host map calls mapped
    /// (`viommu_backend_bytes_mapped_total`; our VMM only).
    #[serde(default)]
    pub bytes_mapped: u64,
    /// Bytes its successful host unmap calls unmapped
    /// (`viommu_backend_bytes_unmapped_total`; our VMM only).
    #[serde(default)]
    pub bytes_unmapped: u64,
    /// Nanoseconds the device thread polled its request queue
    /// (`viommu_requestq_poll_ns_total`, `--viommu-poll-us`; our VMM only):
    /// host CPU spent waiting for requests instead of sleeping.
    #[serde(default)]
    pub poll_ns: u64,
    /// Looks at the request queue while polling that found requests
    /// (`viommu_requestq_polls_found_total`): each a notification the guest
    /// did not make and a wake-up the device thread did not need.
    #[serde(default)]
    pub polls_found: u64,
    /// Request-queue notifications the device thread served without
    /// polling, its window open, because the host had no CPU to spare
    /// (`viommu_requestq_polls_busy_total`; our VMM only).
    #[serde(default)]
    pub polls_busy: u64,
    /// Request-queue notifications served on the vCPU that made them
    /// (`viommu_requestq_vcpu_kicks_total`, `--viommu-kicks vcpu`; our VMM
    /// only): each a wake-up of the device thread that did not happen.
    #[serde(default)]
    pub vcpu_kicks: u64,
    /// Times a vCPU that served a request-queue notification woke the
    /// device thread to poll for the next one, a host CPU free for it
    /// (`viommu_requestq_vcpu_handovers_total`, `--viommu-kicks vcpu` with
    /// `--viommu-poll-us`; our VMM only).
    #[serde(default)]
    pub vcpu_handovers: u64,
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
            busy_ns: self.busy_ns.saturating_sub(earlier.busy_ns),
            vfio_ns: self.vfio_ns.saturating_sub(earlier.vfio_ns),
            bytes_mapped: self.bytes_mapped.saturating_sub(earlier.bytes_mapped),
            bytes_unmapped: self.bytes_unmapped.saturating_sub(earlier.bytes_unmapped),
            poll_ns: self.poll_ns.saturating_sub(earlier.poll_ns),
            polls_found: self.polls_found.saturating_sub(earlier.polls_found),
            polls_busy: self.polls_busy.saturating_sub(earlier.polls_busy),
            vcpu_kicks: self.vcpu_kicks.saturating_sub(earlier.vcpu_kicks),
            vcpu_handovers: self.vcpu_handovers.saturating_sub(earlier.vcpu_handovers),
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

/// The VMM's API: HTTP/1.1 over a Unix socket, `GET /metrics`.
#[derive(Debug, Clone)]
pub struct HttpSocket {
    path: PathBuf,
}

/// The endpoint this build talks to.
pub type OursEndpoint = HttpSocket;

/// Longest answer read (the VMM's metrics are a few KiB).
const MAX_ANSWER: u64 = 1 << 20;

impl HttpSocket {
    /// The API socket at `path` (`vmm --api-socket`).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        HttpSocket { path: path.into() }
    }

    async fn ask(&self) -> Result<String, MetricsError> {
        self.get("/metrics").await
    }

    async fn get(&self, path: &str) -> Result<String, MetricsError> {
        let io = |source| MetricsError::Io {
            path: self.path.clone(),
            source,
        };
        let mut s = tokio::net::UnixStream::connect(&self.path)
            .await
            .map_err(io)?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .map_err(io)?;
        let mut raw = Vec::new();
        s.take(MAX_ANSWER).read_to_end(&mut raw).await.map_err(io)?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    }
}

impl HttpSocket {
    /// The whole `GET /metrics` body (an answer within 5 s).
    pub async fn text(&self) -> Result<String, MetricsError> {
        self.body("/metrics").await
    }

    /// The body of a `GET path` answered 200 within 5 s.
    pub async fn body(&self, path: &str) -> Result<String, MetricsError> {
        let answer = tokio::time::timeout(Duration::from_secs(5), self.get(path))
            .await
            .map_err(|_| MetricsError::Timeout(self.path.clone()))??;
        match answer.split_once("\r\n\r\n") {
            Some((head, body))
                if head.lines().next().and_then(|l| l.split(' ').nth(1)) == Some("200") =>
            {
                Ok(body.to_string())
            }
            _ => Err(MetricsError::BadAnswer(answer.chars().take(200).collect())),
        }
    }
}

impl MetricsEndpoint for HttpSocket {
    async fn fetch(&self) -> Result<DeviceCounters, MetricsError> {
        let answer = tokio::time::timeout(Duration::from_secs(5), self.ask())
            .await
            .map_err(|_| MetricsError::Timeout(self.path.clone()))??;
        parse_http_metrics(&answer)
    }
}

/// The counters in one HTTP answer to `GET /metrics`: status 200 and a
/// Prometheus text body.
pub fn parse_http_metrics(answer: &str) -> Result<DeviceCounters, MetricsError> {
    let bad = || MetricsError::BadAnswer(answer.chars().take(200).collect());
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head.lines().next().and_then(|l| l.split(' ').nth(1));
    if status != Some("200") {
        return Err(bad());
    }
    parse_prometheus(body)
}

/// Our VMM's counters in Prometheus text (vmm/src/api, rendered by
/// crates/viommu-counters): sample lines `name{labels} value`, `#` comments. An
/// empty text is a VMM without a virtio-iommu: nothing to count. Unknown
/// samples are ignored; a line that is not a sample is an error.
pub fn parse_prometheus(text: &str) -> Result<DeviceCounters, MetricsError> {
    let (v, bad) = prometheus_samples(text);
    if let Some(line) = bad {
        return Err(MetricsError::BadAnswer(line.chars().take(200).collect()));
    }
    let n = |k: &str| v.get(k).copied().unwrap_or(0);
    Ok(DeviceCounters {
        map_requests: n("viommu_requests_total{type=\"map\"}"),
        unmap_requests: n("viommu_requests_total{type=\"unmap\"}"),
        flush_requests: n("viommu_requests_total{type=\"flush\"}"),
        vfio_calls: n("viommu_backend_map_calls_total") + n("viommu_backend_unmap_calls_total"),
        deferred_unmaps: n("viommu_deferred_unmaps_total"),
        flush_vfio_calls: n("viommu_flush_backend_calls_total"),
        merged_ranges: n("viommu_merged_ranges_total"),
        busy_ns: n("viommu_busy_ns_total"),
        vfio_ns: n("viommu_backend_map_ns_total") + n("viommu_backend_unmap_ns_total"),
        bytes_mapped: n("viommu_backend_bytes_mapped_total"),
        bytes_unmapped: n("viommu_backend_bytes_unmapped_total"),
        poll_ns: n("viommu_requestq_poll_ns_total"),
        polls_found: n("viommu_requestq_polls_found_total"),
        polls_busy: n("viommu_requestq_polls_busy_total"),
        vcpu_kicks: n("viommu_requestq_vcpu_kicks_total"),
        vcpu_handovers: n("viommu_requestq_vcpu_handovers_total"),
    })
}

/// The samples of a Prometheus text (`series value` lines; `#` comments and
/// blank lines skipped) by series, values as whole numbers, and the first
/// line that is not a sample with a value >= 0, if any.
pub fn prometheus_samples(text: &str) -> (BTreeMap<&str, u64>, Option<&str>) {
    let mut v = BTreeMap::new();
    let mut bad = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let value = line
            .rsplit_once(' ')
            .and_then(|(series, value)| Some((series.trim(), value.parse::<f64>().ok()?)));
        match value {
            Some((series, x)) if x >= 0.0 => {
                v.insert(series, x as u64);
            }
            _ => {
                bad.get_or_insert(line);
            }
        }
    }
    (v, bad)
}

#[cfg(test)]
pub(crate) mod tests;
