//! Liveness gauges in `GET /metrics`: what a guest that stopped talking
//! looks like from the VMM, so a hang can be told apart from the outside
//! (the bench tool reads them before it kills a guest it found hung):
//! - the virtio-iommu's device thread: serving one notification for long
//!   (stuck in a host call), or waiting while the driver's avail index is
//!   ahead of the device's (a missed kick: the driver spins for an answer);
//! - the UART: the transmit interrupt enabled and pending while no byte
//!   arrives means the guest does not take interrupts (a vCPU spinning
//!   with interrupts off, or a lost interrupt).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::devices::serial::SerialDevice;
use crate::devices::viommu::ThreadStatus;

/// Where the liveness gauges come from.
pub struct Liveness {
    /// The console UART.
    pub serial: Arc<Mutex<SerialDevice>>,
    /// The virtio-iommu's device thread, if there is a virtio-iommu.
    pub viommu: Option<Arc<ThreadStatus>>,
    /// The vCPU threads' CPU-time clocks, in vCPU order.
    pub vcpu_clocks: Vec<Option<libc::clockid_t>>,
}

/// Milliseconds of CPU time on `clock`, if it can be read.
fn cpu_ms(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; a stale clock id fails
    // with EINVAL.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| {
        u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
            + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
    })
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: Option<u64>) {
    if let Some(v) = value {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
}

impl Liveness {
    /// The gauges and counters as Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let s = self
            .serial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reading();
        metric(
            &mut out,
            "vmm_serial_tx_bytes_total",
            "counter",
            "Bytes the guest wrote to the console UART's transmit register.",
            Some(s.tx_bytes),
        );
        metric(
            &mut out,
            "vmm_serial_irqs_total",
            "counter",
            "Interrupt edges the console UART raised.",
            Some(s.irqs),
        );
        metric(
            &mut out,
            "vmm_serial_irq_retriggers_total",
            "counter",
            "Console UART interrupts raised again because the guest left them pending (a lost edge, or a guest not taking interrupts).",
            Some(s.retriggers),
        );
        metric(
            &mut out,
            "vmm_serial_ier",
            "gauge",
            "The console UART's interrupt enable register (bit 1: transmit-empty interrupt).",
            Some(s.ier.into()),
        );
        metric(&mut out, "vmm_serial_iir", "gauge", "The console UART's pending interrupt bits (1: none pending, 2: transmit empty, 4: data available).", Some(s.iir.into()));
        let cpu: Vec<(usize, u64)> = self
            .vcpu_clocks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, cpu_ms((*c)?)?)))
            .collect();
        if !cpu.is_empty() {
            let _ = writeln!(
                out,
                "# HELP vmm_vcpu_cpu_ms_total CPU time of each vCPU thread (a hung guest whose vCPU runs flat out spins; one that does not is halted).\n# TYPE vmm_vcpu_cpu_ms_total counter"
            );
            for (i, ms) in cpu {
                let _ = writeln!(out, "vmm_vcpu_cpu_ms_total{{vcpu=\"{i}\"}} {ms}");
            }
        }
        if let Some(t) = &self.viommu {
            let r = t.read();
            metric(
                &mut out,
                "viommu_thread_wakeups_total",
                "counter",
                "Times the virtio-iommu device thread woke up.",
                Some(r.wakeups),
            );
            metric(&mut out, "viommu_thread_serving_ms", "gauge", "How long the device thread has been serving the current notification (0: waiting for one).", Some(r.serving_ms));
            metric(
                &mut out,
                "viommu_requestq_driver_avail",
                "gauge",
                "The request queue's avail index in guest memory (the driver's).",
                r.driver_avail.map(u64::from),
            );
            metric(
                &mut out,
                "viommu_requestq_used",
                "gauge",
                "The request queue's used index in guest memory.",
                r.used.map(u64::from),
            );
            metric(
                &mut out,
                "viommu_requestq_device_next_avail",
                "gauge",
                "The avail index the device takes next, after its last drain.",
                r.device_next_avail.map(u64::from),
            );
        }
        out
    }
}
