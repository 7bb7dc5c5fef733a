use super::*;

#[test]
fn timestamps() {
    assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
    assert_eq!(utc_timestamp(1_795_000_000), "2026-11-18T11:06:40Z");
    assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
}
