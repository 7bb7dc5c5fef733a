use super::*;
use crate::run::metrics::tests::real_text;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn stock_qemu_gives_nothing_in_timed_phases() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("q.trace");
    // Even lines in its trace file (were it traced) are not read.
    std::fs::write(&t, "virtio_iommu_map domain=1\n").unwrap();
    let mut src = CounterSource::new(Some(&t), Some(&d.path().join("q.qmp")), None);
    assert!(matches!(src, CounterSource::Qemu(_)));
    assert_eq!(src.snapshot().await.unwrap(), None);
    // A trace file without a QMP socket cannot be counted: nothing.
    assert!(matches!(
        CounterSource::new(Some(&t), None, None),
        CounterSource::None
    ));
}

#[tokio::test]
async fn fetches_from_a_socket() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("api.sock");
    let l = tokio::net::UnixListener::bind(&p).unwrap();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut head = String::new();
        let mut r = tokio::io::BufReader::new(r);
        loop {
            let mut line = String::new();
            tokio::io::AsyncBufReadExt::read_line(&mut r, &mut line)
                .await
                .unwrap();
            head.push_str(&line);
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        assert!(head.starts_with("GET /metrics HTTP/1.1\r\n"), "{head}");
        let body = real_text();
        w.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    });
    let mut src = CounterSource::new(None, None, Some(&p));
    let c = src.snapshot().await.unwrap().unwrap();
    assert_eq!(c.map_requests, 30240);
}
