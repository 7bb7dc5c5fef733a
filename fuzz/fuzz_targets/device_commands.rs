//! Fuzzes the virtio-iommu's device-thread command path as the transport
//! drives it (`vmm::devices::viommu`): config-space writes of any offset,
//! length and value (coalesced into the one-write slot, the ineffective
//! ones never queued), config reads, feature acks, resets and activations
//! the way the virtio-pci transport orders them, interleaved with request
//! bursts in guest memory and kicks, while the real device thread drains.
//!
//! Checked, besides "no panic":
//! - no command is ever refused by the bounded channel
//!   (`dropped_commands() == 0`, `queued_commands() <= COMMAND_QUEUE`);
//! - once the commands are applied, `bypass` reads as the last effective
//!   write made it (a coalesced write is never lost, an ignored one never
//!   applied, a reset keeps it);
//! - every request the driver posted and kicked is answered: the device's
//!   drain cap and self re-kick leave nothing behind while commands come
//!   in between.
//!
//! The device thread runs concurrently with the input's driver, as in the
//! VMM, so timing varies between runs of one input; the checks hold for
//! every interleaving. Each input starts a device thread of its own (a few
//! hundred inputs a second).
//!
//! Input: one byte choosing who serves request-queue kicks (odd: the
//! kicking thread when the device thread is idle, as `--viommu-kicks vcpu`;
//! even: the device thread), then records, each a tag byte (`tag % 8` selects) and its operands:
//! 0 config write: offset u8 (% 0x30), len 1-4, value u32
//! 1 config read: offset u8, len 1-8
//! 2 request: kind u8, a u8, b u8, c u8 (attach, detach, map, unmap,
//!   probe, flush of small domains and pages)
//! 3 kick: the request queue (tag bit 3: the event queue)
//! 4 reset (ignored while one is in progress, as the transport does)
//! 5 negotiate and activate: features mask u8 (after a finished reset)
//! 6 settle: wait until the commands are applied and the kicked requests
//!   answered, then check
//! 7 burst: n u8 (1-64) MAP/UNMAP pairs, kicked

#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use viommu_device::testing::{req, FakeMapper, GuestDriver, DATA_BASE};
use viommu_device::{ConfigWrite, DeviceConfig};
use viommu_wire::CONFIG_BYPASS_OFFSET;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm::devices::viommu::spare_cpu::SpareCpu;
use vmm::devices::viommu::{
    DeviceThread, KickServing, ViommuDevice, ViommuModel, COMMAND_QUEUE, DEFAULT_POLL_MAX,
    REQUEST_QUEUE_SIZE,
};
use vmm::devices::virtio::{VirtioDevice, VirtioInterrupt};

#[path = "common/input.rs"]
mod input;
use input::Input;

/// Guest memory: the rings and buffers below 16 MiB, the pages MAPs
/// point at just above (`DATA_BASE`).
const MEM_SIZE: u64 = 32 << 20;

/// How long a settle may take before the device is declared stuck.
const SETTLE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Irq(AtomicU64);

