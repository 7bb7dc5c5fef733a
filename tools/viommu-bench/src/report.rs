//! The report drawn from the results: the summary ([`summary`], made by
//! [`summarize`] from what each cell measured, [`cells`]), each phase's
//! [`verdict`], the sections beside the table ([`sections`], [`exits`]),
//! its two renderings ([`text`], [`markdown`], sharing [`row_text`]), the
//! results document ([`document`]), the spread of a sample and the paired
//! test ([`stats`]), the table's family of tests ([`significance`]) and
//! the chart ([`chart`]).

pub mod cells;
pub mod chart;
pub mod document;
pub mod exits;
pub mod markdown;
pub mod row_text;
pub mod sections;
pub mod significance;
pub mod stats;
pub mod summarize;
pub mod summary;
pub mod text;
pub mod verdict;

#[cfg(test)]
pub(crate) mod tests;
