use super::*;

#[test]
fn sizes() {
    assert_eq!(parse_size("4k"), Some(4096));
    assert_eq!(parse_size("4K"), Some(4096));
    assert_eq!(parse_size("1G"), Some(1 << 30));
    assert_eq!(parse_size("512"), Some(512));
    assert_eq!(parse_size("8MiB"), Some(8 << 20));
    assert_eq!(parse_size("k"), None);
    assert_eq!(parse_size("4x"), None);
    assert_eq!(parse_size("-4k"), None);
    assert_eq!(parse_size("99999999999999999999g"), None);
    assert_eq!(size_label(4096), "4k");
    assert_eq!(size_label(1 << 20), "1m");
    assert_eq!(size_label(512), "512");
}

#[test]
fn durations() {
    assert_eq!(human_duration(Duration::from_secs(45)), "45s");
    assert_eq!(human_duration(Duration::from_secs(750)), "12m30s");
    assert_eq!(human_duration(Duration::from_secs(3720)), "1h02m");
}
