use super::*;

#[derive(Clone, Default)]
struct CapturedOutput(Arc<Mutex<Vec<u8>>>);
impl Write for CapturedOutput {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn uart() -> (SerialDevice, Arc<RecordedLine>, CapturedOutput) {
    let line = Arc::new(RecordedLine::default());
    let out = CapturedOutput::default();
    let s = SerialDevice::new(line.clone(), Box::new(out.clone()));
    (s, line, out)
}

#[test]
fn output_reaches_the_writer_and_input_raises_the_line() {
    let (mut s, line, out) = uart();
    for b in b"hi\n" {
        s.write(0, &[*b]);
    }
    assert_eq!(&*out.0.lock().unwrap(), b"hi\n");
    assert_eq!(s.reading().tx_bytes, 3);
    assert!(line.0.lock().unwrap().is_empty(), "no interrupt enabled");
    // Divisor latch writes are not output.
    s.write(3, &[0x80]);
    s.write(0, &[1]);
    s.write(3, &[0x03]);
    assert_eq!(s.reading().tx_bytes, 3);
    // Enable the "data available" interrupt (IER bit 0), then feed input.
    s.write(1, &[0x01]);
    assert_eq!(s.enqueue_input(b"x"), 1);
    assert_eq!(*line.0.lock().unwrap(), vec![true]);
    let r = s.reading();
    assert_eq!((r.ier, r.irqs), (0x01, 1));
    assert_ne!(r.iir & 0x04, 0, "data-available interrupt pending");
    let mut lsr = [0u8];
    s.read(5, &mut lsr);
    assert_eq!(lsr[0] & 1, 1, "LSR data ready");
    let mut rbr = [0u8];
    s.read(0, &mut rbr);
    assert_eq!(rbr[0], b'x');
    assert_eq!(*line.0.lock().unwrap(), vec![true, false], "taken: low");
}

#[test]
fn the_transmit_interrupt_is_a_new_edge_each_time_it_is_taken() {
    let (mut s, line, _) = uart();
    // THRI on: the transmitter is empty, so it is pending at once.
    s.write(1, &[IER_THRI]);
    assert_eq!(*line.0.lock().unwrap(), vec![true]);
    // The driver takes it (IIR read), writes a byte: pending again.
    let mut iir = [0u8];
    s.read(2, &mut iir);
    assert_eq!(iir[0] & 0x0f, IIR_THRI);
    s.write(0, b"a");
    s.write(0, b"b"); // still pending: no new edge
    assert_eq!(*line.0.lock().unwrap(), vec![true, false, true]);
    // THRI off: the interrupt is no longer enabled, the line drops
    // although the bit is still set.
    s.write(1, &[0]);
    assert_eq!(*line.0.lock().unwrap(), vec![true, false, true, false]);
}

#[test]
fn input_past_a_full_fifo_waits_for_the_guest() {
    let (mut s, _, _) = uart();
    let line = [b'a'; 100];
    assert_eq!(s.enqueue_input(&line), 64, "the FIFO's size");
    assert_eq!(
        s.enqueue_input(&line[64..]),
        0,
        "full: nothing taken, no error"
    );
    let mut rbr = [0u8];
    s.read(0, &mut rbr);
    assert_eq!(s.enqueue_input(&line[64..]), 1, "one byte read, one taken");
}
