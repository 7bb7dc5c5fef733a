use super::*;

/// (open, bytes written so far).
type GateState = Mutex<(bool, Vec<u8>)>;

/// An output that blocks until released.
#[derive(Clone, Default)]
struct Gate(Arc<(GateState, Condvar)>);
impl Write for Gate {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let (m, cv) = &*self.0;
        let mut g = cv.wait_while(m.lock().unwrap(), |g| !g.0).unwrap();
        g.1.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stuck_host_output_never_blocks_the_writer_and_drops_are_counted() {
    let gate = Gate::default();
    let (mut out, mut flusher) = console(Box::new(gate.clone()), 8, None).unwrap();
    let start = Instant::now();
    // The thread takes the first bytes and blocks in the output; the
    // buffer fills; the rest is dropped, all without waiting.
    for _ in 0..100 {
        out.write_all(b"0123456789").unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(out.dropped() >= 100 * 10 - 8 - 10, "{}", out.dropped());
    assert!(!flusher.finish(Duration::from_millis(50)), "still stuck");
    {
        let (m, cv) = &*gate.0;
        m.lock().unwrap().0 = true;
        cv.notify_all();
    }
    assert!(flusher.finish(Duration::from_secs(10)));
    let written = gate.0 .0.lock().unwrap().1.len() as u64;
    assert_eq!(written + out.dropped(), 1000);
}

#[test]
fn everything_is_written_in_order_and_finish_flushes() {
    let gate = Gate::default();
    gate.0 .0.lock().unwrap().0 = true;
    let (mut out, mut flusher) = console(Box::new(gate.clone()), 1 << 16, None).unwrap();
    for i in 0..1000u32 {
        write!(out, "{i},").unwrap();
    }
    assert!(flusher.finish(Duration::from_secs(10)));
    let want: String = (0..1000u32).map(|i| format!("{i},")).collect();
    assert_eq!(
        String::from_utf8(gate.0 .0.lock().unwrap().1.clone()).unwrap(),
        want
    );
    assert_eq!(out.dropped(), 0);
}
