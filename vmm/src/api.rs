//! The control plane: HTTP/1.1 over a Unix socket, in the shape of
//! cloud-hypervisor's API (`ch-remote` there, `vmmctl` here).
//!
//! - `GET /metrics`: every counter of the virtio-iommu in the Prometheus
//!   text exposition format (HELP and TYPE lines, counters ending in
//!   `_total`), for a scraper or `vmmctl SOCKET metrics`, and the liveness
//!   gauges of the device thread and the console UART ([`liveness`]);
//! - `GET /api/v1/vm.info`: what the VM is (vCPUs, memory, kernel,
//!   devices), as JSON;
//! - `GET /api/v1/vm.vcpus`: where each vCPU is now (instruction and stack
//!   pointer, flags, privilege level, page table root) and its CPU time,
//!   for a guest that stopped answering ([`liveness`]);
//! - `PUT /api/v1/vm.shutdown`: stop the VM (the VMM exits with code 0);
//!   answered 204;
//! - `PUT /api/v1/vm.reboot`: reboot the guest, as its own reset would
//!   (`--on-reboot` decides what that does); answered 204.
//!
//! Errors are JSON `{"error": ...}` with a 4xx status. One request per
//! connection. The server runs on a current-thread tokio runtime of its
//! own thread; the HTTP parsing, with its size limits, is in [`http`].
//!
//! Who may talk to it: the socket is created mode 0600 (and owned by
//! `--user`) in a private directory and only then moved to its path
//! ([`bind`]), and a connection
//! whose peer is neither root nor the VMM's own user is refused (403). At
//! most [`MAX_CONNECTIONS`] are served at once (more get 503 at once), and a
//! request must arrive within [`REQUEST_TIMEOUT`]. A live socket at the path
//! (another VMM serving) is an error, a stale one is replaced.

pub mod http;
pub mod info;
pub mod liveness;

use std::path::{Path, PathBuf};

pub mod bind;
use std::sync::Arc;

use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use viommu_counters::PROMETHEUS_CONTENT_TYPE;

use crate::devices::exit::{ExitReason, VmExit};
use http::{read_request, write_response, Response};

/// Connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a connection may take to send its request.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Produces the current metrics as Prometheus text.
pub type MetricsFn = Box<dyn Fn() -> String + Send + Sync>;

/// Produces a JSON answer, asynchronously (it may wait: never block the
/// API's one runtime thread).
pub type JsonFn = Box<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = serde_json::Value> + Send>>
        + Send
        + Sync,
>;

/// What the API answers from.
pub struct ApiState {
    /// Static description of the VM, as JSON.
    pub info: serde_json::Value,
    /// Live counters.
    pub metrics: MetricsFn,
    /// Where each vCPU is now (registers, CPU time).
    pub vcpus: JsonFn,
    /// Where `shutdown` goes.
    pub exit: Arc<VmExit>,
}

/// Why the API socket could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Something that is not a socket is in the way.
    #[error("--api-socket {}: exists and is not a socket; remove it or pick another path", .0.display())]
    NotASocket(PathBuf),
    /// Another process answers on the socket.
    #[error("--api-socket {}: another process is serving on it (another VMM?); stop it or pick another path", .0.display())]
    InUse(PathBuf),
    /// Binding or starting failed.
    #[error("--api-socket {}: cannot listen", path.display())]
    Listen {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The routes: `(path, method)` -> answer.
pub async fn route(method: &str, path: &str, state: &ApiState) -> Response {
    let allowed = match path {
        "/metrics" | "/api/v1/vm.info" | "/api/v1/vm.vcpus" => "GET",
        "/api/v1/vm.shutdown" | "/api/v1/vm.reboot" => "PUT",
        _ => return Response::error(
            404,
            "no such route; try /metrics, /api/v1/vm.info, /api/v1/vm.vcpus, /api/v1/vm.shutdown or /api/v1/vm.reboot",
        ),
    };
    if method != allowed {
        let mut r = Response::error(405, "method not allowed");
        r.allow = Some(allowed);
        return r;
    }
    match path {
        "/metrics" => Response::new(200, PROMETHEUS_CONTENT_TYPE, (state.metrics)()),
        "/api/v1/vm.info" => Response::new(200, "application/json", state.info.to_string() + "\n"),
        "/api/v1/vm.vcpus" => Response::new(
            200,
            "application/json",
            (state.vcpus)().await.to_string() + "\n",
        ),
        "/api/v1/vm.reboot" => {
            state.exit.request(ExitReason::ApiReboot);
            Response::no_content()
        }
        _ => {
            state.exit.request(ExitReason::ApiShutdown);
            Response::no_content()
        }
    }
}

/// Whether a peer with this uid may use the API: root, or our own user.
fn peer_allowed(peer_uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    peer_uid == 0 || peer_uid == me
}

async fn serve_conn(stream: UnixStream, state: Arc<ApiState>) -> std::io::Result<()> {
    let allowed = stream.peer_cred().is_ok_and(|c| peer_allowed(c.uid()));
    let (r, mut w) = stream.into_split();
    if !allowed {
        let resp = Response::error(403, "only root and the VMM's user may use this socket");
        return write_response(&mut w, &resp).await;
    }
    let mut r = BufReader::new(r);
    let resp = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut r)).await {
        Err(_) => Response::error(408, "no complete request in time"),
        Ok(Ok(None)) => return Ok(()),
        Ok(Ok(Some(req))) => route(&req.method, &req.path, &state).await,
        Ok(Err(resp)) => resp,
    };
    write_response(&mut w, &resp).await
}

