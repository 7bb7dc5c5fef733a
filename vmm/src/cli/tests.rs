use super::*;

/// A fresh, empty directory for one test.
pub(super) fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmm-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test directory with a kernel file in it, and `validate` of the
/// command line `vmm --kernel KERNEL ARGS...` with `/dev/vfio` there.
fn validator(name: &str) -> (PathBuf, impl Fn(&[&str]) -> Result<VmConfig, ConfigError>) {
    let d = tmpdir(name);
    let k = d.join("bzImage");
    std::fs::write(&k, b"x").unwrap();
    let dir = d.clone();
    let v = move |args: &[&str]| {
        let ks = k.to_str().unwrap();
        let mut all = vec!["vmm", "--kernel", ks];
        all.extend_from_slice(args);
        let host = HostDevices {
            vfio: dir.clone(),
            iommu: dir.join("iommu"),
        };
        Cli::try_parse_from(all).unwrap().validate(&host)
    };
    (d, v)
}

#[test]
fn parses_the_issue_command_line() {
    let cli = Cli::try_parse_from([
        "vmm",
        "--kernel",
        "bzImage",
        "--initrd",
        "initrd.cpio.gz",
        "--cmdline",
        "console=ttyS0",
        "--memory",
        "1G",
        "--cpus",
        "2",
        "--vfio",
        "/sys/bus/pci/devices/0000:00:04.0",
        "--viommu",
    ])
    .unwrap();
    assert_eq!(cli.memory, 1 << 30);
    assert_eq!(cli.cpus, 2);
    assert_eq!(cli.vfio.len(), 1);
    assert!(cli.viommu);
    assert!(Cli::try_parse_from(["vmm", "--kernel", "k", "--cpus", "0"]).is_err());
    assert!(Cli::try_parse_from(["vmm", "--kernel", "k", "--cpus", "255"]).is_err());
    assert!(Cli::try_parse_from(["vmm", "--initrd", "i"]).is_err());
    assert_eq!(cli.vfio_backend, BackendChoice::Auto, "the default");
    let pick = |v: &str| {
        Cli::try_parse_from(["vmm", "--kernel", "k", "--vfio-backend", v]).map(|c| c.vfio_backend)
    };
    assert_eq!(pick("iommufd").unwrap(), BackendChoice::Iommufd);
    assert_eq!(pick("container").unwrap(), BackendChoice::Container);
    assert_eq!(pick("auto").unwrap(), BackendChoice::Auto);
    assert!(pick("type1").is_err());
}

#[test]
fn missing_kernel_names_the_flag_and_path() {
    let cli = Cli::try_parse_from(["vmm", "--kernel", "/nonexistent/bzImage"]).unwrap();
    let err = cli.validate(&HostDevices::default()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("--kernel /nonexistent/bzImage: cannot open"),
        "{msg}"
    );
    assert!(msg.contains("bzImage"), "{msg}");
    assert!(!msg.contains('\n'));
}

#[test]
fn pin_guest_ram_needs_iommufd_devices() {
    let (_, v) = validator("pin");
    let msg = v(&["--pin-guest-ram"]).unwrap_err().to_string();
    assert_eq!(
        msg,
        "--pin-guest-ram: needs every --vfio device on the iommufd backend, but no --vfio device to map for; drop --pin-guest-ram or use --vfio-backend iommufd on a host with it"
    );
    assert!(!v(&[]).unwrap().pin_guest_ram, "off by default");
    let spec = |bdf: &str, backend| VfioDeviceSpec {
        sysfs: PathBuf::from("/sys/bus/pci/devices").join(bdf),
        bdf: bdf.into(),
        group: 1,
        backend,
        backend_why: "auto: iommufd unavailable (no /dev/iommu)".into(),
        container_fallback: false,
    };
    let both = [
        spec("0000:00:04.0", VfioBackend::Iommufd),
        spec("0000:00:05.0", VfioBackend::Container),
    ];
    let msg = check_pin_guest_ram(&both).unwrap_err().to_string();
    assert!(
        msg.contains("but 0000:00:05.0 uses the container backend (auto: iommufd unavailable (no /dev/iommu))"),
        "{msg}"
    );
    assert!(check_pin_guest_ram(&both[..1]).is_ok());
}

