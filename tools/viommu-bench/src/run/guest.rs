//! The guest protocol: marker lines the guest's /init (guest/init, the
//! lab's protocol) prints on the serial console, and the phase names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the guest reported when it booted.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BootInfo {
    /// `uname -r`.
    #[serde(default)]
    pub kernel: String,
    /// Whether /dev/nvme0n1 appeared.
    #[serde(default)]
    pub nvme: bool,
    /// IOMMU group types and counts, e.g. `DMA-FQ:1`.
    #[serde(default)]
    pub iommu_groups: String,
    /// The guest's /proc/cmdline.
    #[serde(default)]
    pub cmdline: String,
    /// The reserved IOVA regions of the NVMe's IOMMU group, `start end
    /// type` lines joined by `;` (absent: the guest did not report them).
    #[serde(default)]
    pub resv: Option<String>,
    /// The virtio-iommu driver's input range in bits ("input address: N
    /// bits" at probe; 0 or absent: not seen): IOVAs at or above 2^N are
    /// outside every domain's aperture.
    #[serde(default)]
    pub iova_bits: u32,
    /// The guest's IOMMU units (/sys/class/iommu, `,`-joined): `dmar*`
    /// VT-d, `ivhd*` AMD-Vi, a virtio device's name for virtio-iommu
    /// (absent: not reported; empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommus: Option<String>,
    /// The NVMe's IOMMU group type: `DMA` (strict), `DMA-FQ` (lazy),
    /// `identity` (absent: not reported; empty: no group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_domain: Option<String>,
    /// The guest's clocksource (absent: not reported).
    #[serde(default)]
    pub clocksource: Option<String>,
    /// The CPU flags the guest saw (/proc/cpuinfo), space-separated.
    #[serde(default)]
    pub cpu_flags: Option<String>,
    /// The NVMe's largest request in KiB (max_hw_sectors_kb; absent: not
    /// reported, 0: no NVMe).
    #[serde(default)]
    pub max_hw_kb: Option<u64>,
    /// The smallest I/O the guest used: the namespace's logical block size
    /// (its own sysfs, else the host's `lab.lbs`, else 512; absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lbs: Option<u64>,
    /// The guest's fio (`fio --version`, e.g. `fio-3.39`): the host's
    /// when the tool built the image (absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fio: Option<String>,
    /// The guest's busybox (its banner's version, e.g. `v1.37.0 (Debian
    /// 1:1.37.0-6+b9)`; absent: not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busybox: Option<String>,
    /// The 2 MiB huge pages the guest reserved for fio's buffers
    /// (`--guest-hugepages`, its `lab.hugebuf`; 0: none asked; absent:
    /// not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugebuf: Option<u64>,
}

/// One fio run's result: the guest's record (phase, jobs, its counters,
/// the size of fio's JSON output it sent before it), with the figures the
/// host read from that JSON ([`crate::run::fio_json`]); records of older
/// guests carry the figures themselves (fio terse v3 fields).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FioRecord {
    /// Phase name.
    pub phase: String,
    /// fio jobs.
    #[serde(default = "one")]
    pub numjobs: u32,
    /// fio's error code (0: none).
    #[serde(default)]
    pub error: i64,
    /// KiB read.
    #[serde(default)]
    pub read_kib: u64,
    /// Read bandwidth, KiB/s.
    #[serde(default)]
    pub read_bw_kib: u64,
    /// Read IOPS.
    #[serde(default)]
    pub read_iops: u64,
    /// Read runtime, ms.
    #[serde(default)]
    pub read_ms: u64,
    /// KiB written.
    #[serde(default)]
    pub write_kib: u64,
    /// Write bandwidth, KiB/s.
    #[serde(default)]
    pub write_bw_kib: u64,
    /// Write IOPS.
    #[serde(default)]
    pub write_iops: u64,
    /// Write runtime, ms.
    #[serde(default)]
    pub write_ms: u64,
    /// Guest debugfs counters, after minus before the run.
    #[serde(default)]
    pub counters: BTreeMap<String, i64>,
    /// The same counters' values after the run (the idle phase only: its
    /// gauges, e.g. the reuse cache's live `entries`, must reach 0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub after: BTreeMap<String, i64>,
    /// Bytes of fio's JSON output the guest sent in `@@LAB-FIO@@` chunk
    /// lines before this record (absent: a record that carries its
    /// figures itself, as older guests' and the idle phase's do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_bytes: Option<u64>,
    /// fio's version, from its JSON output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fio_version: Option<String>,
    /// Read completion latency (from fio's JSON output; absent: no reads,
    /// or a record from before the JSON output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lat: Option<Latency>,
    /// Write completion latency, the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_lat: Option<Latency>,
}

