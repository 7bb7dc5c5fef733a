//! A minimal HTTP/1.1 server side: one request per connection, no body
//! needed by any route.
//!
//! Why hand-rolled rather than hyper: the control plane has three routes,
//! no request bodies and one local client at a time; a parser with hard
//! limits on the request line and headers is a few dozen lines that build
//! offline in seconds on a 2-core machine, where hyper with hyper-util and
//! http-body-util would add a dozen crates to the build for no behaviour
//! we use. The limits bound what a client on the socket can make us
//! buffer: a request line of at most [`MAX_REQUEST_LINE`] bytes, at most
//! [`MAX_HEADERS`] headers of at most [`MAX_HEADER_LINE`] bytes each, and
//! a body (which no route reads) of at most [`MAX_BODY`] bytes.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest request line accepted, in bytes.
pub const MAX_REQUEST_LINE: usize = 1024;
/// Longest header line accepted, in bytes.
pub const MAX_HEADER_LINE: usize = 4096;
/// Most headers accepted.
pub const MAX_HEADERS: usize = 32;
/// Largest body accepted (and discarded), in bytes.
pub const MAX_BODY: u64 = 64 * 1024;

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path, query string removed.
    pub path: String,
}

/// A response to write.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`, if there is a body.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// An `Allow` header (405 answers).
    pub allow: Option<&'static str>,
}

impl Response {
    /// A response with a body.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            content_type,
            body: body.into(),
            allow: None,
        }
    }

    /// A JSON error answer: `{"error": msg}`.
    pub fn error(status: u16, msg: &str) -> Self {
        let body = serde_json::json!({ "error": msg }).to_string() + "\n";
        Self::new(status, "application/json", body)
    }

    /// 204, no body.
    pub fn no_content() -> Self {
        Self::new(204, "", Vec::new())
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Reads one line ending in CRLF (or LF) of at most `max` bytes; `None` at
/// a clean end of stream before any byte.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<String>, Response> {
    let mut buf = Vec::new();
    let n = r
        .take(max as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|_| Response::error(400, "read error"))?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if buf.len() > max {
            Response::error(431, "line too long")
        } else {
            Response::error(400, "truncated request")
        });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| Response::error(400, "request is not UTF-8"))
}

/// Reads a request head (and discards a body); `Ok(None)` if the client
/// closed the connection without sending anything.
pub async fn read_request<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Option<Request>, Response> {
    let Some(line) = read_line(r, MAX_REQUEST_LINE).await? else {
        return Ok(None);
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::error(400, "bad request line"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(Response::error(400, "bad request line"));
    }
    let mut body_len = 0u64;
    let mut headers = 0;
    loop {
        let Some(h) = read_line(r, MAX_HEADER_LINE).await? else {
            return Err(Response::error(400, "truncated request"));
        };
        if h.is_empty() {
            break;
        }
        headers += 1;
        if headers > MAX_HEADERS {
            return Err(Response::error(431, "too many headers"));
        }
        let Some((name, value)) = h.split_once(':') else {
            return Err(Response::error(400, "bad header"));
        };
        if name.eq_ignore_ascii_case("content-length") {
            body_len = value
                .trim()
                .parse()
                .map_err(|_| Response::error(400, "bad Content-Length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Response::error(400, "chunked bodies are not accepted"));
        }
    }
    if body_len > MAX_BODY {
        return Err(Response::error(413, "body too large"));
    }
    let mut sink = Vec::new();
    r.take(body_len)
        .read_to_end(&mut sink)
        .await
        .map_err(|_| Response::error(400, "read error"))?;
    let path = target.split('?').next().unwrap_or(target).to_string();
    Ok(Some(Request {
        method: method.to_string(),
        path,
    }))
}

/// Writes `resp` and closes the exchange (`Connection: close`).
pub async fn write_response<W: AsyncWrite + Unpin>(
    w: &mut W,
    resp: &Response,
) -> std::io::Result<()> {
    w.write_all(&encode(resp)).await?;
    w.flush().await
}

/// The bytes of `resp` on the wire: status line, headers, body.
pub fn encode(resp: &Response) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        resp.status,
        reason(resp.status),
        resp.body.len()
    );
    if !resp.content_type.is_empty() {
        head.push_str(&format!("Content-Type: {}\r\n", resp.content_type));
    }
    if let Some(allow) = resp.allow {
        head.push_str(&format!("Allow: {allow}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&resp.body);
    out
}

#[cfg(test)]
mod tests;
