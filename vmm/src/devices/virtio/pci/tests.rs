//! The transport driven the way Linux's virtio_pci_modern does it.

use std::sync::{Arc, Mutex};

use vm_memory::GuestAddress;

use super::*;

#[derive(Default)]
struct DummyState {
    acked: Option<u64>,
    activated: Vec<(u16, u64, u64, u64, bool)>, // size, desc, avail, used, ready
    notified: Vec<u16>,
    resets: usize,
    /// A reset the device has not finished (a device thread's).
    reset_pending: bool,
    config: [u8; 8],
    interrupt: Option<Arc<dyn VirtioInterrupt>>,
}

struct Dummy(Arc<Mutex<DummyState>>);

const DUMMY_FEATURES: u64 = 1 << VIRTIO_F_VERSION_1 | 1 << 3;

impl VirtioDevice for Dummy {
    fn device_type(&self) -> u32 {
        23
    }
    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![256, 64]
    }
    fn features(&self) -> u64 {
        DUMMY_FEATURES
    }
    fn ack_features(&mut self, features: u64) {
        self.0.lock().unwrap().acked = Some(features);
    }
    fn read_config(&self, offset: u64, data: &mut [u8]) {
        let c = self.0.lock().unwrap().config;
        for (i, d) in data.iter_mut().enumerate() {
            *d = c.get(offset as usize + i).copied().unwrap_or(0);
        }
    }
    fn write_config(&mut self, offset: u64, data: &[u8]) {
        let mut s = self.0.lock().unwrap();
        for (i, d) in data.iter().enumerate() {
            if let Some(c) = s.config.get_mut(offset as usize + i) {
                *c = *d;
            }
        }
    }
    fn activate(
        &mut self,
        _mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
    ) -> Result<(), super::super::ActivateError> {
        let mut s = self.0.lock().unwrap();
        s.activated = queues
            .iter()
            .map(|q| {
                (
                    q.size(),
                    q.desc_table(),
                    q.avail_ring(),
                    q.used_ring(),
                    q.ready(),
                )
            })
            .collect();
        s.interrupt = Some(interrupt);
        Ok(())
    }
    fn queue_notify(&mut self, queue: u16) {
        self.0.lock().unwrap().notified.push(queue);
    }
    fn reset(&mut self) {
        let mut s = self.0.lock().unwrap();
        s.resets += 1;
        s.interrupt = None;
        s.activated.clear();
    }
    fn reset_pending(&self) -> bool {
        self.0.lock().unwrap().reset_pending
    }
}

#[derive(Default)]
struct Msis(Mutex<Vec<(u64, u32)>>);
impl MsiSender for Msis {
    fn send(&self, address: u64, data: u32) -> std::io::Result<()> {
        self.0.lock().unwrap().push((address, data));
        Ok(())
    }
}

struct Rig {
    dev: VirtioPciDevice,
    state: Arc<Mutex<DummyState>>,
    msis: Arc<Msis>,
}

fn rig() -> Rig {
    rig_with(None)
}

/// A transport with port notify registers at `notify_port`, if any.
fn rig_with(notify_port: Option<u16>) -> Rig {
    let state = Arc::new(Mutex::new(DummyState::default()));
    let msis = Arc::new(Msis::default());
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let dev = VirtioPciDevice::new(
        Box::new(Dummy(state.clone())),
        mem,
        msis.clone(),
        0xc000_0000,
        notify_port,
    )
    .unwrap();
    Rig { dev, state, msis }
}

