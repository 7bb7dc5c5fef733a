//! Liveness gauges in `GET /metrics`: what a guest that stopped talking
//! looks like from the VMM, so a hang can be told apart from the outside
//! (the bench tool reads them before it kills a guest it found hung):
//! - the virtio-iommu's device thread: serving one notification for long
//!   (stuck in a host call), or waiting while the driver's avail index is
//!   ahead of the device's, with the types of the requests left there
//!   (UNMAPs alone: a lazy guest's queue; otherwise requests not notified
//!   yet, or a missed kick if the driver waits for an answer);
//! - the UART: the transmit interrupt enabled and pending while no byte
//!   arrives means the guest does not take interrupts (a vCPU spinning
//!   with interrupts off); each vCPU thread's CPU time tells a vCPU that
//!   spins from one that is halted.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::devices::serial::SerialDevice;
use crate::devices::viommu::pending::PendingTypes;
use crate::devices::viommu::{StatusReading, ThreadStatus};
use crate::vcpu_probe::{VcpuProbe, VcpuSample};

/// Where the liveness gauges come from.
pub struct Liveness {
    /// The console UART.
    pub serial: Arc<Mutex<SerialDevice>>,
    /// The virtio-iommu's device thread, if there is a virtio-iommu.
    pub viommu: Option<Arc<ThreadStatus>>,
    /// The vCPU threads' CPU-time clocks, in vCPU order.
    pub vcpu_clocks: Vec<Option<libc::clockid_t>>,
    /// The vCPUs' register probes, in vCPU order.
    pub vcpu_probes: Vec<Arc<VcpuProbe>>,
    /// Each passed-through device's mapper as the virtio-iommu programs
    /// it, by guest BDF: its own host DMA calls.
    pub endpoint_dma: Vec<(crate::pci::Bdf, Arc<crate::device_manager::EndpointMapper>)>,
    /// Guest reboots served in place.
    pub reboots: Arc<std::sync::atomic::AtomicU64>,
}