#[test]
fn memory_checks() {
    let (d, v) = validator("mem");
    assert!(matches!(
        v(&["--memory", "1M"]),
        Err(ConfigError::MemoryTooSmall { .. })
    ));
    assert!(matches!(
        v(&["--memory", "65M", "--hugepages"]),
        Err(ConfigError::MemoryUnaligned {
            align: 0x20_0000,
            ..
        })
    ));
    let cfg = v(&["--memory", "66M", "--cpus", "2"]).unwrap();
    assert_eq!((cfg.memory, cfg.cpus), (66 << 20, 2));
    assert!(matches!(
        v(&["--initrd", d.to_str().unwrap()]),
        Err(ConfigError::NotAFile { flag: "initrd", .. })
    ));
    assert!(v(&["--viommu"]).unwrap().viommu);
}

#[test]
fn viommu_options() {
    let (_, v) = validator("viommu-opts");
    let cfg = v(&["--viommu"]).unwrap();
    assert!(cfg.lazy_unmap);
    assert_eq!(
        cfg.pool_hint,
        Some((DEFAULT_POOL_THRESHOLD as u32, DEFAULT_POOL_MAX))
    );
    assert_eq!(
        cfg.viommu_poll,
        crate::devices::viommu::DEFAULT_POLL_MAX,
        "polling on by default"
    );
    assert_eq!(cfg.viommu_poll, std::time::Duration::from_millis(1));
    let cfg = v(&["--viommu", "--viommu-poll-us", "0"]).unwrap();
    assert!(cfg.viommu_poll.is_zero(), "0 turns it off");
    let cfg = v(&["--viommu", "--viommu-poll-us", "1000"]).unwrap();
    assert_eq!(cfg.viommu_poll, std::time::Duration::from_millis(1));
    let msg = v(&["--viommu", "--viommu-poll-us", "1001"])
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "--viommu-poll-us 1001: at most 1000 microseconds (polling longer costs more than the wake-up it saves)"
    );
    assert!(matches!(
        v(&["--viommu-poll-us", "20"]),
        Err(ConfigError::NeedsViommu {
            flag: "viommu-poll-us"
        })
    ));
    assert!(Cli::try_parse_from(["vmm", "--kernel", "k", "--viommu-poll-us", "-1"]).is_err());
    // Who serves the request queue's kicks: the vCPUs by default,
    // polling or not.
    use crate::devices::viommu::KickServing;
    let kicks = |args: &[&str]| v(args).map(|c| c.viommu_kicks);
    assert_eq!(kicks(&["--viommu"]).unwrap(), KickServing::Vcpu);
    assert_eq!(
        kicks(&["--viommu", "--viommu-poll-us", "0"]).unwrap(),
        KickServing::Vcpu
    );
    assert_eq!(
        kicks(&["--viommu", "--viommu-kicks", "thread"]).unwrap(),
        KickServing::Thread
    );
    assert_eq!(
        kicks(&[
            "--viommu",
            "--viommu-kicks",
            "vcpu",
            "--viommu-poll-us",
            "0"
        ])
        .unwrap(),
        KickServing::Vcpu
    );
    assert_eq!(
        kicks(&["--viommu", "--viommu-poll-us", "50"]).unwrap(),
        KickServing::Vcpu
    );
    assert_eq!(
        kicks(&[
            "--viommu",
            "--viommu-poll-us",
            "50",
            "--viommu-kicks",
            "thread"
        ])
        .unwrap(),
        KickServing::Thread
    );
    assert_eq!(
        kicks(&["--viommu", "--viommu-kicks", "vcpu"]).unwrap(),
        KickServing::Vcpu
    );
    // The default polling goes with either: vcpu hands over to it.
    let cfg = v(&["--viommu", "--viommu-kicks", "vcpu"]).unwrap();
    assert!(!cfg.viommu_poll.is_zero(), "{:?}", cfg.viommu_poll);
    // Both asked for: the vCPUs serve and hand over to the polling.
    let cfg = v(&[
        "--viommu",
        "--viommu-kicks",
        "vcpu",
        "--viommu-poll-us",
        "50",
    ])
    .unwrap();
    assert_eq!(cfg.viommu_kicks, KickServing::Vcpu);
    assert_eq!(cfg.viommu_poll, std::time::Duration::from_micros(50));
    let cfg = v(&["--viommu", "--no-lazy-unmap", "--pool-threshold", "0"]).unwrap();
    assert!(!cfg.lazy_unmap);
    assert_eq!(cfg.pool_hint, None);
    let cfg = v(&["--viommu", "--pool-threshold", "16K", "--pool-max", "1M"]).unwrap();
    assert_eq!(cfg.pool_hint, Some((16 << 10, 1 << 20)));
    let msg = v(&["--pool-max", "1M"]).unwrap_err().to_string();
    assert_eq!(
        msg,
        "--pool-max: only applies to the virtio-iommu; add --viommu or drop --pool-max"
    );
    assert!(matches!(
        v(&["--reserve-iova", "0x1000-0x1fff"]),
        Err(ConfigError::NeedsViommu {
            flag: "reserve-iova"
        })
    ));
    assert!(matches!(
        v(&["--no-lazy-unmap"]),
        Err(ConfigError::NeedsViommu {
            flag: "no-lazy-unmap"
        })
    ));
    let msg = v(&["--viommu", "--pool-threshold", "8G"])
        .unwrap_err()
        .to_string();
    assert_eq!(msg, "--pool-threshold 8589934592: must be below 4G");
    let msg = v(&["--viommu", "--pool-max", "5000"])
        .unwrap_err()
        .to_string();
    assert_eq!(msg, "--pool-max 5000: must be a non-zero multiple of 4K");
    assert!(matches!(
        v(&["--viommu", "--pool-threshold", "1M", "--pool-max", "64K"]),
        Err(ConfigError::PoolHint {
            flag: "pool-max",
            ..
        })
    ));
}

