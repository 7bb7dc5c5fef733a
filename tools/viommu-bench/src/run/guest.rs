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
}

/// One fio run's result, as the guest reports it (fio terse v3 fields).
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
}

fn one() -> u32 {
    1
}

impl FioRecord {
    /// Read plus write IOPS.
    pub fn iops(&self) -> u64 {
        self.read_iops + self.write_iops
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
    let Some((kind, rest)) = m.split_once("@@") else {
        return Ok(None);
    };
    let rest = rest.trim();
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