/// The latency of one direction of a fio run, from fio's JSON output:
/// completion latency (`clat_ns`: submission to completion) percentiles
/// and mean, and the mean of the total latency (`lat_ns`, with the
/// submission).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Median completion latency, ns.
    #[serde(default)]
    pub p50_ns: Option<u64>,
    /// 99th percentile, ns.
    #[serde(default)]
    pub p99_ns: Option<u64>,
    /// 99.9th percentile, ns.
    #[serde(default)]
    pub p999_ns: Option<u64>,
    /// Mean completion latency, ns.
    #[serde(default)]
    pub clat_mean_ns: f64,
    /// Mean total latency, ns.
    #[serde(default)]
    pub lat_mean_ns: f64,
    /// Completions sampled.
    #[serde(default)]
    pub samples: u64,
    /// fio job entries these come from: 1 with `--group_reporting` (the
    /// guest's runs), the run's own distribution; more: the percentiles
    /// are the largest job's (an upper bound), the means weighted.
    #[serde(default = "one")]
    pub jobs: u32,
}

fn one() -> u32 {
    1
}

impl FioRecord {
    /// Read plus write IOPS.
    pub fn iops(&self) -> u64 {
        self.read_iops + self.write_iops
    }

    /// The completion latency the report shows: the reads' where the run
    /// read, else the writes', with which of the two it is.
    pub fn latency(&self) -> Option<(&'static str, &Latency)> {
        match (&self.read_lat, &self.write_lat) {
            (Some(r), _) if self.read_iops > 0 || self.read_kib > 0 => Some(("read", r)),
            (_, Some(w)) if self.write_iops > 0 || self.write_kib > 0 => Some(("write", w)),
            _ => None,
        }
    }

    /// Sum of the guest counters whose name ends in `suffix` (e.g. `/hits`).
    pub fn counter_sum(&self, suffix: &str) -> i64 {
        self.counters
            .iter()
            .filter(|(k, _)| k.ends_with(suffix))
            .map(|(_, v)| *v)
            .sum()
    }

    /// Hit rate (0-1) of one of the guest's mapping caches (its debugfs
    /// directory, e.g. `iommu-dma-pool` or `iommu-dma-reuse`) in the run, or
    /// None if it neither hit nor missed. Below the pool's threshold a map
    /// may miss the reuse cache and then hit the pool: the two are apart.
    pub fn hit_rate(&self, cache: &str) -> Option<f64> {
        let get = |k: &str| {
            self.counters
                .get(&format!("{cache}/{k}"))
                .map_or(0.0, |v| (*v).max(0) as f64)
        };
        let (h, m) = (get("hits"), get("misses"));
        (h + m > 0.0).then(|| h / (h + m))
    }
}

/// One marker line.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    /// `@@LAB-PHASE@@ begin NAME`.
    PhaseBegin(String),
    /// `@@LAB-PHASE@@ end NAME`.
    PhaseEnd(String),
    /// `@@LAB-GUEST@@ {"event":"boot",...}`.
    Boot(BootInfo),
    /// `@@LAB-GUEST@@ {"event":"fio",...}`.
    Fio(FioRecord),
    /// `@@LAB-FIO@@ NAME SEQ/TOTAL DATA`: a piece of fio's JSON output.
    FioChunk(FioChunk),
    /// `@@LAB-GUEST@@ {"event":"error","message":...}`.
    Error(String),
    /// `@@LAB-GUEST@@ {"event":"attack",...}`: what one attacker of a
    /// hostile guest (`lab.hostile=1`) did.
    Attack(AttackRecord),
    /// `@@LAB-GUEST-DONE@@ rc=N`.
    Done(i32),
    /// `@@LAB-PROGRESS@@ READS WRITES`: I/Os completed so far.
    Progress(u64, u64),
}

/// One attacker of a hostile guest (the guest init's `lab.hostile=1`,
/// the lab's `hostile` scenario): which attack, whether it could be set
/// up, how many operations it made and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttackRecord {
    /// The attack, e.g. `msix-pba`, `viommu-config`, `avail-index`.
    pub name: String,
    /// Whether it found its target and ran.
    pub ok: bool,
    /// Operations made (reads, writes, corruptions).
    #[serde(default)]
    pub ops: u64,
    /// Seconds it ran.
    #[serde(default)]
    pub seconds: u64,
    /// What it found or why it could not run.
    #[serde(default)]
    pub detail: String,
}

