//! Stock QEMU's device counters: its trace events, written by the `log`
//! backend to the `-D` file, counted as the file grows. That backend drops
//! lines under load, so these counts are lower bounds.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::metrics::DeviceCounters;

/// The trace events QEMU is started with.
pub const EVENTS: [&str; 3] = [
    "virtio_iommu_map",
    "virtio_iommu_unmap",
    "vfio_iommu_map_notify",
];

/// One counted trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    /// A virtio-iommu MAP request.
    Map,
    /// A virtio-iommu UNMAP request.
    Unmap,
    /// A VFIO map or unmap QEMU made for the device (`vfio_iommu_map_notify`).
    VfioCall,
}

/// The event of one trace line: `[PID@SECS.USECS:]EVENT args...`.
pub fn classify(line: &str) -> Option<TraceEvent> {
    let line = line.trim_start();
    // The optional "1234@1700000000.123456:" prefix (timestamped messages).
    let body = match line.split_once(':') {
        Some((pre, rest))
            if pre.contains('@')
                && pre
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '@' || c == '.') =>
        {
            rest
        }
        _ => line,
    };
    match body.split(|c: char| c.is_whitespace() || c == '(').next()? {
        "virtio_iommu_map" => Some(TraceEvent::Map),
        "virtio_iommu_unmap" => Some(TraceEvent::Unmap),
        "vfio_iommu_map_notify" => Some(TraceEvent::VfioCall),
        _ => None,
    }
}

/// Running counts of a growing trace file.
#[derive(Debug, Default)]
pub struct TraceCounter {
    offset: u64,
    partial: Vec<u8>,
    counts: DeviceCounters,
}

impl TraceCounter {
    /// Count the complete lines in `bytes` (a continuation of what came before).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let rest = self.partial.split_off(last_nl + 1);
        for line in self.partial.split(|&b| b == b'\n') {
            match classify(&String::from_utf8_lossy(line)) {
                Some(TraceEvent::Map) => self.counts.map_requests += 1,
                Some(TraceEvent::Unmap) => self.counts.unmap_requests += 1,
                Some(TraceEvent::VfioCall) => self.counts.vfio_calls += 1,
                None => {}
            }
        }
        self.partial = rest;
    }

    /// Read what `path` gained since the last call and return the counts so
    /// far (a missing file counts nothing yet).
    pub fn poll(&mut self, path: &Path) -> std::io::Result<DeviceCounters> {
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self.counts),
            Err(e) => return Err(e),
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        self.feed(&buf);
        Ok(self.counts)
    }

    /// The counts so far.
    pub fn counts(&self) -> DeviceCounters {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_qemu_log_lines() {
        assert_eq!(
            classify("virtio_iommu_map domain=1 virt_start=0xfffff000 virt_end=0xffffffff phys_start=0x1000 flags=3"),
            Some(TraceEvent::Map)
        );
        assert_eq!(
            classify(
                "4242@1700000000.123456:virtio_iommu_unmap domain=1 virt_start=0x0 virt_end=0xfff"
            ),
            Some(TraceEvent::Unmap)
        );
        assert_eq!(
            classify("vfio_iommu_map_notify iommu map @ iova 0xfffff000 - 0xffffffff"),
            Some(TraceEvent::VfioCall)
        );
        assert_eq!(classify("virtio_iommu_unmap_done domain=1"), None);
        assert_eq!(classify("qemu-system-x86_64: warning: something"), None);
        assert_eq!(classify(""), None);
    }

    #[test]
    fn counts_across_partial_writes() {
        let mut t = TraceCounter::default();
        t.feed(b"virtio_iommu_map d=1\nvirtio_iommu_un");
        assert_eq!(t.counts().map_requests, 1);
        assert_eq!(t.counts().unmap_requests, 0);
        t.feed(b"map d=1\nvfio_iommu_map_notify iommu unmap\n");
        let c = t.counts();
        assert_eq!((c.map_requests, c.unmap_requests, c.vfio_calls), (1, 1, 1));
    }

    #[test]
    fn polls_a_growing_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.log");
        let mut t = TraceCounter::default();
        assert_eq!(t.poll(&p).unwrap(), DeviceCounters::default());
        std::fs::write(&p, "virtio_iommu_map a\nvirtio_iommu_map b\n").unwrap();
        assert_eq!(t.poll(&p).unwrap().map_requests, 2);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"virtio_iommu_unmap c\n").unwrap();
        let c = t.poll(&p).unwrap();
        assert_eq!((c.map_requests, c.unmap_requests), (2, 1));
    }
}
