//! Reading the VMM's console and output line by line with every line
//! bounded: the guest's console is hostile input, and a line without an
//! end must not grow without limit.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Bytes of one line kept at most; the rest of a longer line is dropped.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// What a line cut at [`MAX_LINE_BYTES`] ends with, so that the log and a
/// marker's parse say what happened.
pub const CUT_MARK: &str = " [viommu-bench: line cut at 65536 bytes]";

/// Read one line (through its `\n`) into `buf`, keeping at most `max`
/// bytes of it and consuming the rest; the bytes consumed (0: end of
/// input) and whether the line was cut.
pub async fn read_line_capped<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(usize, bool)> {
    let (mut read, mut cut) = (0, false);
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok((read, cut));
        }
        let (take, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        cut |= take > room && !(done && take == room + 1);
        buf.extend_from_slice(&avail[..take.min(room)]);
        r.consume(take);
        read += take;
        if done {
            return Ok((read, cut));
        }
    }
}

/// A line as text: invalid UTF-8 replaced, the line end dropped, and
/// [`CUT_MARK`] after a cut one.
pub fn line_text(buf: &[u8], cut: bool) -> String {
    let mut s = String::from_utf8_lossy(buf)
        .trim_end_matches(['\n', '\r'])
        .to_string();
    if cut {
        s.push_str(CUT_MARK);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(String, bool)> {
        let mut r = tokio::io::BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let (n, cut) = read_line_capped(&mut r, &mut buf, max).await.unwrap();
            if n == 0 {
                return out;
            }
            out.push((line_text(&buf, false), cut));
        }
    }

    #[tokio::test]
    async fn long_lines_are_cut_and_the_next_line_is_whole() {
        let mut input = vec![b'x'; 100];
        input.extend_from_slice(b"\nshort\r\n");
        input.extend_from_slice(&[b'y'; 10]);
        input.extend_from_slice(b"\nend");
        let got = lines(&input, 10).await;
        assert_eq!(got[0], ("x".repeat(10), true));
        assert_eq!(got[1], ("short".into(), false));
        // Exactly `max` bytes before the newline: whole.
        assert_eq!(got[2], ("y".repeat(10), false));
        assert_eq!(got[3], ("end".into(), false));
        assert_eq!(got.len(), 4);
        assert!(line_text(b"abc", true).ends_with(CUT_MARK));
        assert!(CUT_MARK.contains(&MAX_LINE_BYTES.to_string()));
    }
}
