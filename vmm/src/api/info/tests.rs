use super::*;
use crate::cli::VfioDeviceSpec;

#[test]
fn info_names_each_device_on_host_and_guest() {
    let cfg = VmConfig {
        kernel: "bzImage".into(),
        initrd: None,
        cmdline: "console=ttyS0".into(),
        memory: 1 << 30,
        hugepages: false,
        cpus: 2,
        vfio: vec![VfioDeviceSpec {
            sysfs: "/sys/bus/pci/devices/0000:01:00.0".into(),
            bdf: "0000:01:00.0".into(),
            group: 7,
            backend: crate::cli::VfioBackend::Iommufd,
            backend_why: String::new(),
            container_fallback: false,
        }],
        pin_guest_ram: false,
        viommu: false,
        api_socket: None,
        lazy_unmap: true,
        pool_hint: Some((4096, 1 << 20)),
        reserve_iova: Vec::new(),
        host_pci_reserve: true,
        viommu_poll: std::time::Duration::from_micros(20),
        viommu_kicks: crate::devices::viommu::KickServing::Thread,
        viommu_notify: crate::devices::virtio::pci::NotifyRegister::Port,
        seccomp: Default::default(),
        user: None,
        reboot: Default::default(),
    };
    let exit = Arc::new(VmExit::new().unwrap());
    let s = state(&cfg, &exit, None, None, &[Bdf::slot(1)]);
    assert_eq!(s.info["cpus"], 2);
    assert_eq!(s.info["vfio"][0]["host"], "0000:01:00.0");
    assert_eq!(s.info["vfio"][0]["guest"], "0000:00:01.0");
    assert_eq!(s.info["vfio"][0]["iommu_group"], 7);
    assert_eq!(s.info["vfio"][0]["backend"], "iommufd");
    // Without a virtio-iommu nothing of it is offered or counted.
    assert_eq!(s.info["lazy_unmap"], false);
    assert!(s.info["pool_hint"].is_null());
    assert!(s.info["viommu_poll_us"].is_null());
    assert_eq!((s.metrics)(), "");
}