/// How long `GET /api/v1/vm.vcpus` waits for each vCPU's answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);

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
    /// Each vCPU's registers now and its CPU time, as JSON
    /// (`GET /api/v1/vm.vcpus`); a vCPU that does not answer within
    /// [`PROBE_TIMEOUT`] has `null` registers. Every vCPU is asked at once
    /// and the wait is an async sleep: the API's one runtime thread keeps
    /// serving other connections meanwhile.
    pub async fn vcpus_json(&self) -> serde_json::Value {
        let kick = vmm_sys_util::signal::SIGRTMIN();
        let asks: Vec<_> = self.vcpu_probes.iter().map(|p| p.ask()).collect();
        let mut regs: Vec<Option<Option<VcpuSample>>> = asks
            .iter()
            .map(|a| if a.is_none() { Some(None) } else { None })
            .collect();
        let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
        while regs.iter().any(Option::is_none) && tokio::time::Instant::now() < deadline {
            for ((p, a), r) in self.vcpu_probes.iter().zip(&asks).zip(regs.iter_mut()) {
                if let (None, Some(a)) = (&r, a) {
                    if !p.kick(*a, kick) {
                        *r = Some(None);
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            for ((p, a), r) in self.vcpu_probes.iter().zip(&asks).zip(regs.iter_mut()) {
                if let (None, Some(a)) = (&r, a) {
                    *r = p.answer_to(*a);
                }
            }
        }
        let v: Vec<serde_json::Value> = regs
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let regs = r.flatten();
                if regs.is_none() {
                    self.vcpu_probes[i].give_up();
                }
                let cpu = self.vcpu_clocks.get(i).copied().flatten().and_then(cpu_ms);
                serde_json::json!({
                    "vcpu": i,
                    "cpu_ms": cpu,
                    "rip": regs.as_ref().map(|r| format!("{:#x}", r.rip)),
                    "rsp": regs.as_ref().map(|r| format!("{:#x}", r.rsp)),
                    "rflags": regs.as_ref().map(|r| format!("{:#x}", r.rflags)),
                    "interrupts_enabled": regs.as_ref().map(|r| r.rflags & 0x200 != 0),
                    "cpl": regs.as_ref().map(|r| r.cs & 3),
                    "cr3": regs.as_ref().map(|r| format!("{:#x}", r.cr3)),
                    "stack_text": regs.as_ref().map(|r| r
                        .stack_text
                        .iter()
                        .map(|w| format!("{w:#x}"))
                        .collect::<Vec<_>>()),
                })
            })
            .collect();
        serde_json::Value::Array(v)
    }

    /// The gauges and counters as Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_serial(&mut out);
        self.render_vcpus(&mut out);
        if let Some(t) = &self.viommu {
            render_device_thread(&mut out, &t.read());
        }
        self.render_endpoints(&mut out);
        metric(
            &mut out,
            "vmm_reboots_total",
            "counter",
            "Guest reboots (reset register, i8042, triple fault with --on-triple-fault restart, API) served in place.",
            Some(self.reboots.load(std::sync::atomic::Ordering::Relaxed)),
        );
        out
    }

    /// The console UART's counters and interrupt registers.
    fn render_serial(&self, out: &mut String) {
        let s = self
            .serial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reading();
        metric(
            out,
            "vmm_serial_tx_bytes_total",
            "counter",
            "Bytes the guest wrote to the console UART's transmit register.",
            Some(s.tx_bytes),
        );
        metric(
            out,
            "vmm_serial_irqs_total",
            "counter",
            "Interrupts the console UART raised (its pending bits going from none to some).",
            Some(s.irqs),
        );
        metric(
            out,
            "vmm_serial_ier",
            "gauge",
            "The console UART's interrupt enable register (bit 1: transmit-empty interrupt).",
            Some(s.ier.into()),
        );
        metric(out, "vmm_serial_iir", "gauge", "The console UART's pending interrupt bits (1: none pending, 2: transmit empty, 4: data available).", Some(s.iir.into()));
    }

    /// Each vCPU thread's CPU time.
    fn render_vcpus(&self, out: &mut String) {
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
    }
}

impl Liveness {
    /// The host DMA calls of each passed-through device's mapper, one
    /// series per endpoint (label `endpoint`: its guest BDF).
    fn render_endpoints(&self, out: &mut String) {
        let stats: Vec<(String, dma_mapper::DmaStats)> = self
            .endpoint_dma
            .iter()
            .map(|(bdf, m)| (bdf.to_string(), m.stats()))
            .collect();
        let sets: Vec<(String, &dyn viommu_counters::CounterSet)> = stats
            .iter()
            .map(|(b, s)| (b.clone(), s as &dyn viommu_counters::CounterSet))
            .collect();
        out.push_str(&viommu_counters::prometheus_text_by(
            "viommu_endpoint",
            "endpoint",
            &sets,
        ));
    }
}

