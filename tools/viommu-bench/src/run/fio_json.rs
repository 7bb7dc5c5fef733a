//! fio's JSON output (`--output-format=json`), as far as the bench reads
//! it: per job and direction the bytes, bandwidth, IOPS and runtime, the
//! completion latency's mean and percentiles (p50, p99, p99.9) and the
//! total latency's mean; the job's error; fio's version. Jobs are summed
//! the way fio's terse output summed them for the guest (its runs use
//! `--group_reporting`: one job entry for the whole run, whose percentiles
//! are the run's own distribution).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::run::guest::{FioRecord, Latency};

/// fio's JSON output is at most this many bytes (about 7 KB per job entry
/// in practice).
pub const MAX_JSON_BYTES: usize = 1 << 20;

/// The whole output.
#[derive(Debug, Clone, Deserialize)]
pub struct FioOutput {
    /// `fio version`, e.g. `fio-3.39`.
    #[serde(rename = "fio version", default)]
    pub version: Option<String>,
    /// One entry per job (one per reporting group with `--group_reporting`).
    pub jobs: Vec<Job>,
}

/// One job entry.
#[derive(Debug, Clone, Deserialize)]
pub struct Job {
    /// fio's error code for the job (0: none).
    #[serde(default)]
    pub error: i64,
    /// Reads.
    #[serde(default)]
    pub read: Direction,
    /// Writes.
    #[serde(default)]
    pub write: Direction,
}

/// One direction of a job.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Direction {
    /// Bytes moved.
    #[serde(default)]
    pub io_bytes: u64,
    /// Bandwidth, bytes/s.
    #[serde(default)]
    pub bw_bytes: u64,
    /// I/Os per second.
    #[serde(default)]
    pub iops: f64,
    /// Runtime, ms.
    #[serde(default)]
    pub runtime: u64,
    /// Completion latency.
    #[serde(default)]
    pub clat_ns: Option<LatStats>,
    /// Total latency (submission and completion).
    #[serde(default)]
    pub lat_ns: Option<LatStats>,
}

/// A latency distribution.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LatStats {
    /// Mean, ns.
    #[serde(default)]
    pub mean: f64,
    /// Samples.
    #[serde(rename = "N", default)]
    pub n: u64,
    /// Percentiles by their `%f` name (`"99.000000"`), ns; absent with
    /// no samples.
    #[serde(default)]
    pub percentile: BTreeMap<String, u64>,
}

impl LatStats {
    /// The percentile `p` (e.g. 99.9), if fio reported it.
    pub fn at(&self, p: f64) -> Option<u64> {
        self.percentile
            .iter()
            .find(|(k, _)| k.parse::<f64>().is_ok_and(|x| (x - p).abs() < 1e-6))
            .map(|(_, v)| *v)
    }
}

/// fio's JSON output that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FioJsonError {
    /// More than [`MAX_JSON_BYTES`].
    #[error("fio's JSON output is {bytes} bytes, more than the {MAX_JSON_BYTES} allowed")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not JSON, cut short, or not fio's shape.
    #[error("fio's JSON output does not parse: {0}")]
    Parse(#[from] serde_json::Error),
    /// No object in it at all.
    #[error("fio's output holds no JSON object")]
    NoObject,
    /// No job entry.
    #[error("fio's JSON output has no job")]
    NoJobs,
}

/// Parse fio's output `text`: its JSON object, after anything fio printed
/// before it (a notice on stdout) and before anything after it.
pub fn parse(text: &str) -> Result<FioOutput, FioJsonError> {
    if text.len() > MAX_JSON_BYTES {
        return Err(FioJsonError::TooLarge { bytes: text.len() });
    }
    let at = text.find('{').ok_or(FioJsonError::NoObject)?;
    let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<FioOutput>();
    let out = stream.next().ok_or(FioJsonError::NoObject)??;
    if out.jobs.is_empty() {
        return Err(FioJsonError::NoJobs);
    }
    Ok(out)
}

/// One direction summed over the jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Bytes moved.
    pub io_bytes: u64,
    /// Bandwidth, bytes/s.
    pub bw_bytes: u64,
    /// I/Os per second.
    pub iops: f64,
    /// The longest job's runtime, ms.
    pub runtime_ms: u64,
    /// Latency, if any job of this direction had completions.
    pub latency: Option<Latency>,
}

impl FioOutput {
    /// The first job error (0: none).
    pub fn error(&self) -> i64 {
        self.jobs
            .iter()
            .map(|j| j.error)
            .find(|e| *e != 0)
            .unwrap_or(0)
    }

    /// Reads summed over the jobs.
    pub fn read(&self) -> Totals {
        totals(self.jobs.iter().map(|j| &j.read))
    }

    /// Writes summed over the jobs.
    pub fn write(&self) -> Totals {
        totals(self.jobs.iter().map(|j| &j.write))
    }

    /// `rec` (the guest's record of this run) with this output's figures:
    /// bytes, bandwidth, IOPS (rounded down, as terse output had them),
    /// runtime, the error, the version and the latencies.
    pub fn apply(&self, mut rec: FioRecord) -> FioRecord {
        let (r, w) = (self.read(), self.write());
        rec.error = self.error();
        rec.read_kib = r.io_bytes / 1024;
        rec.read_bw_kib = r.bw_bytes / 1024;
        rec.read_iops = r.iops as u64;
        rec.read_ms = r.runtime_ms;
        rec.read_lat = r.latency;
        rec.write_kib = w.io_bytes / 1024;
        rec.write_bw_kib = w.bw_bytes / 1024;
        rec.write_iops = w.iops as u64;
        rec.write_ms = w.runtime_ms;
        rec.write_lat = w.latency;
        rec.fio_version.clone_from(&self.version);
        rec
    }
}

/// Sum `dirs`: bytes, bandwidth and IOPS added, the longest runtime; the
/// latency of the one entry with completions, or over several the largest
/// percentiles and the means weighted by their samples.
fn totals<'a>(dirs: impl Iterator<Item = &'a Direction>) -> Totals {
    let mut t = Totals::default();
    // Each direction with completions: its completion and total latency.
    let mut lats: Vec<(&LatStats, Option<&LatStats>)> = Vec::new();
    for d in dirs {
        t.io_bytes += d.io_bytes;
        t.bw_bytes += d.bw_bytes;
        t.iops += d.iops;
        t.runtime_ms = t.runtime_ms.max(d.runtime);
        if let Some(c) = d.clat_ns.as_ref().filter(|c| c.n > 0) {
            lats.push((c, d.lat_ns.as_ref()));
        }
    }
    if lats.is_empty() {
        return t;
    }
    let samples: u64 = lats.iter().map(|(c, _)| c.n).sum();
    // The mean of each entry's mean (of its completion or total latency),
    // weighted by its completions.
    let weighted = |total: bool| {
        lats.iter()
            .map(|(c, l)| {
                let mean = if total {
                    l.map_or(0.0, |l| l.mean)
                } else {
                    c.mean
                };
                mean * c.n as f64
            })
            .sum::<f64>()
            / samples.max(1) as f64
    };
    let worst = |p: f64| lats.iter().filter_map(|(c, _)| c.at(p)).max();
    t.latency = Some(Latency {
        p50_ns: worst(50.0),
        p99_ns: worst(99.0),
        p999_ns: worst(99.9),
        clat_mean_ns: weighted(false),
        lat_mean_ns: weighted(true),
        samples,
        jobs: lats.len() as u32,
    });
    t
}

#[cfg(test)]
pub(crate) mod tests;
