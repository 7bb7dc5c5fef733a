//! Diagnosing a guest the tool found hung, and a VMM that will not go
//! away: our VMM's liveness gauges ([`our_vmm`]), stock QEMU's monitor
//! ([`stock_qemu`]), the guest kernel's symbols that name where its vCPUs
//! are ([`kernel_symbols`]) and the host kernel stacks of a VMM that
//! SIGKILL does not end ([`unkillable_vmm`]); [`state`] reads either
//! VMM at a hang.

pub mod kernel_symbols;
pub mod our_vmm;
pub mod state;
pub mod stock_qemu;
pub mod unkillable_vmm;
