//! viommu-bench: launch VMs with our VMM and with stock QEMU on your own
//! host, pass an NVMe drive through behind a virtio-iommu (or not), run fio
//! in the guests and compare IOPS and the DMA mapping work per I/O.
//!
//! The crate is layered; a module imports only from its own layer or the
//! ones below it, never from above (`tests/layering.rs` checks this and
//! that no two modules import each other, directly or around a loop):
//!
//! ```text
//! base ← setup ← run ← report ← app     (main.rs calls app)
//! ```
//!
//! - base, at the crate root: [`cli`] (flags and the validated
//!   [`cli::Config`]), [`columns`] (what each column launches), [`plan`]
//!   (cells, rounds and phase names) and [`units`];
//! - [`setup`]: what is done before any VM runs: host checks and consent,
//!   the guest image, binding the drive to vfio-pci;
//! - [`run`]: one VM per cell, watched through its console markers,
//!   counted, traced, and diagnosed when it hangs; its output is
//!   [`run::results`];
//! - [`report`]: the summary drawn from the results, its tables and
//!   sections, the chart;
//! - [`app`]: the command itself, wiring the wings in order.

pub mod app;
pub mod cli;
pub mod columns;
pub mod plan;
pub mod report;
pub mod run;
pub mod setup;
pub mod units;
