use super::*;

async fn parse(raw: &[u8]) -> Result<Option<Request>, Response> {
    let mut r = tokio::io::BufReader::new(raw);
    read_request(&mut r).await
}

#[tokio::test]
async fn parses_and_bounds_requests() {
    let ok = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(
        ok.unwrap().unwrap(),
        Request {
            method: "GET".into(),
            path: "/metrics".into()
        }
    );
    let body = parse(b"PUT /a HTTP/1.0\nContent-Length: 2\n\n{}").await;
    assert_eq!(body.unwrap().unwrap().method, "PUT");
    assert_eq!(parse(b"").await.unwrap(), None);
    assert_eq!(parse(b"GET /\r\n\r\n").await.unwrap_err().status, 400);
    assert_eq!(parse(b"GET / HTTP/1.1\r\n").await.unwrap_err().status, 400);
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_LINE));
    assert_eq!(parse(long.as_bytes()).await.unwrap_err().status, 431);
    let many = format!(
        "GET / HTTP/1.1\r\n{}\r\n",
        "A: b\r\n".repeat(MAX_HEADERS + 1)
    );
    assert_eq!(parse(many.as_bytes()).await.unwrap_err().status, 431);
    let big = format!("PUT / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
    assert_eq!(parse(big.as_bytes()).await.unwrap_err().status, 413);
    let chunked = b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(parse(chunked).await.unwrap_err().status, 400);
}
