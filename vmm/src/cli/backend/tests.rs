use super::*;
use crate::cli::tests::tmpdir;

/// A fake host: a device directory, `/dev/vfio` and `/dev/iommu` paths
/// in a fresh directory; nothing exists yet.
fn host(name: &str) -> (PathBuf, HostDevices) {
    let d = tmpdir(name);
    let dev = d.join("0000:00:04.0");
    std::fs::create_dir_all(&dev).unwrap();
    let host = HostDevices {
        vfio: d.join("dev-vfio"),
        iommu: d.join("dev-iommu"),
    };
    (dev, host)
}

fn add_cdev_sysfs(dev: &Path, name: &str) {
    std::fs::create_dir_all(dev.join("vfio-dev").join(name)).unwrap();
}

fn add_cdev_node(host: &HostDevices, name: &str) {
    std::fs::create_dir_all(host.vfio.join("devices")).unwrap();
    std::fs::write(host.vfio.join("devices").join(name), b"").unwrap();
}

#[test]
fn auto_takes_iommufd_only_with_every_piece_present() {
    let (dev, host) = host("backend-auto");
    let pick = |c| choose(c, &dev, &dev, &host).unwrap();

    let (b, why) = pick(BackendChoice::Auto);
    assert_eq!(b, VfioBackend::Container);
    assert!(
        why.contains("dev-iommu: the host kernel needs CONFIG_IOMMUFD"),
        "{why}"
    );

    std::fs::write(&host.iommu, b"").unwrap();
    let (b, why) = pick(BackendChoice::Auto);
    assert_eq!(b, VfioBackend::Container);
    assert!(why.contains("CONFIG_VFIO_DEVICE_CDEV"), "{why}");

    add_cdev_sysfs(&dev, "vfio3");
    let (b, why) = pick(BackendChoice::Auto);
    assert_eq!(b, VfioBackend::Container);
    assert!(why.contains("devices/vfio3 (is devtmpfs"), "{why}");

    add_cdev_node(&host, "vfio3");
    let (b, why) = pick(BackendChoice::Auto);
    assert_eq!(b, VfioBackend::Iommufd);
    assert!(
        why.starts_with("auto: ") && why.contains("devices/vfio3 present"),
        "{why}"
    );

    let (b, _) = pick(BackendChoice::Container);
    assert_eq!(b, VfioBackend::Container, "forced container wins");
    let (b, why) = pick(BackendChoice::Iommufd);
    assert_eq!(b, VfioBackend::Iommufd);
    assert!(why.starts_with("--vfio-backend iommufd"), "{why}");
}

#[test]
fn forced_iommufd_names_the_missing_piece_and_the_fix() {
    let (dev, host) = host("backend-forced");
    let err = |host: &HostDevices| {
        choose(BackendChoice::Iommufd, &dev, Path::new("/sys/x"), host)
            .unwrap_err()
            .to_string()
    };
    let msg = err(&host);
    assert!(
        msg.starts_with("--vfio /sys/x: --vfio-backend iommufd: no "),
        "{msg}"
    );
    assert!(msg.contains("CONFIG_IOMMUFD (modprobe iommufd)"), "{msg}");
    assert!(msg.ends_with("or pass --vfio-backend container"), "{msg}");
    assert!(!msg.contains('\n'));

    std::fs::write(&host.iommu, b"").unwrap();
    let msg = err(&host);
    assert!(
        msg.contains("vfio-dev/vfioN: the host kernel needs CONFIG_VFIO_DEVICE_CDEV"),
        "{msg}"
    );
    // The container still works without any of it.
    assert!(choose(BackendChoice::Container, &dev, &dev, &host).is_ok());
}

#[test]
fn cdev_lookup_wants_exactly_one_vfio_entry() {
    let (dev, host) = host("backend-cdev");
    add_cdev_sysfs(&dev, "notvfio");
    assert!(matches!(vfio_cdev(&dev, &host), Err(Missing::SysfsCdev(_))));
    add_cdev_sysfs(&dev, "vfio0");
    add_cdev_sysfs(&dev, "vfio1");
    assert!(
        matches!(vfio_cdev(&dev, &host), Err(Missing::SysfsCdev(_))),
        "two: ambiguous"
    );
    std::fs::remove_dir(dev.join("vfio-dev/vfio1")).unwrap();
    add_cdev_node(&host, "vfio0");
    assert_eq!(
        vfio_cdev(&dev, &host).unwrap(),
        host.vfio.join("devices/vfio0")
    );
}
