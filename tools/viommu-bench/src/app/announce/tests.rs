use super::*;
use crate::cli::Args;
use clap::Parser;

fn cfg(extra: &[&str]) -> Config {
    let mut argv = vec!["viommu-bench", "--device", "01:00.0", "--dry-run"];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).unwrap().validate().unwrap()
}

#[test]
fn the_plan_names_both_kinds_of_huge_pages() {
    // 18: the default preconditioning write (32 x 1 MiB) decides.
    assert_eq!(hugepages(&cfg(&[])), "");
    let guest = ", fio's buffers in 18 2 MiB huge pages each guest reserves (--guest-hugepages)";
    assert_eq!(hugepages(&cfg(&["--guest-hugepages"])), guest);
    let host = ", one at a time, each with its 1024 MiB of RAM in 512 reserved 2 MiB huge pages (--hugepages)";
    assert_eq!(hugepages(&cfg(&["--hugepages"])), host);
    assert_eq!(
        hugepages(&cfg(&["--hugepages", "--guest-hugepages"])),
        format!("{host}{guest}")
    );
}