/// Answers a connection over [`MAX_CONNECTIONS`] 503 and closes it, on
/// the spot: no task, no wait, so a flood of connections costs the API
/// nothing beyond the accept. What the client sent already (its request
/// is usually in the socket before the accept) is read first, so that
/// the close does not cut into its write; a client that sends later gets
/// the 503 and a closed socket.
fn refuse_busy(stream: UnixStream) {
    use std::io::{Read, Write};
    // Out of the runtime: plain nonblocking calls, made now (tokio's
    // `try_*` would wait for the first readiness event).
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    let mut sink = [0u8; 1024];
    for _ in 0..8 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let resp = Response::error(503, "too many connections; try again");
    // An empty socket buffer takes these few hundred bytes at once.
    let _ = stream.write_all(&http::encode(&resp));
}

/// Accept connections on `listener` forever.
pub async fn serve(listener: UnixListener, state: Arc<ApiState>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    refuse_busy(stream);
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve_conn(stream, state).await {
                        tracing::debug!("API connection: {e}");
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("API accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

fn prepare_path(path: &Path) -> Result<(), ApiError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            // Somebody answering is a live socket: never take it away.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ApiError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|source| ApiError::Listen {
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(_) => Err(ApiError::NotASocket(path.to_path_buf())),
        Err(_) => Ok(()),
    }
}

/// Listen on `path` and serve from a thread of its own, which installs
/// `seccomp` first if given. The socket is mode 0600 and owned by `owner`
/// (`--user`) if given, from the moment it appears at `path` ([`bind`]);
/// dropping the returned entry removes it.
pub fn spawn(
    path: &Path,
    state: ApiState,
    seccomp: Option<crate::seccomp::Filter>,
    owner: Option<crate::privileges::Ids>,
) -> Result<bind::SocketEntry, ApiError> {
    prepare_path(path)?;
    let listen_err = |source| ApiError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(listen_err)?;
    let (listener, entry) = {
        let (std_listener, entry) = bind::bind_private(path, owner).map_err(listen_err)?;
        std_listener.set_nonblocking(true).map_err(listen_err)?;
        let _guard = rt.enter();
        (
            UnixListener::from_std(std_listener).map_err(listen_err)?,
            entry,
        )
    };
    let state = Arc::new(state);
    crate::seccomp::spawn("api", seccomp, move || rt.block_on(serve(listener, state)))
        .map_err(listen_err)?;
    Ok(entry)
}

/// The client side, for tests: [`request_within`] with
/// [`CLIENT_TIMEOUT`] and [`CLIENT_MAX_ANSWER`].
pub fn request(socket: &Path, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    request_within(socket, method, path, CLIENT_TIMEOUT, CLIENT_MAX_ANSWER)
}

/// How long a client waits for the whole exchange by default.
pub const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest answer a client takes by default (the metrics are tens of
/// KiB).
pub const CLIENT_MAX_ANSWER: u64 = 16 << 20;

/// The client side, for `vmmctl`: one request on `socket`, returns the
/// status code and the body; an answer slower than `timeout` (in all) or
/// larger than `max_answer` bytes is an error.
pub fn request_within(
    socket: &Path,
    method: &str,
    path: &str,
    timeout: std::time::Duration,
    max_answer: u64,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"))
    };
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_write_timeout(Some(left()?))?;
    // A server over its connection limit answers 503 and closes at once,
    // maybe before the request is written: the answer is still there to
    // read, so a closed pipe here is not the end.
    if let Err(e) = write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ) {
        if !matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        ) {
            return Err(e);
        }
    }
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        s.set_read_timeout(Some(left()?))?;
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer in time",
                ))
            }
            Err(e) => return Err(e),
        };
        if (raw.len() + n) as u64 > max_answer {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("answer larger than {max_answer} bytes"),
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let raw = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response");
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_string()))
}

#[cfg(test)]
mod tests;
