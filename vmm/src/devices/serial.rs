//! The 16550 UART console (COM1) from `vm-superio`, interrupting through an
//! irqfd, and a watchdog that raises its interrupt again when the guest
//! leaves it pending.
//!
//! An irqfd raises an edge, once, when the UART's pending bits go from none
//! to some; the guest's handler clears them by reading IIR. If that edge is
//! lost on its way, nothing raises another one: the guest's console stops
//! mid-line, every writer to it blocks, and the guest looks hung (seen in
//! the nested lab, with the transmit interrupt pending for minutes and no
//! virtio-iommu request outstanding). A real UART holds its line while
//! anything is pending, so the watchdog ([`spawn_irq_watchdog`]) raises the
//! edge again when the same pending interrupt has gone untaken (no IIR
//! read) for [`IRQ_RETRIGGER_AFTER`]; the count is in `GET /metrics`.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vm_superio::{serial::NoEvents, Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;

/// Raises the UART's IRQ by writing the irqfd registered for its GSI,
/// and counts the edges.
#[derive(Debug)]
pub struct IrqfdTrigger {
    irqfd: EventFd,
    raised: AtomicU64,
}

impl Trigger for IrqfdTrigger {
    type E = std::io::Error;
    fn trigger(&self) -> std::io::Result<()> {
        self.raised.fetch_add(1, Ordering::Relaxed);
        self.irqfd.write(1)
    }
}

/// How long a pending UART interrupt may go untaken (no IIR read) before
/// the watchdog raises it again (between one and two periods).
pub const IRQ_RETRIGGER_AFTER: Duration = Duration::from_millis(200);

/// Interrupt identification register offset, and its "none pending" bit.
const IIR: u64 = 2;
const IIR_NONE: u8 = 0x01;
/// Line control register offset and its divisor-latch access bit.
const LCR: u64 = 3;
const LCR_DLAB: u8 = 0x80;

/// The UART as a liveness probe sees it: a guest whose console stopped
/// mid-line with the transmit interrupt enabled and pending has not taken
/// that interrupt (interrupts off, or stuck).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SerialReading {
    /// Bytes the guest wrote to the transmit register.
    pub tx_bytes: u64,
    /// Interrupt edges raised.
    pub irqs: u64,
    /// Interrupt enable register.
    pub ier: u8,
    /// Interrupt identification (pending) bits, as the guest would read them.
    pub iir: u8,
    /// Interrupts the watchdog raised again.
    pub retriggers: u64,
}

/// The UART on the port bus.
pub struct SerialDevice {
    uart: Serial<IrqfdTrigger, NoEvents, Box<dyn Write + Send>>,
    lcr: u8,
    tx_bytes: u64,
    /// IIR reads so far (each one is the guest taking what is pending).
    iir_reads: u64,
    /// `iir_reads` when the watchdog last saw an interrupt pending.
    pending_seen_at: Option<u64>,
    retriggers: u64,
}

impl SerialDevice {
    /// A UART raising `irq` and writing what the guest sends to `out`.
    pub fn new(irq: EventFd, out: Box<dyn Write + Send>) -> Self {
        let trigger = IrqfdTrigger {
            irqfd: irq,
            raised: AtomicU64::new(0),
        };
        SerialDevice {
            uart: Serial::new(trigger, out),
            lcr: 0,
            tx_bytes: 0,
            iir_reads: 0,
            pending_seen_at: None,
            retriggers: 0,
        }
    }

    /// The watchdog's tick: raise the interrupt again if the one pending
    /// now was already pending at the previous tick and the guest has not
    /// read IIR since. Returns whether it did.
    pub fn retrigger_stale_irq(&mut self) -> bool {
        let pending = self.uart.state().interrupt_identification & IIR_NONE == 0;
        if !pending {
            self.pending_seen_at = None;
            return false;
        }
        if self.pending_seen_at != Some(self.iir_reads) {
            self.pending_seen_at = Some(self.iir_reads);
            return false;
        }
        if let Err(e) = self.uart.interrupt_evt().trigger() {
            tracing::warn!("cannot raise the serial interrupt again: {e}");
            return false;
        }
        self.retriggers += 1;
        true
    }

