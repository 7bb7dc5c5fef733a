//! Placeholder until the VMM lands (issue 4).
fn main() {}
