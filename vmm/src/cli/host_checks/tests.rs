use super::*;
use crate::cli::tests::tmpdir;

#[test]
fn vfio_checks_name_the_fix() {
    let d = tmpdir("vfio");
    let dev = d.join("0000:00:04.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("config"), [0u8; 64]).unwrap();
    let groups = d.join("groups/7");
    std::fs::create_dir_all(&groups).unwrap();
    let dev_vfio = d.join("dev-vfio");
    std::fs::create_dir_all(&dev_vfio).unwrap();
    let host = HostDevices {
        vfio: dev_vfio.clone(),
        iommu: d.join("no-iommu"),
    };
    let check_vfio_device = |p: &Path, _: &Path| check_vfio_device(p, &host, BackendChoice::Auto);

    assert!(matches!(
        check_vfio_device(&d.join("nope"), &dev_vfio),
        Err(ConfigError::NotPciDevice { .. })
    ));
    assert!(matches!(
        check_vfio_device(&d, &dev_vfio),
        Err(ConfigError::NotPciDevice { .. })
    ));
    assert!(matches!(
        check_vfio_device(&dev, &dev_vfio),
        Err(ConfigError::NoIommuGroup { .. })
    ));
    std::os::unix::fs::symlink(&groups, dev.join("iommu_group")).unwrap();
    let err = check_vfio_device(&dev, &dev_vfio).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("dev-vfio/7: bind 0000:00:04.0 to vfio-pci"),
        "{msg}"
    );
    std::fs::write(dev_vfio.join("7"), b"").unwrap();
    let spec = check_vfio_device(&dev, &dev_vfio).unwrap();
    assert_eq!(spec.bdf, "0000:00:04.0");
    assert_eq!(spec.group, 7);
    assert_eq!(spec.backend, VfioBackend::Container, "no /dev/iommu here");
    assert!(
        spec.backend_why.contains("CONFIG_IOMMUFD"),
        "{}",
        spec.backend_why
    );

    // With iommufd (its node, the device's cdev) the group node is not
    // needed: a kernel without CONFIG_VFIO_GROUP has none.
    std::fs::remove_file(dev_vfio.join("7")).unwrap();
    std::fs::write(d.join("iommu"), b"").unwrap();
    std::fs::create_dir_all(dev.join("vfio-dev/vfio0")).unwrap();
    std::fs::create_dir_all(dev_vfio.join("devices")).unwrap();
    std::fs::write(dev_vfio.join("devices/vfio0"), b"").unwrap();
    let host = HostDevices {
        vfio: dev_vfio.clone(),
        iommu: d.join("iommu"),
    };
    let spec = super::check_vfio_device(&dev, &host, BackendChoice::Auto).unwrap();
    assert_eq!(spec.backend, VfioBackend::Iommufd);
    assert!(
        !spec.container_fallback,
        "no group node: nothing to fall back to"
    );
    // ... but the container does.
    let err = super::check_vfio_device(&dev, &host, BackendChoice::Container).unwrap_err();
    assert!(matches!(err, ConfigError::NotBoundToVfio { .. }), "{err}");
    // Both: auto takes iommufd and may fall back to the container at VM
    // setup; a forced iommufd may not.
    std::fs::write(dev_vfio.join("7"), b"").unwrap();
    let spec = super::check_vfio_device(&dev, &host, BackendChoice::Auto).unwrap();
    assert_eq!(spec.backend, VfioBackend::Iommufd);
    assert!(spec.container_fallback);
    let spec = super::check_vfio_device(&dev, &host, BackendChoice::Iommufd).unwrap();
    assert!(!spec.container_fallback);
}

#[test]
fn busy_or_forbidden_group_is_one_line_with_the_fix() {
    let (path, dev) = (
        Path::new("/sys/bus/pci/devices/0000:00:04.0"),
        Path::new("/dev/vfio/7"),
    );
    let busy = group_open_error(
        path,
        dev,
        7,
        &std::io::Error::from_raw_os_error(libc::EBUSY),
    )
    .expect("EBUSY is reported")
    .to_string();
    assert!(
        busy.starts_with("--vfio /sys/bus/pci/devices/0000:00:04.0: /dev/vfio/7 is busy"),
        "{busy}"
    );
    assert!(
        busy.contains("IOMMU group 7 open") && !busy.contains('\n'),
        "{busy}"
    );
    let denied = group_open_error(
        path,
        dev,
        7,
        &std::io::Error::from_raw_os_error(libc::EACCES),
    )
    .expect("EACCES is reported")
    .to_string();
    assert!(
        denied.contains("permission denied (run as root"),
        "{denied}"
    );
    // Anything else is left to VM setup, which names the device too.
    assert!(
        group_open_error(path, dev, 7, &std::io::Error::from_raw_os_error(libc::EIO)).is_none()
    );
}

#[test]
fn bdf_syntax() {
    assert!(is_bdf("0000:00:04.0"));
    assert!(is_bdf("0000:af:1f.7"));
    assert!(!is_bdf("0000:00:04.8"));
    assert!(!is_bdf("00:04.0"));
    assert!(!is_bdf("0000:00:04:0"));
}
