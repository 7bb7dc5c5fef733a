//! Guest power control: ACPI (hardware-reduced) sleep/reset registers and
//! the i8042 reset line.
//!
//! The FADT declares a hardware-reduced platform whose sleep control
//! register is port [`ACPI_SLEEP_CONTROL_PORT`](crate::layout::ACPI_SLEEP_CONTROL_PORT)
//! and whose reset register is
//! [`ACPI_RESET_PORT`](crate::layout::ACPI_RESET_PORT); the DSDT's `_S5_`
//! package gives SLP_TYP 5. Linux powers off by writing
//! `SLP_EN | SLP_TYP << 2` there (`acpi_hw_extended_sleep`), and reboots
//! through the reset register (the default `reboot=a`) or, with
//! `reboot=k`, by writing 0xfe to the i8042 command port.

use std::sync::Arc;

use vm_superio::{I8042Device, Trigger};

use super::exit::{ExitReason, VmExit};
use crate::bus::BusDevice;
use crate::layout::ACPI_RESET_VALUE;

/// SLP_TYP of S5 in the DSDT `_S5_` package.
pub const S5_SLEEP_TYPE: u8 = 5;
const SLP_EN: u8 = 1 << 5;
const SLP_TYP_SHIFT: u8 = 2;
const SLP_TYP_MASK: u8 = 0x7 << SLP_TYP_SHIFT;

/// The sleep control, sleep status and reset registers, three bytes.
#[derive(Debug)]
pub struct AcpiPowerDevice {
    exit: Arc<VmExit>,
}

impl AcpiPowerDevice {
    /// Registers that report to `exit`.
    pub fn new(exit: Arc<VmExit>) -> Self {
        AcpiPowerDevice { exit }
    }
}

impl BusDevice for AcpiPowerDevice {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        // Sleep status: WAK_STS never set (we do not resume from sleep).
        data.fill(0);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let Some(&value) = data.first() else { return };
        match offset {
            0 if value & SLP_EN != 0 => {
                let typ = (value & SLP_TYP_MASK) >> SLP_TYP_SHIFT;
                if typ == S5_SLEEP_TYPE {
                    self.exit.request(ExitReason::PowerOff);
                } else {
                    viommu_device::guest_warn!(
                        "guest asked for unsupported sleep type {typ}; ignored"
                    );
                }
            }
            2 if value == ACPI_RESET_VALUE => self.exit.request(ExitReason::Reset),
            _ => tracing::debug!(offset, value, "ignored ACPI power register write"),
        }
    }
}

/// The trigger the i8042 pulls on reset.
#[derive(Debug, Clone)]
pub struct ResetTrigger(pub Arc<VmExit>);

impl Trigger for ResetTrigger {
    type E = std::convert::Infallible;
    fn trigger(&self) -> Result<(), Self::E> {
        self.0.request(ExitReason::Reset);
        Ok(())
    }
}

/// The i8042 controller at ports 0x60-0x64: only its reset line matters.
pub struct I8042(pub I8042Device<ResetTrigger>);

impl BusDevice for I8042 {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        let v = self.0.read(offset as u8);
        data.fill(v);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let Some(&v) = data.first() {
            let Ok(()) = self.0.write(offset as u8, v);
        }
    }
}

#[cfg(test)]
mod tests;