#[test]
fn reboot_limit_is_n_per_seconds() {
    use super::parse::parse_reboot_limit;
    assert_eq!(parse_reboot_limit("10/60"), Ok((10, 60)));
    assert_eq!(parse_reboot_limit("1/1"), Ok((1, 1)));
    for bad in ["", "10", "0/60", "10/0", "a/b", "10/60/1", "10/100000"] {
        assert!(parse_reboot_limit(bad).is_err(), "{bad}");
    }
}

#[test]
fn reboot_flags() {
    let (d, v) = validator("reboot");
    // The command line's defaults are the policy's: a reboot restarts the
    // guest in place, a triple fault ends the VMM.
    let cfg = v(&[]).unwrap();
    assert_eq!(cfg.reboot, crate::reboot::RebootPolicy::default());
    assert_eq!(cfg.reboot.on_reboot, crate::reboot::OnReset::Restart);
    assert_eq!(cfg.reboot.on_triple_fault, crate::reboot::OnReset::Exit);
    assert_eq!((cfg.reboot.max, cfg.reboot.window.as_secs()), (10, 60));
    let cfg = v(&["--reboot-limit", "3/10"]).unwrap();
    assert_eq!((cfg.reboot.max, cfg.reboot.window.as_secs()), (3, 10));
    // The old behaviour, exit code 3 on a reboot, on request.
    let cfg = v(&["--on-reboot", "exit"]).unwrap();
    assert_eq!(cfg.reboot.on_reboot, crate::reboot::OnReset::Exit);
    let cfg = v(&["--on-reboot", "restart", "--on-triple-fault", "restart"]).unwrap();
    assert_eq!(cfg.reboot.on_reboot, crate::reboot::OnReset::Restart);
    assert_eq!(cfg.reboot.on_triple_fault, crate::reboot::OnReset::Restart);
    let _ = std::fs::remove_dir_all(&d);
}
