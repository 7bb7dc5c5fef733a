use super::*;

fn parse(extra: &[&str]) -> Result<Config, CliError> {
    let mut argv = vec![
        "viommu-bench",
        "--device",
        "0000:01:00.0",
        "--destroy-data",
        "0000:01:00.0",
        "--kernel-stock",
        "/k/s",
        "--kernel-patched",
        "/k/p",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv)
        .expect("clap accepts it")
        .validate()
}

#[test]
fn breakdown_needs_a_run_to_record() {
    let c = parse(&["--breakdown"]).unwrap();
    assert!(c.args.breakdown);
    let e = parse(&["--breakdown", "--count-runtime", "0"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--count-runtime") && e.contains("--breakdown"),
        "{e}"
    );
    assert!(parse(&["--count-runtime", "0"]).is_ok());
}

#[test]
fn defaults() {
    let c = parse(&[]).unwrap();
    assert_eq!(c.columns.len(), 7);
    assert_eq!(c.baseline, 0, "qemu-vtd+stock, the first column");
    assert_eq!(
        c.bs.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
        ["4k", "16k", "64k", "128k", "256k"]
    );
    assert_eq!(c.numjobs, vec![1]);
    assert_eq!(c.memory_mib, 1024);
    assert_eq!(c.ceiling(), Some(6));
    assert_eq!(c.args.rw, Rw::Randread);
    assert_eq!(c.args.rounds, 5);
    assert_eq!(c.args.count_runtime, 3);
    assert_eq!(
        parse(&["--count-runtime", "0"]).unwrap().args.count_runtime,
        0
    );
}

#[test]
fn bdf_forms() {
    assert_eq!(normalize_bdf("01:00.0").as_deref(), Some("0000:01:00.0"));
    assert_eq!(
        normalize_bdf("0000:AF:00.1").as_deref(),
        Some("0000:af:00.1")
    );
    assert_eq!(normalize_bdf("0000:01:00.8"), None);
    assert_eq!(normalize_bdf("nvme0"), None);
    // Intel VMD's domains: 5 hex digits and more, up to 0xffffffff.
    assert_eq!(
        normalize_bdf("10000:E1:00.0").as_deref(),
        Some("10000:e1:00.0")
    );
    assert_eq!(
        normalize_bdf("ffffffff:01:00.0").as_deref(),
        Some("ffffffff:01:00.0")
    );
    assert_eq!(normalize_bdf("100000000:01:00.0"), None);
    assert_eq!(normalize_bdf("000:01:00.0"), None);
    assert_eq!(normalize_bdf("1000g:01:00.0"), None);
    assert_eq!(normalize_bdf(""), None);
    let e = Args::try_parse_from(["viommu-bench", "--device", "nvme0n1", "--dry-run"])
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(e, CliError::BadBdf("nvme0n1".into()));
}

#[test]
fn consent_is_required_unless_dry_run() {
    let e = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--kernel-stock",
        "k",
        "--kernel-patched",
        "k",
    ])
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(e, CliError::NoConsent("0000:01:00.0".into()));
    assert!(e.to_string().contains("--destroy-data 0000:01:00.0"));
    assert!(
        Args::try_parse_from(["viommu-bench", "--device", "01:00.0", "--dry-run"])
            .unwrap()
            .validate()
            .is_ok()
    );
}

#[test]
fn bad_values_name_the_flag_and_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["--bs", "4k,5x"], "--bs \"5x\""),
        (&["--bs", "1000"], "--bs \"1000\""),
        (&["--bs", "32m"], "at most 16m"),
        (&["--numjobs", "0"], "--numjobs \"0\""),
        (&["--iodepth", "0"], "--iodepth"),
        (&["--ramp", "601"], "--ramp"),
        (
            &["--count-runtime", "601"],
            "--count-runtime \"601\": seconds between 0",
        ),
        (&["--guest-cpus", "300"], "--guest-cpus"),
        (&["--guest-cpus", "65"], "CONFIG_NR_CPUS=64"),
        (&["--guest-memory", "lots"], "--guest-memory \"lots\""),
        (&["--guest-memory", "128M"], "at least 256M"),
        (&["--runtime", "0"], "--runtime"),
        (&["--rounds", "0"], "--rounds"),
        (&["--stall-seconds", "5"], "--stall-seconds"),
        (&["--verify-size", "1k"], "--verify-size"),
        (
            &["--span", "1M"],
            "--span \"1M\": a whole number of MiB, at least 64M",
        ),
        (&["--span", "lots"], "--span"),
        (&["--columns", "ours+turbo"], "\"ours+turbo\""),
        (&["--baseline", "nope"], "--baseline \"nope\""),
        (&["--lead", "nope"], "--lead \"nope\""),
    ];
    for (flags, want) in cases {
        let e = parse(flags).unwrap_err().to_string();
        assert!(e.contains(want), "{flags:?}: {e}");
    }
}

