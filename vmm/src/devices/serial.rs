//! The 16550 UART console (COM1) from `vm-superio`, its interrupt driven as
//! a level on IRQ 4 with `KVM_IRQ_LINE`.
//!
//! A real 16550 holds its interrupt output high while an enabled interrupt
//! is pending and drops it when the driver takes it (reads IIR or the
//! data); the ISA line is edge-triggered, so each new pending interrupt is
//! a new edge. This model does the same: after every access the line
//! follows "pending and enabled" ([`IrqLine`]), set by the thread that
//! changed the UART (a vCPU, or the stdin thread), as QEMU does.
//!
//! Why not an irqfd (an edge per `vm-superio` trigger): KVM injects an
//! irqfd on a non-MSI GSI from a kernel worker, often on another CPU than
//! the vCPU that wrote the byte, which then kicks the vCPU with an IPI, for
//! every line of console output; and an edge lost on the way is never
//! raised again (the console stops mid-line, every writer to it blocks).
//! A level set in place has neither problem.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kvm_ioctls::VmFd;
use vm_superio::{serial::NoEvents, Serial, Trigger};

use crate::bus::BusDevice;

/// The UART's interrupt line.
pub trait IrqLine: Send + Sync {
    /// Drive the line high (an enabled interrupt is pending) or low.
    fn set(&self, high: bool) -> std::io::Result<()>;
}

/// `KVM_IRQ_LINE` on a GSI of the in-kernel PIC and IOAPIC.
pub struct KvmIrqLine {
    vm: Arc<VmFd>,
    gsi: u32,
}

impl KvmIrqLine {
    /// The line `gsi` of `vm`.
    pub fn new(vm: Arc<VmFd>, gsi: u32) -> Self {
        KvmIrqLine { vm, gsi }
    }
}

impl IrqLine for KvmIrqLine {
    fn set(&self, high: bool) -> std::io::Result<()> {
        self.vm
            .set_irq_line(self.gsi, high)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
    }
}

/// `vm-superio`'s interrupt hook: the line is driven from the UART's state
/// after each access instead; this only counts the interrupts raised.
#[derive(Debug, Default)]
pub struct RaiseCounter(AtomicU64);

impl Trigger for RaiseCounter {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Register offsets and bits.
const LCR: u64 = 3;
const LCR_DLAB: u8 = 0x80;
const IER_RDA: u8 = 0x01;
const IER_THRI: u8 = 0x02;
const IIR_THRI: u8 = 0x02;
const IIR_RDA: u8 = 0x04;

/// The UART as a liveness probe sees it: a guest whose console stopped
/// mid-line with the transmit interrupt enabled and pending has not taken
/// that interrupt (interrupts off, or stuck).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SerialReading {
    /// Bytes the guest wrote to the transmit register.
    pub tx_bytes: u64,
    /// Interrupts raised (the UART's pending bits going from none to some).
    pub irqs: u64,
    /// Interrupt enable register.
    pub ier: u8,
    /// Interrupt identification (pending) bits, as the guest would read them.
    pub iir: u8,
}

/// The UART on the port bus.
pub struct SerialDevice {
    uart: Serial<RaiseCounter, NoEvents, Box<dyn Write + Send>>,
    line: Arc<dyn IrqLine>,
    /// The level the line was last driven to.
    high: bool,
    lcr: u8,
    tx_bytes: u64,
}

impl SerialDevice {
    /// A UART driving `line` and writing what the guest sends to `out`.
    pub fn new(line: Arc<dyn IrqLine>, out: Box<dyn Write + Send>) -> Self {
        SerialDevice {
            uart: Serial::new(RaiseCounter::default(), out),
            line,
            high: false,
            lcr: 0,
            tx_bytes: 0,
        }
    }

    /// The UART's registers and counts now.
    pub fn reading(&self) -> SerialReading {
        let st = self.uart.state();
        SerialReading {
            tx_bytes: self.tx_bytes,
            irqs: self.uart.interrupt_evt().0.load(Ordering::Relaxed),
            ier: st.interrupt_enable,
            iir: st.interrupt_identification,
        }
    }

    /// Drive the line to "an enabled interrupt is pending".
    fn update_line(&mut self) {
        let st = self.uart.state();
        let (iir, ier) = (st.interrupt_identification, st.interrupt_enable);
        let pending = (iir & IIR_THRI != 0 && ier & IER_THRI != 0)
            || (iir & IIR_RDA != 0 && ier & IER_RDA != 0);
        if pending == self.high {
            return;
        }
        match self.line.set(pending) {
            Ok(()) => self.high = pending,
            Err(e) => tracing::warn!(high = pending, "cannot set the serial interrupt line: {e}"),
        }
    }

    /// Queue host input for the guest to read; returns how many bytes fit
    /// (0 while the guest has not read the FIFO's 64 bytes: the caller
    /// tries again, as a user's typing or a script's lines fill it).
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        let n = match self.uart.enqueue_raw_bytes(bytes) {
            Ok(n) => n,
            Err(vm_superio::serial::Error::FullFifo) => 0,
            Err(e) => {
                tracing::warn!("serial input dropped: {e:?}");
                0
            }
        };
        self.update_line();
        n
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let v = self.uart.read(offset as u8);
        data.fill(v);
        self.update_line();
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let Some(&v) = data.first() {
            match offset {
                0 if self.lcr & LCR_DLAB == 0 => self.tx_bytes += 1,
                LCR => self.lcr = v,
                _ => {}
            }
            if let Err(e) = self.uart.write(offset as u8, v) {
                tracing::warn!("serial write failed: {e:?}");
            }
            self.update_line();
        }
    }
}

/// Forward host stdin to the UART until EOF, from a thread of its own
/// (with `seccomp` installed first, if given). Bytes that do not fit the
/// guest's FIFO are retried after a short wait.
pub fn spawn_stdin_forwarder(
    serial: Arc<Mutex<SerialDevice>>,
    seccomp: Option<crate::seccomp::Filter>,
) -> std::io::Result<()> {
    crate::seccomp::spawn("serial-in", seccomp, move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 64];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                let taken = serial
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .enqueue_input(rest);
                rest = &rest[taken..];
                if !rest.is_empty() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    })?;
    Ok(())
}

/// A line that records its levels (tests).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct RecordedLine(pub(crate) Mutex<Vec<bool>>);

#[cfg(test)]
impl IrqLine for RecordedLine {
    fn set(&self, high: bool) -> std::io::Result<()> {
        self.0.lock().unwrap().push(high);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