impl Rig {
    /// A driver's bring-up: features, MSI-X on with vector 1 programmed
    /// and unmasked, queue 0 on vector 1 with its rings, DRIVER_OK.
    fn bring_up_queue0_on_vector1(&mut self) {
        self.w(STATUS, 1 | 2, 1);
        self.w(0x08, 1, 4);
        self.w(0x0c, 1, 4);
        self.w(STATUS, 1 | 2 | 8, 1);
        let msix = self.caps().iter().find(|c| c.1 == 0x11).unwrap().0;
        PciDevice::write_config(&mut self.dev, msix / 4, 3, &[0x80]);
        self.w(MSIX_TABLE_OFFSET + 16, 0xfee0_1000, 4);
        self.w(MSIX_TABLE_OFFSET + 16 + 8, 0x41, 4);
        self.w(MSIX_TABLE_OFFSET + 16 + 12, 0, 4);
        self.w(0x16, 0, 2);
        self.w(0x1a, 1, 2);
        self.w(0x20, 0x1_0000, 8);
        self.w(0x28, 0x2_0000, 8);
        self.w(0x30, 0x3_0000, 8);
        self.w(0x1c, 1, 2);
        self.w(STATUS, 1 | 2 | 8 | 4, 1);
    }

    fn w(&mut self, off: u64, v: u64, len: usize) {
        BusDevice::write(&mut self.dev, off, &v.to_le_bytes()[..len]);
    }
    fn r(&mut self, off: u64, len: usize) -> u64 {
        let mut b = [0u8; 8];
        BusDevice::read(&mut self.dev, off, &mut b[..len]);
        u64::from_le_bytes(b)
    }
    fn cfg(&mut self, reg: usize) -> u32 {
        PciDevice::read_config(&mut self.dev, reg)
    }
    fn cfg_byte(&mut self, off: usize) -> u8 {
        (self.cfg(off / 4) >> ((off % 4) * 8)) as u8
    }
    /// Capabilities as (offset, id, cfg_type for vendor caps).
    fn caps(&mut self) -> Vec<(usize, u8, u8)> {
        let mut out = Vec::new();
        let mut p = usize::from(self.cfg_byte(0x34));
        while p != 0 {
            out.push((p, self.cfg_byte(p), self.cfg_byte(p + 3)));
            p = usize::from(self.cfg_byte(p + 1));
        }
        out
    }
}

const STATUS: u64 = 0x14;

#[test]
fn config_space_describes_a_modern_virtio_device() {
    let mut r = rig();
    assert_eq!(r.cfg(0), 0x1057_1af4);
    assert_eq!(r.cfg(2) >> 8, 0x08_8000);
    assert_eq!(r.dev.bar_address(), 0xc000_0000);
    assert_eq!(r.cfg(4) & !0xf, 0xc000_0000);
    assert_eq!(r.cfg(4) & 0x6, 0x4, "64-bit BAR");
    let caps = r.caps();
    let vendor: Vec<u8> = caps.iter().filter(|c| c.1 == 0x09).map(|c| c.2).collect();
    assert_eq!(vendor, [1, 3, 4, 2]);
    let notify = caps.iter().find(|c| c.1 == 0x09 && c.2 == 2).unwrap().0;
    assert_eq!(r.cfg(notify / 4 + 2), NOTIFY_OFFSET as u32);
    assert_eq!(r.cfg(notify / 4 + 4), NOTIFY_MULTIPLIER);
    let msix = caps.iter().find(|c| c.1 == 0x11).unwrap().0;
    assert_eq!(r.cfg(msix / 4) >> 16, 2, "3 vectors: table size - 1");
    assert_eq!(r.cfg(msix / 4 + 1), MSIX_TABLE_OFFSET as u32);
    assert_eq!(r.cfg(msix / 4 + 2), MSIX_PBA_OFFSET as u32);
}

