//! The emulated state of a passed-through function on a system reset
//! (the guest reboots): MSI-X off on the host, every vector masked and
//! detached, no stale signal in a vector's eventfd. The BARs keep their
//! addresses (the guest finds them where the VMM placed them).

use super::VfioPciDevice;

impl VfioPciDevice {
    /// Reset what the VMM emulates of the function; the function itself
    /// was reset with `VFIO_DEVICE_RESET` before.
    pub fn system_reset(&mut self) {
        self.msix_ctrl_write(0);
        self.table.reset();
        for fd in &self.irq_fds {
            // Nonblocking: EAGAIN when it holds no signal.
            let _ = fd.read();
        }
    }
}
