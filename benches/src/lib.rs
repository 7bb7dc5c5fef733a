//! Placeholder until the device benchmarks land (issue 3).
