//! What our VMM says about a guest the tool found hung: its liveness
//! gauges (`GET /metrics`, vmm/src/api/liveness.rs) read twice, a second
//! apart, before the guest is killed, and a one-line reading of them for
//! the cell's warnings. It tells a virtio-iommu that does not answer (a
//! missed kick, a host call that does not return) from a guest that does
//! not take interrupts or writes nothing.

/// The gauges of one reading; `None` when the VMM did not report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Bytes the guest wrote to the UART.
    pub serial_tx: Option<u64>,
    /// The UART's interrupt enable register.
    pub ier: Option<u64>,
    /// The UART's pending interrupt bits.
    pub iir: Option<u64>,
    /// Milliseconds the device thread has served the current notification.
    pub serving_ms: Option<u64>,
    /// The driver's avail index.
    pub driver_avail: Option<u64>,
    /// The used index in guest memory.
    pub used: Option<u64>,
    /// The avail index the device takes next.
    pub device_next_avail: Option<u64>,
    /// The `avail_event` the device published (EVENT_IDX).
    pub avail_event: Option<u64>,
    /// Request queue notifications the device thread took.
    pub kicks: Option<u64>,
    /// The requests published and not taken, by type (`map`, `unmap`,
    /// `iotlb_flush`, `other`, `unreadable`, `not_read`), when the VMM
    /// read them (ours since the gauge exists).
    pub pending: Vec<(String, u64)>,
    /// CPU milliseconds of each vCPU thread, in vCPU order.
    pub vcpu_cpu_ms: Vec<u64>,
}

/// The liveness gauges in a Prometheus text (lines that are not samples
/// are skipped: a hung guest's diagnosis takes what it can get).
pub fn parse(text: &str) -> Gauges {
    let (v, _) = crate::run::metrics::prometheus_samples(text);
    let g = |k: &str| v.get(k).copied();
    Gauges {
        serial_tx: g("vmm_serial_tx_bytes_total"),
        ier: g("vmm_serial_ier"),
        iir: g("vmm_serial_iir"),
        serving_ms: g("viommu_thread_serving_ms"),
        driver_avail: g("viommu_requestq_driver_avail"),
        used: g("viommu_requestq_used"),
        device_next_avail: g("viommu_requestq_device_next_avail"),
        avail_event: g("viommu_requestq_avail_event"),
        kicks: g("viommu_requestq_kicks_total"),
        pending: PENDING_TYPES
            .iter()
            .filter_map(|t| {
                g(&format!("viommu_requestq_pending_requests{{type=\"{t}\"}}"))
                    .map(|n| (t.to_string(), n))
            })
            .collect(),
        vcpu_cpu_ms: (0..)
            .map_while(|i| g(&format!("vmm_vcpu_cpu_ms_total{{vcpu=\"{i}\"}}")))
            .collect(),
    }
}

/// The types `viommu_requestq_pending_requests` counts, in its order.
const PENDING_TYPES: [&str; 6] = [
    "map",
    "unmap",
    "iotlb_flush",
    "other",
    "unreadable",
    "not_read",
];

/// What the requests published and not taken say (`pending`): a lazy
/// guest's UNMAPs queued until its next sync (or, seen in a strict guest of
/// the lab, an unmap added by a vCPU whose state the nested emulation then
/// replaced with the host's, before its kick), or requests not notified yet
/// (Linux adds MAPs and notifies once in `iotlb_sync_map`) or never (a
/// missed kick: then a vCPU waits in the driver's sync, see [`owed`]).
fn untaken(pending: &[(String, u64)]) -> String {
    let n = |t: &str| pending.iter().find(|(k, _)| k == t).map_or(0, |(_, v)| *v);
    let list: Vec<String> = pending
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    let list = list.join(", ");
    if n("unmap") > 0 && pending.iter().all(|(k, v)| k == "unmap" || *v == 0) {
        format!("only UNMAPs ({list}): a lazy guest's queue (sent with its next sync, not what the guest waits on) or an unmap whose vCPU has not kicked yet (see where the vCPUs are)")
    } else if n("map") + n("iotlb_flush") + n("other") > 0 {
        format!("{list}: not notified yet (Linux adds MAPs and notifies in iotlb_sync_map) or a missed kick (if a vCPU waits in the driver's sync)")
    } else {
        format!("{list}: their types could not be read")
    }
}

