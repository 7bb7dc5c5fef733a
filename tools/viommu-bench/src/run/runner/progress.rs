//! The run's progress on stderr: which cell of how many, its round and
//! phase, and the time left.

use std::time::{Duration, Instant};

use crate::units::human_duration;

/// Progress lines on stderr: cell, round, phase, ETA.
#[derive(Debug)]
pub struct Progress {
    /// Cells in the whole run.
    pub total: usize,
    /// Cells finished.
    pub done: usize,
    /// Rounds in the run.
    pub rounds: u32,
    /// The first round's number (`--first-round`): above 1, the run is a
    /// part of a longer one, whose total this run does not know.
    pub first_round: u32,
    /// Estimated duration of one cell (replaced by the measured mean).
    pub estimate: Duration,
    started: Instant,
}

impl Progress {
    /// A run of `total` cells in `rounds` rounds, each about `estimate`.
    pub fn new(total: usize, rounds: u32, estimate: Duration) -> Self {
        Progress {
            total,
            done: 0,
            rounds,
            first_round: 1,
            estimate,
            started: Instant::now(),
        }
    }

    /// Time left: the remaining cells at the mean cell time so far.
    pub fn eta(&self, into_current: Duration) -> Duration {
        let per = if self.done == 0 {
            self.estimate
        } else {
            self.started.elapsed().saturating_sub(into_current) / self.done as u32
        };
        (per * (self.total - self.done) as u32).saturating_sub(into_current)
    }

    /// Say where the run is.
    pub fn line(&self, column: &str, round: u32, what: &str, into_current: Duration) {
        eprintln!(
            "[viommu-bench] cell {}/{} round {}{} {column}: {what} (ETA {})",
            self.done + 1,
            self.total,
            round + 1,
            if self.first_round > 1 {
                String::new()
            } else {
                format!("/{}", self.rounds)
            },
            human_duration(self.eta(into_current)),
        );
    }
}
