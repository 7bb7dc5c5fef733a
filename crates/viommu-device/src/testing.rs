//! Test helpers shared by the unit tests, the benches and the fuzz target
//! (feature `test-utils`), one file a job:
//! - [`driver`]: a guest-side split-virtqueue driver that sends requests
//!   through guest memory and reads the replies;
//! - [`mapper`]: a fake host mapper behaving like VFIO type1 v2, with
//!   failure injection and a call log;
//! - [`req`]: the bytes of each request type;
//! - [`workload`]: request streams shaped like the Linux driver's;
//! - [`harness`]: a device in guest memory with drivers on both queues,
//!   fake mappers behind its endpoints and an interrupt counter;
//! - [`busy`]: a guest that keeps the request queue busy without kicking;
//! - [`logs`]: counting what a piece of code logs.

pub mod busy;
pub mod driver;
pub mod harness;
pub mod logs;
pub mod mapper;
pub mod req;
pub mod workload;

pub use busy::{activate_busy, BusyGuest};
pub use driver::{GuestDriver, Used};
pub use harness::{CountingInterrupt, Harness, TestMem, DATA_BASE, MEM_SIZE};
pub use logs::{count_warnings, warning_budget};
pub use mapper::{FakeCall, FakeMapper};

/// Property-test case count: `PROPTEST_CASES` from the environment, else
/// `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
