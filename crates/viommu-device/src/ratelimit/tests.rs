use super::*;

#[test]
fn a_burst_is_cut_to_the_limit_per_second() {
    let start = Instant::now();
    let allowed = (0..10_000).filter(|_| allow()).count() as u64;
    // Other tests may log too, and the burst may straddle windows.
    let windows = start.elapsed().as_secs() + 2;
    assert!(
        allowed <= PER_SECOND * windows,
        "{allowed} in {windows} windows"
    );
    assert!(DROPPED.load(Ordering::Relaxed) > 0 || allowed < 10_000);
}
