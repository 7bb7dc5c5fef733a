//! Fuzzes the control plane's HTTP request parser (`vmm::api::http`) on
//! whatever bytes a client sends: it must answer every input with a
//! request or one of its error statuses, within its size bounds, without
//! panicking.

#![no_main]

use std::future::Future;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use vmm::api::http::{read_request, MAX_REQUEST_LINE};

fuzz_target!(|data: &[u8]| {
    let mut reader = tokio::io::BufReader::new(data);
    let mut fut = std::pin::pin!(read_request(&mut reader));
    // Reading from a byte slice never waits: one poll finishes it.
    let Poll::Ready(r) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) else {
        panic!("the parser waited on an in-memory input");
    };
    match r {
        Ok(None) => assert!(data.is_empty()),
        Ok(Some(req)) => {
            assert!(!req.method.is_empty());
            assert!(req.path.starts_with('/'));
            assert!(req.method.len() + req.path.len() <= MAX_REQUEST_LINE);
        }
        Err(resp) => assert!(
            matches!(resp.status, 400 | 413 | 431),
            "unexpected status {}",
            resp.status
        ),
    }
});
