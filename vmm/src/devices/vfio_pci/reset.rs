//! The emulated state of a passed-through function on a system reset
//! (the guest reboots): MSI-X off on the host, every vector masked and
//! detached. The BARs keep their addresses (the guest finds them where
//! the VMM placed them). A signal left in a vector's eventfd is not
//! drained (the main thread's filter allows no `read`): at worst the
//! next boot's driver sees one spurious interrupt when it unmasks.

use super::VfioPciDevice;

impl VfioPciDevice {
    /// Reset what the VMM emulates of the function; the function itself
    /// was reset with `VFIO_DEVICE_RESET` before.
    pub fn system_reset(&mut self) {
        self.msix_ctrl_write(0);
        self.table.reset();
    }
}
