use super::*;

#[test]
fn sizes() {
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("2G"), Ok(2 << 30));
    assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    assert_eq!(parse_size("64k"), Ok(64 << 10));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("lots").is_err());
    assert!(parse_size("1.5G").is_err());
    assert!(parse_size("99999999999T").is_err());
    assert!(parse_size("").is_err());
}

#[test]
fn ranges() {
    assert_eq!(parse_range("0x1000-0x1fff"), Ok((0x1000, 0x1fff)));
    assert_eq!(parse_range("4096 - 8191"), Ok((4096, 8191)));
    assert!(parse_range("0x2000-0x1000")
        .unwrap_err()
        .contains("FIRST is above LAST"));
    assert!(parse_range("12").unwrap_err().contains("FIRST-LAST"));
    assert!(parse_range("0xzz-1").unwrap_err().contains("not a number"));
}
