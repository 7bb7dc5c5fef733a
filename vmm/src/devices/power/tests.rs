use super::*;

#[test]
fn unsupported_sleep_types_log_within_the_rate_limit() {
    let exit = Arc::new(VmExit::new().unwrap());
    let mut p = AcpiPowerDevice::new(exit.clone());
    let start = std::time::Instant::now();
    let n = viommu_device::testing::count_warnings(|| {
        for _ in 0..10_000 {
            p.write(0, &[SLP_EN | 3 << SLP_TYP_SHIFT]);
        }
    });
    assert!(
        n <= viommu_device::testing::warning_budget(start.elapsed().as_secs()),
        "{n} warnings"
    );
    assert_eq!(exit.reason(), None);
}

#[test]
fn s5_powers_off_and_reset_resets() {
    let exit = Arc::new(VmExit::new().unwrap());
    let mut dev = AcpiPowerDevice::new(exit.clone());
    dev.write(0, &[S5_SLEEP_TYPE << 2]); // SLP_EN missing: nothing
    assert_eq!(exit.reason(), None);
    dev.write(0, &[3 << 2 | SLP_EN]); // S3: ignored
    assert_eq!(exit.reason(), None);
    dev.write(2, &[0x2]); // wrong reset value
    assert_eq!(exit.reason(), None);
    dev.write(0, &[S5_SLEEP_TYPE << 2 | SLP_EN]);
    assert_eq!(exit.reason(), Some(ExitReason::PowerOff));

    let exit = Arc::new(VmExit::new().unwrap());
    let mut dev = AcpiPowerDevice::new(exit.clone());
    dev.write(2, &[ACPI_RESET_VALUE]);
    assert_eq!(exit.reason(), Some(ExitReason::Reset));
}

#[test]
fn i8042_reset_command() {
    let exit = Arc::new(VmExit::new().unwrap());
    let mut kbd = I8042(I8042Device::new(ResetTrigger(exit.clone())));
    kbd.write(4, &[0xaa]);
    assert_eq!(exit.reason(), None);
    kbd.write(4, &[0xfe]);
    assert_eq!(exit.reason(), Some(ExitReason::Reset));
}
