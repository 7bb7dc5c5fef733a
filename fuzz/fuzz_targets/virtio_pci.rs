//! Fuzzes the virtio-pci transport's register accesses as a guest makes
//! them: BAR reads and writes (common config, ISR, device config, notify,
//! MSI-X table and PBA), PCI config space reads and writes (the MSI-X
//! capability's enable and mask bits), device-side interrupts, and resets
//! the device finishes later (a device thread's). The device behind it is
//! a recorder. Any panic is a finding; after a reset the device finished,
//! the status reads 0.
//!
//! The transport offers port notify registers too (BAR 2).
//!
//! Input: records, each a tag byte (`tag % 7` selects) and its operands:
//! 0 BAR read: offset u16 (in the 32 KiB BAR), len 1-8
//! 1 BAR write: offset u16, len 1-8, value u64
//! 2 config read: register u8
//! 3 config write: register u8, offset u8 (0-3), len 1-4, value u32
//! 4 device raises: queue u8 (0xff: config)
//! 5 reset pending: bool (the device's reset finishes when cleared)
//! 6 port notify write: offset u8 (in the 4 ports), len 1-2, value u16

#![no_main]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm::bus::BusDevice;
use vmm::devices::virtio::pci::{PortNotify, VirtioPciDevice, BAR_SIZE};
use vmm::devices::virtio::{ActivateError, VirtioDevice, VirtioInterrupt};
use vmm::pci::msix::MsiSender;
use vmm::pci::PciDevice;

#[path = "common/input.rs"]
mod input;
use input::Input;

#[derive(Default)]
struct State {
    interrupt: Mutex<Option<Arc<dyn VirtioInterrupt>>>,
    pending: AtomicBool,
}

struct Recorder(Arc<State>);

impl VirtioDevice for Recorder {
    fn device_type(&self) -> u32 {
        23
    }
    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![256, 64]
    }
    fn features(&self) -> u64 {
        1 << 32 | 1 << 29 | 0x1f
    }
    fn ack_features(&mut self, _: u64) {}
    fn read_config(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = (offset as u8).wrapping_add(i as u8);
        }
    }
    fn write_config(&mut self, _: u64, _: &[u8]) {}
    fn activate(
        &mut self,
        _mem: GuestMemoryMmap,
        queues: Vec<Queue>,
        interrupt: Arc<dyn VirtioInterrupt>,
    ) -> Result<(), ActivateError> {
        assert_eq!(queues.len(), 2);
        for q in &queues {
            assert!(q.size() <= q.max_size());
        }
        *self.0.interrupt.lock().unwrap() = Some(interrupt);
        Ok(())
    }
    fn queue_notify(&mut self, queue: u16) {
        assert!(queue < 2, "notify of a queue that does not exist");
    }
    fn reset(&mut self) {
        *self.0.interrupt.lock().unwrap() = None;
    }
    fn reset_pending(&self) -> bool {
        self.0.pending.load(Ordering::Relaxed)
    }
}

struct NoMsi;
impl MsiSender for NoMsi {
    fn send(&self, _: u64, _: u32) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1_0000)]).unwrap();
    let state = Arc::new(State::default());
    let dev = Arc::new(Mutex::new(
        VirtioPciDevice::new(
            Box::new(Recorder(state.clone())),
            mem,
            Arc::new(NoMsi),
            0xc000_0000,
            Some(0x1000),
        )
        .unwrap(),
    ));
    let mut ports = PortNotify(dev.clone());
    let mut input = Input(data);
    let mut status_zeroed = false;
    while let Some(tag) = input.u8() {
        let step = (|| -> Option<()> {
            match tag % 7 {
                0 => {
                    let off = u64::from(input.u16()?) % BAR_SIZE;
                    let len = usize::from(input.u8()? % 8 + 1);
                    if off + len as u64 <= BAR_SIZE {
                        let mut b = [0u8; 8];
                        BusDevice::read(&mut *dev.lock().unwrap(), off, &mut b[..len]);
                        if off == 0x14 && len == 1 && status_zeroed {
                            assert_eq!(b[0], 0, "status after a finished reset");
                        }
                    }
                }
                1 => {
                    let off = u64::from(input.u16()?) % BAR_SIZE;
                    let len = usize::from(input.u8()? % 8 + 1);
                    let v = input.u64()?;
                    if off + len as u64 <= BAR_SIZE {
                        BusDevice::write(&mut *dev.lock().unwrap(), off, &v.to_le_bytes()[..len]);
                        status_zeroed = off == 0x14
                            && len == 1
                            && v as u8 == 0
                            && !state.pending.load(Ordering::Relaxed);
                    }
                }
                2 => {
                    let reg = usize::from(input.u8()?) % 64;
                    PciDevice::read_config(&mut *dev.lock().unwrap(), reg);
                }
                3 => {
                    let reg = usize::from(input.u8()?) % 64;
                    let off = usize::from(input.u8()? % 4);
                    let len = usize::from(input.u8()? % 4 + 1).min(4 - off);
                    let v = input.u32()?;
                    PciDevice::write_config(
                        &mut *dev.lock().unwrap(),
                        reg,
                        off,
                        &v.to_le_bytes()[..len],
                    );
                }
                4 => {
                    let q = input.u8()?;
                    let irq = state.interrupt.lock().unwrap().clone();
                    if let Some(irq) = irq {
                        let _ = if q == 0xff {
                            irq.trigger_config()
                        } else {
                            irq.trigger_queue(u16::from(q))
                        };
                    }
                }
                6 => {
                    let off = u64::from(input.u8()? % 4);
                    let len = usize::from(input.u8()? % 2 + 1);
                    let v = input.u16()?;
                    ports.write(off, &v.to_le_bytes()[..len]);
                }
                _ => {
                    let p = input.u8()? & 1 == 1;
                    state.pending.store(p, Ordering::Relaxed);
                    if p {
                        status_zeroed = false;
                    }
                }
            }
            Some(())
        })();
        if step.is_none() {
            break;
        }
    }
});