impl VirtioInterrupt for Irq {
    fn trigger_queue(&self, _queue: u16) -> std::io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn trigger_config(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The driver's side: guest memory, the rings and what it expects.
struct Driver {
    mem: GuestMemoryMmap,
    dev: ViommuDevice,
    /// Stopped and joined when the driver drops.
    _thread: DeviceThread,
    irq: Arc<Irq>,
    reqq: GuestDriver,
    evq: GuestDriver,
    /// The transport's view: activated since the last reset.
    active: bool,
    /// A reset was asked and not yet negotiated again.
    reset: bool,
    /// Features acked since the last reset (the transport's `acked`).
    acked: u64,
    /// What `bypass` must read once the commands are applied.
    bypass: u8,
    /// Requests posted since the last kick of the request queue.
    unkicked: bool,
}

impl Driver {
    fn new(serving: KickServing) -> Self {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)])
            .expect("guest memory");
        let mut model = ViommuModel::new(DeviceConfig {
            offer_bypass: true,
            max_domains: 4,
            max_mappings_per_domain: 64,
            ..Default::default()
        })
        .expect("device config");
        for ep in [1, 2] {
            model
                .add_endpoint(ep, Arc::new(FakeMapper::counting()))
                .expect("endpoint");
        }
        // Polling as the VMM runs it by default: commands and kicks come
        // while the thread polls, and settle points wait for it to stop.
        let (dev, thread) =
            ViommuDevice::spawn(model, None, DEFAULT_POLL_MAX, serving, SpareCpu::fixed(true)).expect("device thread");
        let mut bypass = [0u8];
        dev.read_config(CONFIG_BYPASS_OFFSET, &mut bypass);
        let mut d = Driver {
            reqq: GuestDriver::new(&mem, 0, REQUEST_QUEUE_SIZE, 0x10_0000),
            evq: GuestDriver::new(&mem, 0x1_0000, 64, 0x80_0000),
            mem,
            dev,
            _thread: thread,
            irq: Arc::new(Irq::default()),
            active: false,
            reset: true,
            acked: 0,
            bypass: bypass[0],
            unkicked: false,
        };
        d.negotiate(0xff);
        d
    }

    fn check_queue(&self) {
        assert_eq!(self.dev.dropped_commands(), 0, "a command was dropped");
        assert!(self.dev.queued_commands() <= COMMAND_QUEUE);
    }

    /// Features from `mask` (bit k keeps the k-th offered feature bit,
    /// VERSION_1 always), then activation on fresh rings.
    fn negotiate(&mut self, mask: u8) {
        if !self.reset || self.dev.reset_pending() {
            return;
        }
        let offered = self.dev.features();
        let mut f = offered & (1 << 32);
        let mut k = 0;
        for bit in 0..64 {
            if offered & (1 << bit) != 0 && bit != 32 {
                if mask & (1 << (k % 8)) != 0 {
                    f |= 1 << bit;
                }
                k += 1;
            }
        }
        self.dev.ack_features(f);
        self.acked = f;
        self.reqq = GuestDriver::new(&self.mem, 0, REQUEST_QUEUE_SIZE, 0x10_0000);
        self.evq = GuestDriver::new(&self.mem, 0x1_0000, 64, 0x80_0000);
        self.dev
            .activate(
                self.mem.clone(),
                vec![self.reqq.queue(), self.evq.queue()],
                self.irq.clone(),
            )
            .expect("activation");
        self.active = true;
        self.reset = false;
        self.unkicked = false;
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        // The effect the transport decides with its acked features.
        if let ConfigWrite::Bypass(b) = ConfigWrite::decide(self.acked, offset, data) {
            self.bypass = u8::from(b);
        }
        self.dev.write_config(offset, data);
    }

    fn reset(&mut self) {
        if self.dev.reset_pending() {
            return; // the transport ignores the driver meanwhile
        }
        self.dev.reset();
        self.active = false;
        self.reset = true;
        self.acked = 0;
        self.unkicked = false;
    }

    fn push(&mut self, r: &[u8]) {
        if !self.active {
            return;
        }
        let wlen = if r.first() == Some(&viommu_wire::req_type::VIRTIO_IOMMU_T_PROBE) {
            512 + 4
        } else {
            4
        };
        if self.reqq.push(&self.mem, r, wlen).is_none() {
            // Full: take the answers in, as a driver would.
            self.reqq.poll(&self.mem);
            let _ = self.reqq.push(&self.mem, r, wlen);
        }
        self.unkicked = true;
    }

    fn kick(&mut self, queue: u16) {
        self.dev.queue_notify(queue);
        if queue == 0 {
            self.unkicked = false;
        }
    }

    /// Waits until every command is applied and every kicked request
    /// answered, then checks the config space.
    fn settle(&mut self) {
        let deadline = Instant::now() + SETTLE;
        loop {
            let applied = self.dev.commands_applied() && !self.dev.reset_pending();
            let answered = !self.active
                || self.unkicked
                || self.reqq.used_idx(&self.mem) == self.reqq.avail_idx();
            if applied && answered {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "stuck: commands applied {applied}, used {} of {} requests",
                self.reqq.used_idx(&self.mem),
                self.reqq.avail_idx()
            );
            std::thread::yield_now();
        }
        self.check_queue();
        let mut b = [0u8];
        self.dev.read_config(CONFIG_BYPASS_OFFSET, &mut b);
        assert_eq!(b[0], self.bypass, "bypass after the commands applied");
        self.reqq.poll(&self.mem);
    }
}

fn request(kind: u8, a: u8, b: u8, c: u8) -> Vec<u8> {
    let (d, p, n) = (u32::from(a % 4), u64::from(b % 64), u64::from(c % 4));
    let page = 0x1000u64;
    let (first, last) = (p * page, (p + n + 1) * page - 1);
    match kind % 6 {
        0 => req::attach(d, u32::from(1 + b % 2), u32::from(c % 2) * req::LAZY),
        1 => req::detach(d, u32::from(1 + b % 2)),
        2 => req::map(d, first, last, DATA_BASE + first, req::RW),
        3 => req::unmap(d, first, last),
        4 => req::probe(u32::from(1 + b % 2)),
        _ => req::iotlb_flush(d),
    }
}

/// One record; `None` once the input runs out.
fn step(d: &mut Driver, input: &mut Input) -> Option<()> {
    let tag = input.u8()?;
    match tag % 8 {
        0 => {
            let off = u64::from(input.u8()? % 0x30);
            let len = usize::from(input.u8()? % 4 + 1);
            let v = input.u32()?.to_le_bytes();
            d.write_config(off, &v[..len]);
        }
        1 => {
            let off = u64::from(input.u8()?);
            let len = usize::from(input.u8()? % 8 + 1);
            let mut b = [0u8; 8];
            d.dev.read_config(off, &mut b[..len]);
        }
        2 => {
            let r = request(input.u8()?, input.u8()?, input.u8()?, input.u8()?);
            d.push(&r);
        }
        3 => d.kick(u16::from(tag & 8 != 0)),
        4 => d.reset(),
        5 => {
            let mask = input.u8()?;
            d.negotiate(mask);
        }
        6 => d.settle(),
        _ => {
            let n = input.u8()? % 64 + 1;
            for i in 0..u64::from(n) {
                let iova = 0x40_0000 + (i % 16) * 0x1000;
                d.push(&req::map(1, iova, iova + 0xfff, DATA_BASE, req::RW));
                d.push(&req::unmap(1, iova, iova + 0xfff));
            }
            d.kick(0);
        }
    }
    d.check_queue();
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let serving = match input.u8() {
        Some(b) if b & 1 == 1 => KickServing::Vcpu,
        _ => KickServing::Thread,
    };
    let mut d = Driver::new(serving);
    while step(&mut d, &mut input).is_some() {}
    // Kick what is left, then everything must settle.
    if d.unkicked {
        d.kick(0);
    }
    d.settle();
});