    /// The UART's registers and counts now.
    pub fn reading(&self) -> SerialReading {
        let st = self.uart.state();
        SerialReading {
            tx_bytes: self.tx_bytes,
            irqs: self.uart.interrupt_evt().raised.load(Ordering::Relaxed),
            ier: st.interrupt_enable,
            iir: st.interrupt_identification,
            retriggers: self.retriggers,
        }
    }

    /// Queue host input for the guest to read; returns how many bytes fit.
    pub fn enqueue_input(&mut self, bytes: &[u8]) -> usize {
        match self.uart.enqueue_raw_bytes(bytes) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("serial input dropped: {e:?}");
                0
            }
        }
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset == IIR {
            self.iir_reads += 1;
        }
        let v = self.uart.read(offset as u8);
        data.fill(v);
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
        }
    }
}

/// Run the UART's interrupt watchdog on a thread of its own (with
/// `seccomp` installed first, if given), every [`IRQ_RETRIGGER_AFTER`], for
/// the life of the process.
pub fn spawn_irq_watchdog(
    serial: Arc<Mutex<SerialDevice>>,
    seccomp: Option<crate::seccomp::Filter>,
) -> std::io::Result<()> {
    crate::seccomp::spawn("serial-irq", seccomp, move || loop {
        std::thread::sleep(IRQ_RETRIGGER_AFTER);
        let mut s = serial.lock().unwrap_or_else(|e| e.into_inner());
        if s.retrigger_stale_irq() {
            let n = s.retriggers;
            drop(s);
            // The first, then every hundredth: a guest that stays stuck
            // with interrupts off would fill the log otherwise.
            if n == 1 || n.is_multiple_of(100) {
                tracing::warn!(
                    retriggers = n,
                    "the console UART's interrupt went untaken for {} ms; raised it again",
                    IRQ_RETRIGGER_AFTER.as_millis()
                );
            }
        }
    })?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_reaches_the_writer_and_input_raises_irq() {
        let out = Shared::default();
        let irq = EventFd::new(vmm_sys_util::eventfd::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(out.clone()));
        for b in b"hi\n" {
            s.write(0, &[*b]);
        }
        assert_eq!(&*out.0.lock().unwrap(), b"hi\n");
        assert_eq!(s.reading().tx_bytes, 3);
        // Divisor latch writes are not output.
        s.write(3, &[0x80]);
        s.write(0, &[1]);
        s.write(3, &[0x03]);
        assert_eq!(s.reading().tx_bytes, 3);
        // Enable the "data available" interrupt (IER bit 0), then feed input.
        s.write(1, &[0x01]);
        assert_eq!(s.enqueue_input(b"x"), 1);
        assert!(irq.read().unwrap() >= 1);
        let r = s.reading();
        assert_eq!((r.ier, r.irqs), (0x01, 1));
        assert_ne!(r.iir & 0x04, 0, "data-available interrupt pending");
        let mut lsr = [0u8];
        s.read(5, &mut lsr);
        assert_eq!(lsr[0] & 1, 1, "LSR data ready");
        let mut rbr = [0u8];
        s.read(0, &mut rbr);
        assert_eq!(rbr[0], b'x');
    }

    #[test]
    fn the_watchdog_raises_an_untaken_interrupt_again() {
        let irq = EventFd::new(vmm_sys_util::eventfd::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(Shared::default()));
        s.write(1, &[0x01]);
        assert_eq!(s.enqueue_input(b"x"), 1);
        let _ = irq.read();
        // Untaken over two watchdog ticks: raised again, once per tick.
        assert!(!s.retrigger_stale_irq(), "first sight");
        assert!(s.retrigger_stale_irq(), "still pending, no IIR read");
        assert_eq!(irq.read().unwrap(), 1);
        assert_eq!(s.reading().retriggers, 1);
        // The guest reads IIR (takes it): the count starts over.
        let mut iir = [0u8];
        s.read(2, &mut iir);
        s.write(1, &[0x01]); // the data is still there: pending again
        assert!(!s.retrigger_stale_irq());
        s.read(0, &mut [0u8]);
        s.read(2, &mut iir);
        assert!(!s.retrigger_stale_irq(), "nothing pending");
        assert!(!s.retrigger_stale_irq());
        assert_eq!(s.reading().retriggers, 1);
    }
}