/// Bytes of fio's JSON output one chunk line carries at most (the guest
/// sends 1000).
pub const MAX_CHUNK_BYTES: usize = 16 * 1024;
/// Chunks of one fio run's JSON output at most.
pub const MAX_CHUNKS: u32 = 4096;

/// One `@@LAB-FIO@@ NAME SEQ/TOTAL DATA` line: the SEQth of TOTAL pieces
/// of the JSON output of the fio run of phase NAME (the guest drops the
/// lines' leading blanks and joins them; DATA is taken as is, blanks too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioChunk {
    /// Phase name.
    pub phase: String,
    /// This chunk's number, from 1.
    pub seq: u32,
    /// How many chunks the run's output has.
    pub total: u32,
    /// The piece of JSON.
    pub data: String,
}

impl FioChunk {
    /// The chunk after the marker (`raw`: `" NAME SEQ/TOTAL DATA"`).
    fn parse(raw: &str) -> Result<FioChunk, String> {
        let expected = "expected 'NAME SEQ/TOTAL DATA'";
        let raw = raw.strip_prefix(' ').ok_or(expected)?;
        let (phase, rest) = raw.split_once(' ').ok_or(expected)?;
        let (count, data) = rest.split_once(' ').unwrap_or((rest, ""));
        let (seq, total) = count
            .split_once('/')
            .and_then(|(s, t)| Some((s.parse::<u32>().ok()?, t.parse::<u32>().ok()?)))
            .ok_or(expected)?;
        if phase.is_empty() || phase.len() > 200 {
            return Err("a phase name of 1 to 200 bytes expected".into());
        }
        if seq == 0 || seq > total || total > MAX_CHUNKS {
            return Err(format!(
                "chunk {seq} of {total}: 1 <= SEQ <= TOTAL <= {MAX_CHUNKS} expected"
            ));
        }
        if data.len() > MAX_CHUNK_BYTES {
            return Err(format!(
                "a chunk of {} bytes, more than {MAX_CHUNK_BYTES}",
                data.len()
            ));
        }
        Ok(FioChunk {
            phase: phase.to_string(),
            seq,
            total,
            data: data.to_string(),
        })
    }
}

/// A marker line that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("guest marker line {line:?}: {why}")]
pub struct ProtocolError {
    /// The line.
    pub line: String,
    /// What is wrong with it.
    pub why: String,
}

/// The marker in `line`, if any. Markers may follow other console output
/// on the same line (a kernel message without its newline).
pub fn parse_line(line: &str) -> Result<Option<Marker>, ProtocolError> {
    let line = line.trim_end_matches(['\r', '\n']);
    let Some(at) = line.find("@@LAB-") else {
        return Ok(None);
    };
    let m = &line[at + 6..];
    let Some((kind, raw)) = m.split_once("@@") else {
        return Ok(None);
    };
    let rest = raw.trim();
    let err = |why: String| ProtocolError {
        line: line.to_string(),
        why,
    };
    Ok(Some(match kind {
        "PHASE" => match rest.split_once(' ') {
            Some(("begin", n)) => Marker::PhaseBegin(n.trim().into()),
            Some(("end", n)) => Marker::PhaseEnd(n.trim().into()),
            _ => return Err(err("expected 'begin NAME' or 'end NAME'".into())),
        },
        "GUEST" => {
            let v: serde_json::Value =
                serde_json::from_str(rest).map_err(|e| err(format!("bad JSON: {e}")))?;
            match v.get("event").and_then(|e| e.as_str()) {
                Some("boot") => Marker::Boot(
                    serde_json::from_value(v).map_err(|e| err(format!("bad boot record: {e}")))?,
                ),
                Some("fio") => Marker::Fio(
                    serde_json::from_value(v).map_err(|e| err(format!("bad fio record: {e}")))?,
                ),
                Some("attack") => Marker::Attack(
                    serde_json::from_value(v)
                        .map_err(|e| err(format!("bad attack record: {e}")))?,
                ),
                Some("error") => Marker::Error(
                    v.get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("")
                        .to_string(),
                ),
                other => return Err(err(format!("unknown event {other:?}"))),
            }
        }
        "FIO" => Marker::FioChunk(FioChunk::parse(raw).map_err(err)?),
        "GUEST-DONE" => {
            let rc = rest
                .strip_prefix("rc=")
                .and_then(|r| r.parse().ok())
                .ok_or_else(|| err("expected rc=N".into()))?;
            Marker::Done(rc)
        }
        "PROGRESS" => {
            let mut it = rest.split_whitespace().map(str::parse::<u64>);
            match (it.next(), it.next()) {
                (Some(Ok(r)), Some(Ok(w))) => Marker::Progress(r, w),
                _ => return Err(err("expected two counts".into())),
            }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests;
