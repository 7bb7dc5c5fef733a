//! The state at a hang, read before the hung VM is killed, the same way
//! for both VMMs: the liveness gauges twice, a second apart, and where the
//! vCPUs are, named with the guest's and the host's kernel symbols; from
//! our VMM's API ([`super::our_vmm`]) or stock QEMU's monitor
//! ([`super::stock_qemu`]).

use std::path::Path;
use std::time::Duration;

use crate::columns::Launch;
use crate::run::hang::kernel_symbols::Symbols;
use crate::run::hang::our_vmm::{self, Gauges};
use crate::run::hang::stock_qemu;
use crate::run::metrics::HttpSocket;

/// What the VMM of `launch` (process `pid`) says at a hang: the
/// diagnosis and whether the device owes the driver a request (never
/// retried); `None` for a VMM with no way to ask.
pub async fn read(launch: &Launch, pid: Option<u32>) -> Option<(String, bool)> {
    let syms = launch.kernel.as_deref().and_then(Symbols::beside);
    if let Some(sock) = &launch.api_socket {
        Some(our_vmm_state(sock, syms.as_ref()).await)
    } else if let Some(mon) = &launch.monitor {
        Some(stock_qemu_state(mon, pid, syms.as_ref()).await)
    } else {
        None
    }
}

/// Our VMM's liveness gauges read twice, a second apart, and its vCPUs'
/// registers, with what they say (see [`crate::run::hang::our_vmm`]), and whether
/// the device owes the driver a request (never retried).
async fn our_vmm_state(sock: &Path, syms: Option<&Symbols>) -> (String, bool) {
    let ep = HttpSocket::new(sock);
    let first = match ep.text().await {
        Ok(t) => t,
        Err(e) => return (format!("the VMM's API did not answer ({e})"), false),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let then = ep.text().await.unwrap_or_default();
    let (a, b) = (our_vmm::parse(&first), our_vmm::parse(&then));
    // Where the vCPUs are (our VMM's vm.vcpus; older builds have none).
    let vcpus = ep.body("/api/v1/vm.vcpus").await.unwrap_or_default();
    judge_hang(&a, &b, &vcpus, syms)
}

/// Stock QEMU at a hang, through its monitor socket `mon`
/// ([`crate::run::hang::stock_qemu`]): its virtio-iommu's request queue, its vCPUs'
/// registers and stacks and their threads' CPU time over a second, read
/// and judged as ours are (see [`our_vmm_state`]).
async fn stock_qemu_state(mon: &Path, pid: Option<u32>, syms: Option<&Symbols>) -> (String, bool) {
    let first = match stock_qemu::read(mon, pid).await {
        Ok(r) => r,
        Err(e) => return (format!("stock QEMU's monitor did not answer ({e})"), false),
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let then = stock_qemu::read_gauges(mon, pid).await.unwrap_or_default();
    let (text, owes) = judge_hang(&first.gauges, &then, &first.vcpus.to_string(), syms);
    (format!("stock QEMU: {text}"), owes)
}

/// A hang judged from the gauges read a second apart (`a`, `b`) and the
/// vCPUs' answer `raw` (`vm.vcpus` JSON), the same for both VMMs: the
/// diagnosis, where the vCPUs are, and whether the device owes the
/// driver a request (see [`crate::run::hang::our_vmm`]).
fn judge_hang(a: &Gauges, b: &Gauges, raw: &str, syms: Option<&Symbols>) -> (String, bool) {
    let where_ = our_vmm::vcpus(raw, syms, host_symbols().as_ref());
    let verdict = our_vmm::owed(b, &where_, syms.is_some());
    let mut text = format!("{} [{:?}]", our_vmm::diagnose(a, b), b);
    if let Some(v) = &verdict {
        text = format!("{v}; {text}");
    }
    if !where_.is_empty() {
        let list: Vec<String> = where_.iter().map(|v| v.to_string()).collect();
        text += &format!("; vCPUs: {}", list.join("; "));
    } else if !raw.trim().is_empty() {
        text += &format!("; vCPUs: {}", raw.trim());
    }
    (text, verdict.is_some())
}

/// The host kernel's symbols (root reads real addresses in
/// /proc/kallsyms; elsewhere they are zeros and name nothing): they name
/// a vCPU address the guest's do not.
fn host_symbols() -> Option<Symbols> {
    std::fs::read_to_string("/proc/kallsyms")
        .ok()
        .map(|t| Symbols::parse(&t))
}