/// The virtio-iommu device thread's liveness gauges.
fn render_device_thread(out: &mut String, r: &StatusReading) {
    metric(
        out,
        "viommu_thread_wakeups_total",
        "counter",
        "Times the virtio-iommu device thread woke up.",
        Some(r.wakeups),
    );
    metric(out, "viommu_thread_serving_ms", "gauge", "How long the device thread has been serving the current notification (0: waiting for one).", Some(r.serving_ms));
    metric(
        out,
        "viommu_requestq_driver_avail",
        "gauge",
        "The request queue's avail index in guest memory (the driver's).",
        r.driver_avail.map(u64::from),
    );
    metric(
        out,
        "viommu_requestq_used",
        "gauge",
        "The request queue's used index in guest memory.",
        r.used.map(u64::from),
    );
    metric(
        out,
        "viommu_requestq_device_next_avail",
        "gauge",
        "The avail index the device takes next, after its last drain.",
        r.device_next_avail.map(u64::from),
    );
    metric(
        out,
        "viommu_requestq_avail_event",
        "gauge",
        "The avail_event the device published in guest memory (EVENT_IDX: the driver notifies when its avail index passes it).",
        r.avail_event.map(u64::from),
    );
    if let Some(p) = r.pending {
        render_pending(out, &p);
    }
    metric(
        out,
        "viommu_requestq_kicks_total",
        "counter",
        "Request queue notifications the device thread took (kicks that arrived between two of its reads count once).",
        Some(r.kicks),
    );
    metric(
        out,
        "viommu_requestq_poll_ns_total",
        "counter",
        "Nanoseconds the device thread spent polling the request queue for requests (wall time, drains not included; at most a host core's worth).",
        Some(r.poll_ns),
    );
    metric(
        out,
        "viommu_requestq_polls_found_total",
        "counter",
        "Looks at the request queue while polling that found requests (each a notification the guest did not make and a wake-up the thread did not need).",
        Some(r.polls_found),
    );
    metric(
        out,
        "viommu_requestq_polls_timed_out_total",
        "counter",
        "Polls of the request queue that ended with the poll window spent and no request.",
        Some(r.polls_timed_out),
    );
    metric(
        out,
        "viommu_requestq_polls_preempted_total",
        "counter",
        "Polls of the request queue ended because another task took the core (each one shrinks the window).",
        Some(r.polls_preempted),
    );
    metric(
        out,
        "viommu_requestq_polls_busy_total",
        "counter",
        "Notifications served without polling, the poll window open, or a vCPU's hand-over to polling not made, because no host CPU was spare (/proc/loadavg's runnable tasks above the online CPUs).",
        Some(r.polls_busy),
    );
    metric(
        out,
        "viommu_requestq_poll_window_ns",
        "gauge",
        "How long the device thread polls the request queue after serving it, now (adapted to the gaps between requests, up to --viommu-poll-us; 0: not polling).",
        Some(r.poll_window_ns),
    );
    metric(
        out,
        "viommu_requestq_vcpu_kicks_total",
        "counter",
        "Request queue notifications served on the vCPU that made them, the device thread idle (--viommu-kicks vcpu).",
        Some(r.vcpu_kicks),
    );
    metric(
        out,
        "viommu_requestq_vcpu_deferred_total",
        "counter",
        "Request queue notifications a vCPU left to the device thread, busy or with a command waiting (--viommu-kicks vcpu).",
        Some(r.vcpu_deferred),
    );
    metric(
        out,
        "viommu_requestq_vcpu_handovers_total",
        "counter",
        "Times a vCPU that served the request queue woke the device thread to poll for the next request, the poll window open and a host CPU free for it (--viommu-kicks vcpu with --viommu-poll-us).",
        Some(r.vcpu_handovers),
    );
}

/// The requests published and not taken, by type.
fn render_pending(out: &mut String, p: &PendingTypes) {
    let _ = writeln!(
        out,
        "# HELP viommu_requestq_pending_requests Requests the driver published that the device has not taken, by type, read from the rings now (at most {} looked at; not_read: beyond that). UNMAPs alone are a lazy guest's queue, sent with its next sync; a MAP waits for the driver's iotlb_sync_map, which notifies; any request left while a vCPU waits in the driver's sync is a missed kick.\n# TYPE viommu_requestq_pending_requests gauge",
        crate::devices::viommu::pending::PEEK_MAX
    );
    for (t, n) in [
        ("map", p.map),
        ("unmap", p.unmap),
        ("iotlb_flush", p.flush),
        ("other", p.other),
        ("unreadable", p.unreadable),
        ("not_read", p.not_read),
    ] {
        let _ = writeln!(out, "viommu_requestq_pending_requests{{type=\"{t}\"}} {n}");
    }
}
