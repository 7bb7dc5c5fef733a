//! Benchmarks of the virtio-iommu device (see `benches/`).
//!
//! `cargo bench -p viommu-benches --bench device_batching` plays the Linux
//! 6.1 driver's request patterns (strict sync, seed 003's flush queue,
//! deferred unmap bursts) at 4-128 KiB I/O sizes through the device in guest
//! memory, with batching on and off, and prints requests/s, backend calls
//! and interrupts per 1000 requests for both, and their ratios.