#[test]
fn guest_cpus_stop_at_the_guest_kernels_nr_cpus() {
    let fragment = include_str!("../../../../guest-patches/config-fragment");
    let nr: Vec<u32> = fragment
        .lines()
        .filter_map(|l| l.strip_prefix("CONFIG_NR_CPUS="))
        .map(|v| v.trim().parse().unwrap())
        .collect();
    assert_eq!(nr, [GUEST_MAX_CPUS], "guest-patches/config-fragment");
    let max = GUEST_MAX_CPUS.to_string();
    assert_eq!(
        parse(&["--guest-cpus", &max]).unwrap().args.guest_cpus,
        GUEST_MAX_CPUS
    );
    let over = (GUEST_MAX_CPUS + 1).to_string();
    let e = parse(&["--guest-cpus", &over]).unwrap_err().to_string();
    assert!(
        e.contains(&format!("--guest-cpus \"{over}\"")) && e.contains("between 1 and 64"),
        "{e}"
    );
}

#[test]
fn lists_dedupe_and_keep_order() {
    let c = parse(&["--bs", "128k,4k,4096", "--numjobs", "2,1,2"]).unwrap();
    assert_eq!(
        c.bs.iter().map(|b| b.label.as_str()).collect::<Vec<_>>(),
        ["128k", "4k"]
    );
    assert_eq!(c.numjobs, vec![2, 1]);
    assert!(
        Args::try_parse_from(["viommu-bench", "--device", "01:00.0", "--rw", "randtrim"]).is_err()
    );
}

#[test]
fn named_kernels_are_checked_and_required_by_their_columns() {
    let cols = "qemu+stock,q73:qemu:viommu:stock-7.3";
    let c = parse(&["--kernel", "stock-7.3=/k/73", "--columns", cols]).unwrap();
    assert_eq!(c.kernels_named["stock-7.3"], PathBuf::from("/k/73"));
    let e = parse(&["--columns", cols]).unwrap_err().to_string();
    assert!(
        e.contains("q73") && e.contains("--kernel stock-7.3=PATH"),
        "{e}"
    );
    for bad in ["stock-7.3", "=/k", "patched=/k", "a/b=/k", "x="] {
        let e = parse(&["--kernel", bad, "--columns", cols])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("--kernel {bad:?}")), "{e}");
    }
    let e = parse(&["--kernel", "k=/a", "--kernel", "k=/b"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("each NAME once"), "{e}");
}

#[test]
fn kernels_only_for_the_columns_that_boot_them() {
    let e = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--destroy-data",
        "01:00.0",
        "--kernel-stock",
        "k",
    ])
    .unwrap()
    .validate()
    .unwrap_err();
    assert!(
        matches!(
            e,
            CliError::MissingKernel {
                flag: "--kernel-patched",
                ..
            }
        ),
        "{e}"
    );
    let ok = Args::try_parse_from([
        "viommu-bench",
        "--device",
        "01:00.0",
        "--destroy-data",
        "01:00.0",
        "--kernel-stock",
        "k",
        "--columns",
        "qemu+stock,no-viommu",
    ])
    .unwrap()
    .validate();
    assert!(ok.is_ok());
}

#[test]
fn help_names_the_cache_the_code_uses() {
    use clap::CommandFactory;
    let help = Args::command().render_long_help().to_string();
    assert!(help.contains("/var/cache/viommu-bench"), "{help}");
    assert_eq!(
        crate::setup::host::default_cache_for(0, None, Some("/root".as_ref())),
        std::path::PathBuf::from("/var/cache/viommu-bench")
    );
}

#[test]
fn hugepages_take_guest_ram_in_whole_2m_pages() {
    let c = parse(&["--hugepages", "--guest-memory", "2G"]).unwrap();
    assert!(c.args.hugepages);
    assert_eq!(c.memory_mib, 2048);
    assert!(!parse(&[]).unwrap().args.hugepages);
    // 1025M is a whole number of MiB but not of 2 MiB pages.
    assert!(parse(&["--guest-memory", "1025M"]).is_ok());
    let e = parse(&["--hugepages", "--guest-memory", "1025M"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--guest-memory") && e.contains("2 MiB huge pages"),
        "{e}"
    );
}
