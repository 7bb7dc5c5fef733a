//! The report's sections beside the main table, each with its rows, header
//! and note.

pub mod breakdown;
pub mod cpu_time;
pub mod guest_time;
pub mod headline;
pub mod latency;
pub mod order;
pub mod paired;
pub mod places;
