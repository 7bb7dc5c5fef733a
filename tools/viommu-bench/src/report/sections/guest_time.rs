//! Where a patched guest's DMA mappings spend their time: the
//! `iommu-dma-time` debugfs counters of the 6.12 series (patch 13) over a
//! measured phase, per I/O. Only the guest can split its mapping time into
//! the IOMMU driver's part (with a virtio-iommu: requests to the host and
//! the wait for them), the bounce pool's copies and dma-iommu's own work;
//! the device's side is in the report's "where the time goes" table.

use serde::{Deserialize, Serialize};

use crate::columns::Column;
use crate::plan::Phase;
use crate::run::guest::FioRecord;
use crate::run::results::CellResult;

/// The counter directory, as the guest's init names counters.
const DIR: &str = "iommu-dma-time/";

/// Microseconds per I/O in one column and phase, medians over rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestTimeRow {
    /// Phase name.
    pub phase: String,
    /// Column tag.
    pub column: String,
    /// dma_map_page()/dma_map_sg(), whole.
    pub map_us: f64,
    /// The IOMMU driver's map within them.
    pub iommu_map_us: f64,
    /// dma_unmap_page()/dma_unmap_sg(), whole.
    pub unmap_us: f64,
    /// The IOMMU driver's unmap (and a strict domain's sync) within them.
    pub iommu_unmap_us: f64,
    /// The bounce pool's copies (within map, unmap and the syncs).
    pub copy_us: f64,
    /// Map and unmap calls per I/O.
    pub calls_per_io: f64,
}

/// The time counter `kind` (`map`, `iommu_unmap`, ...) in `f`, in ns.
fn ns(f: &FioRecord, kind: &str) -> Option<i64> {
    f.counters.get(&format!("{DIR}{kind}_ns")).copied()
}

fn calls(f: &FioRecord, kind: &str) -> i64 {
    f.counters
        .get(&format!("{DIR}{kind}_calls"))
        .copied()
        .unwrap_or(0)
}

/// One row per column and phase whose guest reported the counters
/// (patched guests with the accounting enabled), in phase order.
pub fn rows(columns: &[Column], phases: &[Phase], cells: &[CellResult]) -> Vec<GuestTimeRow> {
    crate::report::cells::phase_medians(columns, phases, cells, |_, f, ios| {
        let Some(map) = ns(f, "map") else {
            return [None; 6];
        };
        let us = |v: i64| Some(v as f64 / 1e3 / ios);
        let get = |k: &str| ns(f, k).unwrap_or(0);
        [
            us(map),
            us(get("iommu_map")),
            us(get("unmap")),
            us(get("iommu_unmap")),
            us(get("copy")),
            Some((calls(f, "map") + calls(f, "unmap")) as f64 / ios),
        ]
    })
    .into_iter()
    .map(|(phase, column, m)| {
        let v = m.map(|x| x.unwrap_or(0.0));
        GuestTimeRow {
            phase,
            column,
            map_us: v[0],
            iommu_map_us: v[1],
            unmap_us: v[2],
            iommu_unmap_us: v[3],
            copy_us: v[4],
            calls_per_io: v[5],
        }
    })
    .collect()
}

/// The table's header.
pub const HEADER: [&str; 8] = [
    "phase",
    "column",
    "map us/IO",
    "of which IOMMU driver",
    "unmap us/IO",
    "of which IOMMU driver",
    "bounce copies us/IO",
    "map+unmap calls/IO",
];

/// The table's cells of one row.
pub fn cells(r: &GuestTimeRow) -> Vec<String> {
    let f = |x: f64| format!("{x:.2}");
    vec![
        r.phase.clone(),
        r.column.clone(),
        f(r.map_us),
        f(r.iommu_map_us),
        f(r.unmap_us),
        f(r.iommu_unmap_us),
        f(r.copy_us),
        f(r.calls_per_io),
    ]
}

/// What the table shows, for the Markdown report.
pub const NOTE: &str = "Where the guest's DMA mapping time goes (patched 6.12 guests: debugfs iommu-dma-time counters over the phase, summed over CPUs, per I/O, medians over rounds; the IOMMU driver's part and the copies are within map and unmap; a lazy domain's deferred flush runs later, outside unmap)";

#[cfg(test)]
mod tests;
