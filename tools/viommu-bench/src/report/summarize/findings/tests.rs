use super::*;

#[test]
fn retry_warnings_old_and_new() {
    assert!(is_retry_warning(
        "first attempt failed (x); ran it again (log y)"
    ));
    let w = format!("{} (x); ran it again (log y)", retry_warning_head(3));
    assert!(w.starts_with("attempt 3 failed (") && is_retry_warning(&w));
    assert!(!is_retry_warning("attempt to map failed (x)"));
    assert!(!is_retry_warning("the guest may use IOVAs 0x1-0x2"));
}
