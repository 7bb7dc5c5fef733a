//! fio's JSON output on the console: the guest sends it as numbered chunk
//! lines (`@@LAB-FIO@@ NAME SEQ/TOTAL DATA`, see [`FioChunk`]) and then
//! the run's record (`@@LAB-GUEST@@ {"event":"fio",...,"json_bytes":N}`);
//! [`Assembler`] joins the chunks, checks them against the record (in
//! order, all there, N bytes, at most [`MAX_JSON_BYTES`]) and fills the
//! record from the JSON ([`crate::run::fio_json`]). A record without
//! `json_bytes` (an older guest's, the idle phase's) passes as it is.

use crate::run::fio_json::{self, FioJsonError, MAX_JSON_BYTES};
use crate::run::guest::{FioChunk, FioRecord};

/// Why a run's record has no figures.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// A chunk out of order, or of a run whose chunks stopped.
    #[error("fio {phase}: chunk {got} of {total} of its JSON output came where chunk {expected} was due")]
    OutOfOrder {
        /// Phase.
        phase: String,
        /// The chunk that came.
        got: u32,
        /// The chunk due.
        expected: u32,
        /// Chunks in all.
        total: u32,
    },
    /// The chunks add up to more than [`MAX_JSON_BYTES`].
    #[error(
        "fio {phase}: its JSON output passed {MAX_JSON_BYTES} bytes after chunk {seq} of {total}"
    )]
    TooLarge {
        /// Phase.
        phase: String,
        /// The chunk that passed the limit.
        seq: u32,
        /// Chunks in all.
        total: u32,
    },
    /// The record came before the last chunk, or without any.
    #[error("fio {phase}: its record came after {got} of the {total} chunks of its JSON output")]
    Incomplete {
        /// Phase.
        phase: String,
        /// Chunks that came.
        got: u32,
        /// Chunks in all (0: none was seen).
        total: u32,
    },
    /// The joined chunks are not the size the record says.
    #[error("fio {phase}: its JSON output came as {got} bytes, the guest sent {sent}")]
    Size {
        /// Phase.
        phase: String,
        /// Bytes joined.
        got: usize,
        /// Bytes the record says.
        sent: u64,
    },
    /// The JSON itself.
    #[error("fio {phase}: {source}")]
    Json {
        /// Phase.
        phase: String,
        /// What is wrong with it.
        source: FioJsonError,
    },
}

/// The run whose chunks are coming in.
#[derive(Debug)]
struct Partial {
    phase: String,
    total: u32,
    got: u32,
    buf: String,
}

/// The chunks of the run in flight (one at a time: the guest sends a
/// run's chunks and its record before the next run starts), and the
/// first error of a run whose chunks went wrong.
#[derive(Debug, Default)]
pub struct Assembler {
    partial: Option<Partial>,
    failed: Option<ChunkError>,
}

fn phase_of(e: &ChunkError) -> &str {
    match e {
        ChunkError::OutOfOrder { phase, .. }
        | ChunkError::TooLarge { phase, .. }
        | ChunkError::Incomplete { phase, .. }
        | ChunkError::Size { phase, .. }
        | ChunkError::Json { phase, .. } => phase,
    }
}

impl Assembler {
    /// Take one chunk. Chunk 1 starts a run (dropping any unfinished
    /// one); the others must follow in order. An error is kept for the
    /// run's record; the rest of that run's chunks are ignored.
    pub fn chunk(&mut self, c: FioChunk) {
        if self.failed.as_ref().is_some_and(|e| phase_of(e) == c.phase) && c.seq != 1 {
            return;
        }
        if c.seq == 1 {
            self.failed = None;
            self.partial = Some(Partial {
                phase: c.phase.clone(),
                total: c.total,
                got: 0,
                buf: String::new(),
            });
        }
        let Some(p) = self
            .partial
            .as_mut()
            .filter(|p| p.phase == c.phase && p.total == c.total && p.got + 1 == c.seq)
        else {
            let expected = match &self.partial {
                Some(p) if p.phase == c.phase => p.got + 1,
                _ => 1,
            };
            self.fail(ChunkError::OutOfOrder {
                phase: c.phase,
                got: c.seq,
                expected,
                total: c.total,
            });
            return;
        };
        if p.buf.len() + c.data.len() > MAX_JSON_BYTES {
            self.fail(ChunkError::TooLarge {
                phase: c.phase,
                seq: c.seq,
                total: c.total,
            });
            return;
        }
        p.buf.push_str(&c.data);
        p.got += 1;
    }

    fn fail(&mut self, e: ChunkError) {
        self.partial = None;
        self.failed = Some(e);
    }

    /// The guest's record `rec` of a run, with the figures of the JSON
    /// output its chunks carried; as it is when it names no JSON output.
    pub fn complete(&mut self, rec: FioRecord) -> Result<FioRecord, ChunkError> {
        let Some(sent) = rec.json_bytes else {
            return Ok(rec);
        };
        let phase = rec.phase.clone();
        if sent == 0 {
            return Err(ChunkError::Json {
                phase,
                source: FioJsonError::NoObject,
            });
        }
        if let Some(e) = self.failed.take() {
            if phase_of(&e) == phase {
                return Err(e);
            }
        }
        let p = match self.partial.take() {
            Some(p) if p.phase == phase && p.got == p.total => p,
            Some(p) if p.phase == phase => {
                return Err(ChunkError::Incomplete {
                    phase,
                    got: p.got,
                    total: p.total,
                })
            }
            _ => {
                return Err(ChunkError::Incomplete {
                    phase,
                    got: 0,
                    total: 0,
                })
            }
        };
        if p.buf.len() as u64 != sent {
            return Err(ChunkError::Size {
                phase,
                got: p.buf.len(),
                sent,
            });
        }
        let out = fio_json::parse(&p.buf).map_err(|source| ChunkError::Json {
            phase: phase.clone(),
            source,
        })?;
        Ok(out.apply(rec))
    }
}

#[cfg(test)]
mod tests;
