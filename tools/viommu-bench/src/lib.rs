//! viommu-bench: launch VMs with our VMM and with stock QEMU on your own
//! host, pass an NVMe drive through behind a virtio-iommu (or not), run fio
//! in the guests and compare IOPS and the DMA mapping work per I/O.
//!
//! Each module has one job; `main.rs` wires them in this order: [`cli`]
//! (flags) → [`preflight`] (host checks, consent) → [`image`] (guest
//! initramfs) → [`bind`] (vfio-pci, restored on exit) → [`runner`] (one VM
//! per cell of [`plan`], watched by [`guest`] markers, counted by
//! [`metrics`] and, for stock QEMU in untimed counting phases, [`trace`]
//! over [`qmp`]; with `--breakdown`, untimed breakdown phases recorded by
//! [`host_trace`] and read by [`breakdown`]) → [`report`] ([`stats`]) →
//! [`chart`].

pub mod bind;
pub mod breakdown;
pub mod chart;
pub mod checks;
pub mod cli;
pub mod columns;
pub mod cpu_time;
pub mod exec;
pub mod footprint;
pub mod guest;
pub mod guest_time;
pub mod headline;
pub mod host;
pub mod host_trace;
pub mod ikconfig;
pub mod image;
pub mod kvm_exits;
pub mod liveness;
pub mod metrics;
pub mod order;
pub mod paired;
pub mod plan;
pub mod preflight;
pub mod qemu_hang;
pub mod qmp;
pub mod report;
pub mod results;
pub mod runner;
pub mod stats;
pub mod stuck;
pub mod symbols;
pub mod sysfs;
pub mod trace;
pub mod units;