/// UART register bits.
const IER_THRI: u64 = 0x02;
const IIR_THRI: u64 = 0x02;

/// What two readings a second apart (`first`, `then`) say about the hang.
pub fn diagnose(first: &Gauges, then: &Gauges) -> String {
    let mut out = Vec::new();
    match (then.driver_avail, then.device_next_avail, then.used, then.serving_ms) {
        (_, _, _, Some(ms)) if ms >= 1000 => out.push(format!(
            "the virtio-iommu device thread has been serving one notification for {ms} ms (a host call that does not return?)"
        )),
        (Some(a), Some(n), _, _) if a != n => out.push(format!(
            "the driver published virtio-iommu requests the device has not taken (avail {a}, device at {n}, avail_event {}) and the device thread is waiting: {}",
            then.avail_event.map_or("?".to_string(), |e| e.to_string()),
            if then.pending.is_empty() {
                "not yet notified (a lazy guest queues UNMAPs until its next sync) or a missed kick".to_string()
            } else {
                untaken(&then.pending)
            }
        )),
        (Some(a), _, Some(u), _) if a != u => out.push(format!(
            "the device took virtio-iommu requests it has not completed (avail {a}, used {u})"
        )),
        (Some(_), Some(_), Some(_), _) => {
            out.push("the virtio-iommu has no request outstanding".to_string())
        }
        _ => {}
    }
    match (first.serial_tx, then.serial_tx, then.ier, then.iir) {
        (Some(a), Some(b), _, _) if b > a => {
            out.push(format!("console bytes still arrive ({} in 1 s)", b - a))
        }
        (Some(_), Some(_), Some(ier), Some(iir)) if ier & IER_THRI != 0 && iir & IIR_THRI != 0 => out.push(
            "the console's transmit interrupt is enabled and pending but the guest does not take it (a vCPU with interrupts off)"
                .to_string(),
        ),
        (Some(_), Some(_), Some(ier), _) if ier & IER_THRI != 0 => out.push(
            "the console's transmit interrupt is enabled, none pending, no byte arrives (an interrupt the guest took without sending more?)"
                .to_string(),
        ),
        (Some(_), Some(_), Some(_), _) => {
            out.push("the guest writes nothing to its console (transmit interrupt off)".to_string())
        }
        _ => {}
    }
    if !then.vcpu_cpu_ms.is_empty() && then.vcpu_cpu_ms.len() == first.vcpu_cpu_ms.len() {
        let ran: Vec<u64> = first
            .vcpu_cpu_ms
            .iter()
            .zip(&then.vcpu_cpu_ms)
            .map(|(a, b)| b.saturating_sub(*a))
            .collect();
        let list: Vec<String> = ran.iter().map(u64::to_string).collect();
        out.push(format!(
            "vCPU threads ran {} ms of that second ({})",
            list.join("/"),
            if ran.iter().any(|&ms| ms >= 500) {
                "a vCPU spins: guest code with interrupts off, or a loop in KVM"
            } else {
                "the vCPUs are halted or blocked: waiting for an interrupt that does not come"
            }
        ));
    }
    if out.is_empty() {
        return "the VMM reported no liveness gauges".to_string();
    }
    out.join("; ")
}

/// Where one vCPU was at the hang (our VMM's `GET /api/v1/vm.vcpus`),
/// named with the guest kernel's symbols when they are known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VcpuWhere {
    /// The vCPU's index.
    pub vcpu: u64,
    /// Its instruction pointer, named (`None`: it did not answer).
    pub rip: Option<String>,
    /// The function holding `rip`, when the symbols name it.
    pub function: Option<String>,
    /// Whether it ran with interrupts enabled.
    pub interrupts: Option<bool>,
    /// Kernel text words on its stack, named (a rough call chain).
    pub stack: Vec<String>,
    /// `rip` named by the host's own symbols (`/proc/kallsyms`) when the
    /// guest's do not know it: the vCPU's saved state holds a host kernel
    /// address, so what it "runs" is not guest code (seen in the lab:
    /// `__svm_vcpu_run+0x9c`, the instruction after VMRUN in the lab
    /// host's kvm_amd, a fault of the outer emulator's nested SVM).
    pub host_function: Option<String>,
}

