//! Running the cells: one VM per cell of the plan ([`runner`]), watched
//! through the guest's console markers ([`guest`], read by [`console`];
//! fio's JSON output joined by [`fio_chunks`] and read by [`fio_json`]), its device counted by
//! [`metrics`] (our VMM) or [`trace`] over [`qmp`] (stock QEMU, untimed
//! counting phases only), with `--breakdown` recorded by [`host_trace`]
//! and reduced by [`breakdown`], with `--kvm-exits` by [`kvm_exits`]; the
//! VMM's own cost ([`footprint`]), CPU time ([`cpu_time`]), where its
//! threads run with `--pin-vcpus` ([`placement`]), what went
//! wrong in a cell ([`faults`]) and, when a guest hangs, why ([`hang`]).
//! What it produces is [`results`].

pub mod breakdown;
pub mod console;
pub mod counter_source;
pub mod cpu_time;
pub mod faults;
pub mod fio_chunks;
pub mod fio_json;
pub mod footprint;
pub mod guest;
pub mod hang;
pub mod host_trace;
pub mod kvm_exits;
pub mod metrics;
pub mod placement;
pub mod qmp;
pub mod results;
pub mod runner;
pub mod trace;
pub mod vmm_child;