#[test]
fn port_notify_registers_come_first_and_notify_their_queue() {
    let mut r = rig_with(Some(0x1010));
    assert_eq!(r.cfg(6), 0x1011, "BAR 2: port I/O at 0x1010");
    r.dev.config.write_reg(6, 0, &[0xff; 4]);
    assert_eq!(r.cfg(6), 0xffff_fffd, "4 ports: 2 bytes per queue");
    r.dev.config.set_bar_address(2, 0x1010);
    let caps = r.caps();
    let vendor: Vec<u8> = caps.iter().filter(|c| c.1 == 0x09).map(|c| c.2).collect();
    assert_eq!(vendor, [2, 1, 3, 4, 2], "the port notify capability first");
    let first = caps.iter().find(|c| c.1 == 0x09 && c.2 == 2).unwrap().0;
    assert_eq!(r.cfg_byte(first + 4), 2, "in BAR 2");
    assert_eq!(r.cfg(first / 4 + 2), 0, "offset");
    assert_eq!(r.cfg(first / 4 + 3), 4, "length: 2 queues");
    assert_eq!(r.cfg(first / 4 + 4), PORT_NOTIFY_MULTIPLIER);
    for (q, at) in r.dev.notify_addresses().iter().enumerate() {
        let (mmio, port) = (
            0xc000_0000 + NOTIFY_OFFSET + 4 * q as u64,
            0x1010 + 2 * q as u64,
        );
        assert!(
            matches!(at[..], [IoEventAddress::Mmio(m), IoEventAddress::Pio(p)] if m == mmio && p == port),
            "queue {q}: {at:?}"
        );
    }

    // Minimal bring-up: VERSION_1, FEATURES_OK, DRIVER_OK.
    r.w(STATUS, 1 | 2, 1);
    r.w(0x08, 1, 4);
    r.w(0x0c, 1, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    r.w(STATUS, 1 | 2 | 8 | 4, 1);
    assert_eq!(r.r(STATUS, 1), 15);
    let Rig { dev, state, .. } = r;
    let mut ports = PortNotify(Arc::new(Mutex::new(dev)));
    ports.write(0, &0u16.to_le_bytes());
    ports.write(2, &1u16.to_le_bytes());
    ports.write(1, &[0]); // not a register's start
    ports.write(6, &3u16.to_le_bytes()); // no such queue
    let mut b = [0xffu8; 2];
    ports.read(0, &mut b);
    assert_eq!(b, [0, 0]);
    assert_eq!(state.lock().unwrap().notified, vec![0, 1]);
    assert_eq!(port_notify_size(1), 4);
    assert_eq!(port_notify_size(3), 8);
}

#[test]
fn linux_style_bring_up_notify_and_interrupt() {
    let mut r = rig();
    r.w(STATUS, 0, 1);
    r.w(STATUS, 1 | 2, 1);
    r.w(0x00, 1, 4);
    assert_eq!(r.r(0x04, 4), DUMMY_FEATURES >> 32);
    r.w(0x00, 0, 4);
    assert_eq!(r.r(0x04, 4), DUMMY_FEATURES & 0xffff_ffff);
    r.w(0x08, 0, 4);
    r.w(0x0c, 1 << 3, 4);
    r.w(0x08, 1, 4);
    r.w(0x0c, 1, 4); // VERSION_1 is bit 32
    r.w(STATUS, 1 | 2 | 8, 1);
    assert_eq!(r.r(STATUS, 1), 1 | 2 | 8, "FEATURES_OK accepted");
    assert_eq!(r.state.lock().unwrap().acked, Some(DUMMY_FEATURES));
    assert_eq!(r.r(0x12, 2), 2, "num_queues");

    // MSI-X on: enable in the capability, program vectors 0 (config) and 1.
    let msix = r.caps().iter().find(|c| c.1 == 0x11).unwrap().0;
    PciDevice::write_config(&mut r.dev, msix / 4, 3, &[0x80]);
    for (v, data) in [(0u64, 0x30u64), (1, 0x31)] {
        r.w(MSIX_TABLE_OFFSET + v * 16, 0xfee0_0000, 4);
        r.w(MSIX_TABLE_OFFSET + v * 16 + 4, 0, 4);
        r.w(MSIX_TABLE_OFFSET + v * 16 + 8, data, 4);
        r.w(MSIX_TABLE_OFFSET + v * 16 + 12, 0, 4);
    }
    r.w(0x10, 0, 2);
    assert_eq!(r.r(0x10, 2), 0);
    r.w(0x10, 9, 2);
    assert_eq!(r.r(0x10, 2), u64::from(NO_VECTOR), "no such vector");
    r.w(0x10, 0, 2);

    // Queue 0: 128 entries, vector 1, rings at split addresses.
    r.w(0x16, 0, 2);
    assert_eq!(r.r(0x18, 2), 256);
    r.w(0x18, 128, 2);
    r.w(0x1a, 1, 2);
    assert_eq!(r.r(0x1a, 2), 1);
    r.w(0x20, 0x1_0000, 4);
    r.w(0x24, 0, 4);
    r.w(0x28, 0x2_0000, 8);
    r.w(0x30, 0x3_0000, 4);
    r.w(0x34, 0x1, 4);
    assert_eq!(r.r(0x30, 4), 0x3_0000);
    assert_eq!(r.r(0x34, 4), 1);
    assert_eq!(r.r(0x1e, 2), 0, "queue_notify_off");
    r.w(0x1c, 1, 2);
    assert_eq!(r.r(0x1c, 2), 1);
    r.w(0x18, 16, 2);
    assert_eq!(r.r(0x18, 2), 128, "size is fixed once enabled");

    // Queue 1 left disabled. DRIVER_OK activates.
    r.w(STATUS, 1 | 2 | 8 | 4, 1);
    assert_eq!(r.r(STATUS, 1), 15);
    {
        let s = r.state.lock().unwrap();
        assert_eq!(
            s.activated,
            vec![
                (128, 0x1_0000, 0x2_0000, 0x1_0003_0000, true),
                (64, 0, 0, 0, false)
            ]
        );
    }
    r.w(NOTIFY_OFFSET, 0, 2);
    r.w(NOTIFY_OFFSET + 4, 1, 2);
    r.w(NOTIFY_OFFSET + 4 * 7, 7, 2); // no such queue
    assert_eq!(r.state.lock().unwrap().notified, vec![0, 1]);
    let at = r.dev.notify_addresses();
    assert_eq!(at.len(), 2);
    for (q, at) in at.iter().enumerate() {
        let want = 0xc000_0000 + NOTIFY_OFFSET + 4 * q as u64;
        assert!(
            matches!(at[..], [IoEventAddress::Mmio(a)] if a == want),
            "queue {q}: {at:?}"
        );
    }

    // The device raises queue 0: MSI vector 1; config: vector 0.
    let irq = r.state.lock().unwrap().interrupt.clone().unwrap();
    irq.trigger_queue(0).unwrap();
    irq.trigger_config().unwrap();
    irq.trigger_queue(1).unwrap(); // NO_VECTOR: ISR only
    assert_eq!(
        *r.msis.0.lock().unwrap(),
        vec![(0xfee0_0000, 0x31), (0xfee0_0000, 0x30)]
    );
    assert_eq!(r.r(ISR_OFFSET, 1), 3);
    assert_eq!(r.r(ISR_OFFSET, 1), 0, "ISR clears on read");

    // A masked vector pends and fires on unmask.
    r.w(MSIX_TABLE_OFFSET + 16 + 12, 1, 4);
    irq.trigger_queue(0).unwrap();
    assert_eq!(r.msis.0.lock().unwrap().len(), 2);
    assert_eq!(r.r(MSIX_PBA_OFFSET, 1), 0b10);
    r.w(MSIX_TABLE_OFFSET + 16 + 12, 0, 4);
    assert_eq!(r.msis.0.lock().unwrap().len(), 3);

    // Device config passes through.
    r.w(DEVICE_CFG_OFFSET + 2, 0xab, 1);
    assert_eq!(r.r(DEVICE_CFG_OFFSET, 4), 0xab_0000);

    // Reset.
    r.w(STATUS, 0, 1);
    assert_eq!(r.r(STATUS, 1), 0);
    assert_eq!(r.r(0x18, 2), 256);
    assert_eq!(r.r(0x1a, 2), u64::from(NO_VECTOR));
    assert_eq!(
        r.state.lock().unwrap().resets,
        2,
        "the initial reset and this one"
    );
    r.w(NOTIFY_OFFSET, 0, 2);
    assert_eq!(
        r.state.lock().unwrap().notified.len(),
        2,
        "no notify after reset"
    );
}

#[test]
fn features_without_version_1_are_refused() {
    let mut r = rig();
    r.w(STATUS, 1 | 2, 1);
    r.w(0x08, 0, 4);
    r.w(0x0c, 1 << 3, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    assert_eq!(r.r(STATUS, 1) & 8, 0);
    assert_eq!(r.state.lock().unwrap().acked, None);
    // Features the device never offered are refused too.
    r.w(0x08, 1, 4);
    r.w(0x0c, 1 | 2, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    assert_eq!(r.r(STATUS, 1) & 8, 0);
    // DRIVER_OK without FEATURES_OK does not activate.
    r.w(STATUS, 1 | 2 | 4, 1);
    assert!(r.state.lock().unwrap().interrupt.is_none());
}

#[test]
fn status_bits_stick_until_reset_so_features_cannot_change_while_active() {
    let mut r = rig();
    r.w(STATUS, 1 | 2, 1);
    r.w(0x08, 0, 4);
    r.w(0x0c, 1 << 3, 4);
    r.w(0x08, 1, 4);
    r.w(0x0c, 1, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    r.w(STATUS, 1 | 2 | 8 | 4, 1);
    assert_eq!(r.state.lock().unwrap().acked, Some(DUMMY_FEATURES));
    // The driver clears FEATURES_OK and DRIVER_OK, writes other features
    // and sets FEATURES_OK again: the bits stay, nothing is renegotiated.
    r.w(STATUS, 1 | 2, 1);
    assert_eq!(r.r(STATUS, 1), 1 | 2 | 8 | 4);
    r.w(0x08, 0, 4);
    r.w(0x0c, 0, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    assert_eq!(r.state.lock().unwrap().acked, Some(DUMMY_FEATURES));
    // A reset clears everything; negotiation starts over.
    r.w(STATUS, 0, 1);
    assert_eq!(r.r(STATUS, 1), 0);
}

#[test]
fn a_reset_the_device_finishes_later_shows_the_old_status_until_done() {
    let mut r = rig();
    r.w(STATUS, 1 | 2, 1);
    r.w(0x08, 1, 4);
    r.w(0x0c, 1, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    r.w(STATUS, 1 | 2 | 8 | 4, 1);
    // The device thread is busy: its reset is pending.
    r.state.lock().unwrap().reset_pending = true;
    r.w(STATUS, 0, 1);
    assert_eq!(r.r(STATUS, 1), 15, "the driver waits for 0");
    // Writes before the reset is done are ignored; notifications too.
    r.w(0x16, 1, 2);
    assert_eq!(r.r(0x16, 2), 0);
    r.w(STATUS, 1, 1);
    r.w(NOTIFY_OFFSET, 0, 2);
    assert!(r.state.lock().unwrap().notified.is_empty());
    r.state.lock().unwrap().reset_pending = false;
    assert_eq!(r.r(STATUS, 1), 0);
    r.w(STATUS, 1, 1);
    assert_eq!(r.r(STATUS, 1), 1, "a new negotiation starts");
}

type Router = crate::pci::msix::RecordingRouter;

#[test]
fn interrupts_go_through_irqfds_routed_as_the_table_says() {
    let mut r = rig();
    let router = Arc::new(Router::default());
    r.dev.use_irqfds(router.clone()).unwrap();
    // One line per vector (config + 2 queues), attached, GSIs 24-26.
    assert_eq!(router.attached.lock().unwrap().len(), 3);
    let gsi1 = 25;
    // Bring-up: features, MSI-X on, vector 1 programmed, queue 0 on it.
    r.bring_up_queue0_on_vector1();
    assert_eq!(router.routes.lock().unwrap()[&gsi1], (0xfee0_1000, 0x41));
    let irq = r.state.lock().unwrap().interrupt.clone().unwrap();

    // The device raises queue 0: an irqfd write, no KVM_SIGNAL_MSI.
    irq.trigger_queue(0).unwrap();
    assert_eq!(router.fired(gsi1), 1);
    assert!(r.msis.0.lock().unwrap().is_empty());

    // Masked: nothing fires, the PBA bit is set; the unmask delivers it
    // (from the vCPU, through the MsiSender) to the message now in the table.
    r.w(MSIX_TABLE_OFFSET + 16 + 12, 1, 4);
    irq.trigger_queue(0).unwrap();
    assert_eq!(router.fired(gsi1), 0);
    assert_eq!(r.r(MSIX_PBA_OFFSET, 1), 0b10);
    r.w(MSIX_TABLE_OFFSET + 16 + 8, 0x42, 4);
    assert_eq!(router.routes.lock().unwrap()[&gsi1], (0xfee0_1000, 0x42));
    r.w(MSIX_TABLE_OFFSET + 16 + 12, 0, 4);
    assert_eq!(*r.msis.0.lock().unwrap(), vec![(0xfee0_1000, 0x42)]);
    assert_eq!(r.r(MSIX_PBA_OFFSET, 1), 0);

    // Dropping the transport and its interrupt handle detaches the lines.
    drop(irq);
    r.state.lock().unwrap().interrupt = None;
    drop(r);
    assert!(router.attached.lock().unwrap().is_empty());
}

#[test]
fn repeated_features_ok_with_bad_features_logs_within_the_rate_limit() {
    let mut r = rig();
    r.w(STATUS, 1 | 2, 1);
    // Features the device does not offer (and no VERSION_1).
    r.w(0x08, 0, 4);
    r.w(0x0c, 1 << 5, 4);
    let start = std::time::Instant::now();
    let n = viommu_device::testing::count_warnings(|| {
        for _ in 0..10_000 {
            r.w(STATUS, 1 | 2 | 8, 1);
        }
    });
    assert_eq!(r.r(STATUS, 1), 1 | 2, "FEATURES_OK refused");
    assert!(
        n <= viommu_device::testing::warning_budget(start.elapsed().as_secs()),
        "{n} warnings"
    );
}

thread_local! {
    /// `log` records made on this thread (see [`count_log_records`]).
    static LOG_RECORDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A `log` logger counting records per thread: virtio-queue logs through
/// `log`, outside the `tracing` rate limiter.
struct LogCounter;

impl log::Log for LogCounter {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        LOG_RECORDS.with(|c| c.set(c.get() + 1));
    }
    fn flush(&self) {}
}

/// Runs `f` and returns how many `log` records it made on this thread.
fn count_log_records(f: impl FnOnce()) -> usize {
    static LOGGER: LogCounter = LogCounter;
    // Once per process: a second test finds it installed.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    let before = LOG_RECORDS.with(std::cell::Cell::get);
    f();
    LOG_RECORDS.with(std::cell::Cell::get) - before
}

/// A guest looping {reset, queue size 3, rings at 1, DRIVER_OK}: the
/// device is never activated (not on virtio-queue's defaults for the
/// refused values either), the driver is told DEVICE_NEEDS_RESET, and the
/// log stays within the rate limiter's budget.
#[test]
fn bad_queue_setups_in_a_loop_are_refused_within_the_log_budget() {
    let mut r = rig();
    let start = std::time::Instant::now();
    let mut records = 0;
    let warnings = viommu_device::testing::count_warnings(|| {
        records = count_log_records(|| {
            for _ in 0..1000 {
                r.w(STATUS, 0, 1);
                r.w(STATUS, 1 | 2, 1);
                r.w(0x08, 0, 4);
                r.w(0x0c, DUMMY_FEATURES & 0xffff_ffff, 4);
                r.w(0x08, 1, 4);
                r.w(0x0c, DUMMY_FEATURES >> 32, 4);
                r.w(STATUS, 1 | 2 | 8, 1);
                for q in 0..2 {
                    r.w(0x16, q, 2);
                    r.w(0x18, 3, 2);
                    for ring in [0x20, 0x28, 0x30] {
                        r.w(ring, 1, 4);
                    }
                    r.w(0x1c, 1, 2);
                }
                r.w(STATUS, 1 | 2 | 8 | 4, 1);
                assert!(
                    r.state.lock().unwrap().activated.is_empty(),
                    "activated on rings the driver never set"
                );
                let needs_reset = u64::from(VIRTIO_CONFIG_S_NEEDS_RESET);
                assert_eq!(r.r(STATUS, 1) & needs_reset, needs_reset);
            }
        });
    });
    assert_eq!(records, 0, "virtio-queue logged on its own");
    let budget = viommu_device::testing::warning_budget(start.elapsed().as_secs());
    assert!(warnings <= budget, "{warnings} warnings, budget {budget}");
}

/// Valid values the driver set are what the device gets.
#[test]
fn a_valid_queue_setup_activates_with_the_drivers_values() {
    let mut r = rig();
    r.w(STATUS, 1 | 2, 1);
    r.w(0x0c, DUMMY_FEATURES & 0xffff_ffff, 4);
    r.w(0x08, 1, 4);
    r.w(0x0c, DUMMY_FEATURES >> 32, 4);
    r.w(STATUS, 1 | 2 | 8, 1);
    r.w(0x16, 0, 2);
    r.w(0x18, 16, 2);
    r.w(0x20, 0x1000, 8);
    r.w(0x28, 0x2000, 8);
    r.w(0x30, 0x3000, 8);
    r.w(0x1c, 1, 2);
    r.w(STATUS, 1 | 2 | 8 | 4, 1);
    let s = r.state.lock().unwrap();
    assert_eq!(s.activated[0], (16, 0x1000, 0x2000, 0x3000, true));
    assert_eq!(s.activated[1], (64, 0, 0, 0, false));
}

/// A reboot's reset of the transport (the virtio-iommu's among them): the
/// device reset as by a status write of 0, its queues unset, MSI-X off
/// with every vector masked and unrouted to queues, decode and bus
/// mastering off; the BAR stays where the VMM placed it. The next boot's
/// driver then brings the device up from scratch.
#[test]
fn a_system_reset_leaves_the_transport_as_at_power_on() {
    let mut r = rig();
    let bar = r.cfg(4);
    // A first boot's bring-up: features, MSI-X on, vector 1 programmed and
    // unmasked, queue 0 on it, DRIVER_OK; memory decode and bus master on.
    PciDevice::write_config(&mut r.dev, 1, 0, &[0x06, 0x00]);
    r.bring_up_queue0_on_vector1();
    assert_eq!(r.r(STATUS, 1), 15);
    assert_eq!(r.state.lock().unwrap().activated.len(), 2);
    let resets = r.state.lock().unwrap().resets;

    r.dev.system_reset();

    {
        let s = r.state.lock().unwrap();
        assert_eq!(s.resets, resets + 1, "the device was reset");
        assert!(s.activated.is_empty() && s.interrupt.is_none());
    }
    assert_eq!(r.r(STATUS, 1), 0);
    r.w(0x16, 0, 2);
    assert_eq!(r.r(0x1c, 2), 0, "queue 0 disabled");
    assert_eq!(r.r(0x1a, 2), u64::from(NO_VECTOR));
    assert_eq!(r.r(0x20, 8), 0, "its rings unset");
    let msix = r.caps().iter().find(|c| c.1 == 0x11).unwrap().0;
    assert_eq!(
        r.cfg(msix / 4) >> 30,
        0,
        "MSI-X disabled, not function-masked"
    );
    assert_eq!(r.r(MSIX_TABLE_OFFSET + 16 + 12, 4), 1, "vector 1 masked");
    assert_eq!(r.r(MSIX_TABLE_OFFSET + 16 + 8, 4), 0, "its message gone");
    assert_eq!(r.cfg(1) & 0x7, 0, "I/O, memory decode and bus master off");
    assert_eq!(r.cfg(4), bar, "the BAR where the VMM placed it");
    // Nothing notifies the device until the next boot's driver is up.
    r.w(NOTIFY_OFFSET, 0, 2);
    assert!(r.state.lock().unwrap().notified.is_empty());
    r.w(STATUS, 1, 1);
    assert_eq!(r.r(STATUS, 1), 1, "a new negotiation starts");
}