impl std::fmt::Display for VcpuWhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vCPU{} ", self.vcpu)?;
        match &self.rip {
            Some(r) => write!(f, "at {r}")?,
            None => write!(f, "did not answer")?,
        }
        if let Some(h) = &self.host_function {
            write!(
                f,
                " (the host's {h}: not guest code, the vCPU's saved state is the host's)"
            )?;
        }
        if self.interrupts == Some(false) {
            write!(f, " (interrupts off)")?;
        }
        if !self.stack.is_empty() {
            write!(f, " <- {}", self.stack.join(" <- "))?;
        }
        Ok(())
    }
}

/// Stack words shown per vCPU.
const STACK_SHOWN: usize = 8;

/// The vCPUs of a `vm.vcpus` answer (`body`, JSON), named with `syms`
/// (the guest kernel's), and a `rip` they do not know with `host` (the
/// host kernel's, `/proc/kallsyms`).
pub fn vcpus(
    body: &str,
    syms: Option<&crate::run::hang::kernel_symbols::Symbols>,
    host: Option<&crate::run::hang::kernel_symbols::Symbols>,
) -> Vec<VcpuWhere> {
    let Ok(serde_json::Value::Array(v)) = serde_json::from_str::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let hex = |x: &serde_json::Value| {
        x.as_str()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    let name = |a: u64| syms.map_or_else(|| format!("{a:#x}"), |s| s.name(a));
    v.iter()
        .map(|c| {
            let rip = c.get("rip").and_then(hex);
            VcpuWhere {
                vcpu: c.get("vcpu").and_then(|x| x.as_u64()).unwrap_or(0),
                rip: rip.map(name),
                function: rip
                    .and_then(|r| syms.and_then(|s| s.lookup(r)))
                    .map(|(n, _)| n.to_string()),
                interrupts: c.get("interrupts_enabled").and_then(|x| x.as_bool()),
                host_function: rip
                    .filter(|r| syms.and_then(|s| s.lookup(*r)).is_none())
                    .and_then(|r| host.and_then(|h| h.lookup(r)))
                    .map(|(n, off)| format!("{n}+{off:#x}")),
                stack: c
                    .get("stack_text")
                    .and_then(|x| x.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(hex)
                            .take(STACK_SHOWN)
                            .map(name)
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Whether the device owes the driver a request at the hang: the driver
/// has requests outstanding (published and not used) and a vCPU waits
/// for them in the virtio-iommu driver. A hang of that kind is a bug of
/// the VMM or of the guest's driver, whatever the lab's emulation does,
/// and is never run again. Requests published but not taken are not
/// enough on their own: a lazy guest queues UNMAPs without notifying
/// until its next sync. `None` when it does not (or, without the guest
/// kernel's symbols, cannot be told).
pub fn owed(g: &Gauges, vcpus: &[VcpuWhere], have_symbols: bool) -> Option<String> {
    let (a, u) = (g.driver_avail?, g.used?);
    if a == u || !have_symbols {
        return None;
    }
    let waiting: Vec<String> = vcpus
        .iter()
        .filter(|v| {
            v.function
                .as_deref()
                .is_some_and(crate::run::hang::kernel_symbols::waits_for_viommu)
        })
        .map(|v| format!("vCPU{} in {}", v.vcpu, v.rip.as_deref().unwrap_or("?")))
        .collect();
    if waiting.is_empty() {
        return None;
    }
    let taken = match g.device_next_avail {
        Some(n) if n != a => format!("the device took up to {n} of them"),
        _ => "the device took them all".to_string(),
    };
    Some(format!(
        "THE DEVICE OWES THE DRIVER A REQUEST: {} waits for the virtio-iommu (avail {a}, used {u}: {taken}; avail_event {})",
        waiting.join(", "),
        g.avail_event.map_or("?".to_string(), |e| e.to_string())
    ))
}

#[cfg(test)]
mod tests;
