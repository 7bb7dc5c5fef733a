//! `results.partial.jsonl`: the run's cells as they finish, so a run cut
//! short (SIGKILL, the OOM killer, a lost host) leaves what it measured.
//! A header line with the run's settings, then one cell a line, each
//! flushed and synced before the next cell starts; `--report-from` reads
//! it (or the directory holding it) as cell lines.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::run::results::CellResult;
use crate::setup::provenance::Provenance;

/// The line `--serial-report` prints once before its cells, followed by
/// the run's provenance as JSON: a table drawn from the console's cell
/// lines (`--report-from`) gets its header from it.
pub const PROVENANCE_MARK: &str = "@@LAB-PROVENANCE@@";

/// The partial file's name, next to results.json.
pub const PARTIAL_NAME: &str = "results.partial.jsonl";

/// The first line: what run the cells below belong to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The run, as results.json would say it.
    pub viommu_bench_partial: RunInfo,
}

/// The header's settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// `viommu-bench VERSION (REVISION)`.
    pub tool: String,
    /// The command line.
    pub command: Vec<String>,
    /// Start, UTC.
    pub started: String,
    /// The drive.
    pub device: String,
    /// The column tags, in order.
    pub columns: Vec<String>,
    /// How many cells the run planned.
    pub cells_planned: usize,
    /// The settings results.json records.
    pub settings: BTreeMap<String, String>,
    /// The host and code the run measured on, for a report drawn from
    /// this file (absent in files from before it was recorded).
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

/// The open partial file.
pub struct PartialFile {
    file: File,
    path: PathBuf,
}

impl PartialFile {
    /// Creates `dir/results.partial.jsonl` with its header line.
    pub fn create(dir: &Path, header: &Header) -> Result<PartialFile, String> {
        let path = dir.join(PARTIAL_NAME);
        let file = File::create(&path)
            .map_err(|e| format!("cannot create {}: {e}; pick another --out", path.display()))?;
        let mut f = PartialFile { file, path };
        let line = serde_json::to_string(header).map_err(|e| e.to_string())?;
        f.line(&line)?;
        Ok(f)
    }

    /// Appends `cell` as one line, flushed and synced.
    pub fn append(&mut self, cell: &CellResult) -> Result<(), String> {
        let line = serde_json::to_string(cell).map_err(|e| e.to_string())?;
        self.line(&line)
    }

    fn line(&mut self, line: &str) -> Result<(), String> {
        let mut write = || -> std::io::Result<()> {
            self.file.write_all(line.as_bytes())?;
            self.file.write_all(b"\n")?;
            self.file.flush()?;
            self.file.sync_data()
        };
        write().map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The header of a partial file's first line, if `line` is one.
pub fn header_of(line: &str) -> Option<Header> {
    line.contains("viommu_bench_partial")
        .then(|| serde_json::from_str(line).ok())
        .flatten()
}

/// `--report-from DIR`: its results.json, else its partial file.
pub fn resolve(path: &Path) -> PathBuf {
    if !path.is_dir() {
        return path.to_path_buf();
    }
    let full = path.join("results.json");
    if full.is_file() {
        full
    } else {
        path.join(PARTIAL_NAME)
    }
}

#[cfg(test)]
mod tests;
