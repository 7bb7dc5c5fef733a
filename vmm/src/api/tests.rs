use std::collections::BTreeMap;

use serde_json::json;
use viommu_device::Counters;

use super::*;

fn state(counters: Counters) -> (ApiState, Arc<VmExit>) {
    let exit = Arc::new(VmExit::new().unwrap());
    (
        ApiState {
            info: json!({"cpus": 2}),
            metrics: Box::new(move || viommu_counters::prometheus_text("viommu", &counters)),
            vcpus: Box::new(|| {
                Box::pin(async { json!([{"vcpu": 0, "rip": "0xffffffff81000000"}]) })
            }),
            exit: exit.clone(),
        },
        exit,
    )
}

/// A strict reader of the Prometheus text exposition format (0.0.4): every
/// sample belongs to a metric announced by HELP and TYPE lines before it,
/// names and label sets are well-formed, values are numbers, counters end
/// in `_total`, no sample repeats. Returns sample (name with labels) ->
/// value.
fn parse_prometheus(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut help = BTreeMap::new();
    let mut types = BTreeMap::new();
    let mut samples = BTreeMap::new();
    if !text.ends_with('\n') {
        return Err("no final line feed".into());
    }
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest.split_once(' ').ok_or("HELP without text")?;
            if !name_ok(name) || h.trim().is_empty() || help.insert(name, h).is_some() {
                return Err(format!("bad or repeated HELP: {line}"));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').ok_or("TYPE without type")?;
            if !help.contains_key(name) || types.insert(name, t).is_some() {
                return Err(format!("TYPE before HELP or repeated: {line}"));
            }
            if t == "counter" && !name.ends_with("_total") {
                return Err(format!("counter not ending in _total: {name}"));
            }
        } else if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line: {line:?}"));
        } else {
            let (series, value) = line.rsplit_once(' ').ok_or("sample without value")?;
            let name = series.split('{').next().unwrap_or_default();
            if !name_ok(name) || !matches!(types.get(name), Some(&"counter" | &"gauge")) {
                return Err(format!("sample of an unannounced metric: {line}"));
            }
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    let inner = labels
                        .strip_prefix('{')
                        .and_then(|l| l.strip_suffix('}'))
                        .ok_or(format!("bad labels: {line}"))?;
                    for pair in inner.split(',') {
                        let (k, v) = pair.split_once('=').ok_or(format!("bad label: {line}"))?;
                        if !(name_ok(k) && v.len() >= 2 && v.starts_with('"') && v.ends_with('"')) {
                            return Err(format!("bad label: {line}"));
                        }
                    }
                }
            }
            let v: f64 = value.parse().map_err(|_| format!("bad value: {line}"))?;
            if samples.insert(series.to_string(), v).is_some() {
                return Err(format!("repeated sample: {line}"));
            }
        }
    }
    Ok(samples)
}

#[test]
fn routes() {
    let (s, exit) = state(Counters::default());
    let info = block_on(route("GET", "/api/v1/vm.info", &s));
    assert_eq!(info.status, 200);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&info.body).unwrap(),
        json!({"cpus": 2})
    );
    let vcpus = block_on(route("GET", "/api/v1/vm.vcpus", &s));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&vcpus.body).unwrap()[0]["rip"],
        "0xffffffff81000000"
    );
    assert_eq!(block_on(route("PUT", "/api/v1/vm.vcpus", &s)).status, 405);
    assert_eq!(block_on(route("GET", "/nope", &s)).status, 404);
    let wrong = block_on(route("GET", "/api/v1/vm.shutdown", &s));
    assert_eq!((wrong.status, wrong.allow), (405, Some("PUT")));
    assert_eq!(block_on(route("PUT", "/metrics", &s)).status, 405);
    assert_eq!(exit.reason(), None);
    assert_eq!(block_on(route("PUT", "/api/v1/vm.reboot", &s)).status, 204);
    assert_eq!(exit.reason(), Some(ExitReason::ApiReboot));
    assert_eq!(exit.clear(), Some(ExitReason::ApiReboot));
    assert_eq!(
        block_on(route("PUT", "/api/v1/vm.shutdown", &s)).status,
        204
    );
    assert_eq!(exit.reason(), Some(ExitReason::ApiShutdown));
}

#[test]
fn serves_http_on_a_socket_and_metrics_parse_as_prometheus_text() {
    let dir = std::env::temp_dir().join(format!("vmm-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("api.sock");
    std::fs::write(&path, b"").unwrap();
    let (s, exit) = state(Counters::default());
    assert!(matches!(
        spawn(&path, s, None, None),
        Err(ApiError::NotASocket(_))
    ));
    std::fs::remove_file(&path).unwrap();
    let mut c = Counters::default();
    c.requests.map = 3;
    c.requests.unmap = 2;
    c.requests.flush = 1;
    c.batch_sizes[2] = 1;
    c.backend.map_calls = 4;
    c.backend.unmap_calls = 5;
    c.deferred_unmaps = 6;
    c.flush_backend_calls = 2;
    c.merged_ranges = 6;
    let (s, exit2) = state(c);
    // With the API thread's real seccomp filter: a system call it lacks
    // ends the test process with the SIGSYS report.
    let _socket = spawn(&path, s, api_filter(), None).unwrap();

    let (status, text) = request(&path, "GET", "/metrics").unwrap();
    assert_eq!(status, 200);
    let m = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    // What viommu-bench reads (tools/viommu-bench/src/metrics.rs), in the lab too.
    for (k, v) in [
        ("viommu_requests_total{type=\"map\"}", 3.0),
        ("viommu_requests_total{type=\"unmap\"}", 2.0),
        ("viommu_requests_total{type=\"flush\"}", 1.0),
        ("viommu_backend_map_calls_total", 4.0),
        ("viommu_backend_unmap_calls_total", 5.0),
        ("viommu_deferred_unmaps_total", 6.0),
        ("viommu_flush_backend_calls_total", 2.0),
        ("viommu_merged_ranges_total", 6.0),
        ("viommu_batch_sizes_total{size_log2=\"2\"}", 1.0),
    ] {
        assert_eq!(m.get(k), Some(&v), "{k}");
    }
    // Every counter field is there: 7 request types, 9 buckets, 9 host
    // call counters (7 counts, 2 times), 12 more.
    assert_eq!(m.len(), 7 + 9 + 9 + 12, "{text}");

    let (status, info) = request(&path, "GET", "/api/v1/vm.info").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&info).unwrap()["cpus"],
        2
    );
    let (status, err) = request(&path, "POST", "/metrics").unwrap();
    assert_eq!(status, 405);
    assert!(err.contains("error"));
    assert_eq!(request(&path, "PUT", "/api/v1/vm.shutdown").unwrap().0, 204);
    assert_eq!(exit2.reason(), Some(ExitReason::ApiShutdown));
    assert_eq!(exit.reason(), None);
}

#[test]
fn socket_is_private_a_live_one_is_kept_and_connections_are_bounded() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("vmm-api-hard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("api.sock");
    let _ = std::fs::remove_file(&path);
    // A stale socket (nobody listening) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let (s, _exit) = state(Counters::default());
    // With the API thread's real seccomp filter: a system call it lacks
    // ends the test process with the SIGSYS report.
    let _socket = spawn(&path, s, api_filter(), None).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second VMM on the same path must not take the live socket away.
    let (s2, _) = state(Counters::default());
    assert!(matches!(
        spawn(&path, s2, None, None),
        Err(ApiError::InUse(_))
    ));
    assert_eq!(request(&path, "GET", "/api/v1/vm.info").unwrap().0, 200);
    // MAX_CONNECTIONS idle connections hold every slot: the next one is
    // answered 503 at once instead of queueing.
    let idle: Vec<_> = (0..MAX_CONNECTIONS)
        .map(|_| std::os::unix::net::UnixStream::connect(&path).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (status, _) = request(&path, "GET", "/metrics").unwrap();
    assert_eq!(status, 503);
    // Refused on the spot, without a task waiting for a request: clients
    // that send nothing get their 503 at once, however many.
    for _ in 0..100 {
        let mut silent = std::os::unix::net::UnixStream::connect(&path).unwrap();
        silent
            .set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        let mut answer = String::new();
        silent.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    }
    // An idle connection gets 408 after the request timeout, freeing its slot.
    let mut first = idle.into_iter().next().unwrap();
    first
        .set_read_timeout(Some(REQUEST_TIMEOUT + std::time::Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn api_filter() -> Option<crate::seccomp::Filter> {
    crate::seccomp::Policy::default()
        .filter(crate::seccomp::ThreadKind::Api)
        .unwrap()
}

#[test]
fn liveness_gauges_are_well_formed_next_to_the_counters() {
    use crate::devices::serial::SerialDevice;
    use std::sync::Mutex;

    let serial = SerialDevice::new(
        Arc::new(crate::devices::serial::RecordedLine::default()),
        Box::new(std::io::sink()),
    );
    let mut own = 0;
    // SAFETY: the current thread's handle; `own` is a valid place.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut own) };
    assert_eq!(rc, 0);
    let live = super::liveness::Liveness {
        serial: Arc::new(Mutex::new(serial)),
        viommu: None,
        vcpu_clocks: vec![Some(own), None],
        vcpu_probes: vec![Default::default()],
        endpoint_dma: Vec::new(),
        reboots: Default::default(),
    };
    let text = viommu_counters::prometheus_text("viommu", &Counters::default()) + &live.render();
    let m = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(m["vmm_serial_ier"], 0.0);
    assert_eq!(m["vmm_serial_iir"], 1.0, "nothing pending");
    assert!(
        m.contains_key("vmm_vcpu_cpu_ms_total{vcpu=\"0\"}"),
        "{text}"
    );
    assert!(
        !m.contains_key("vmm_vcpu_cpu_ms_total{vcpu=\"1\"}"),
        "no clock, no sample"
    );
    assert!(
        !text.contains("viommu_thread_"),
        "no virtio-iommu, no device thread gauges"
    );
    // A vCPU thread that never ran answers with its CPU time only.
    let v = block_on(live.vcpus_json());
    assert_eq!(v[0]["vcpu"], 0);
    assert!(v[0]["rip"].is_null(), "{v}");
}

/// A host mapper that accepts everything (the metrics test's endpoints).
struct NullHostMapper;

impl dma_mapper::DmaMapper for NullHostMapper {
    fn map(
        &self,
        _: u64,
        _: u64,
        _: u64,
        _: dma_mapper::DmaPerm,
    ) -> Result<(), dma_mapper::DmaError> {
        Ok(())
    }
    fn unmap(&self, _: u64, _: u64) -> Result<(), dma_mapper::DmaError> {
        Ok(())
    }
    fn page_size_mask(&self) -> u64 {
        dma_mapper::PAGE_SIZE_4K_MASK
    }
    fn disown(&self, _: u64, _: u64) {}
}

impl dma_mapper::HostIommuMapper for NullHostMapper {
    fn iova_ranges(&self) -> std::io::Result<Vec<(u64, u64)>> {
        Ok(vec![(0, u64::MAX - 1)])
    }
    fn dma_avail(&self) -> std::io::Result<u32> {
        Ok(u32::MAX)
    }
}

#[test]
fn metrics_show_each_endpoint_and_the_reboots() {
    use crate::devices::serial::SerialDevice;
    use dma_mapper::DmaMapper;
    use std::sync::atomic::Ordering;
    use std::sync::Mutex;

    let serial = SerialDevice::new(
        Arc::new(crate::devices::serial::RecordedLine::default()),
        Box::new(std::io::sink()),
    );
    let endpoint = || {
        let m: Arc<dyn dma_mapper::HostIommuMapper> = Arc::new(NullHostMapper);
        Arc::new(dma_mapper::RecordingMapper::new(m))
    };
    let (a, b) = (endpoint(), endpoint());
    a.map(0x1000, 0x1000, 0x2000, dma_mapper::DmaPerm::RW)
        .unwrap();
    b.map(0x1000, 0x1000, 0x1000, dma_mapper::DmaPerm::RW)
        .unwrap();
    b.unmap(0x1000, 0x1000).unwrap();
    let live = super::liveness::Liveness {
        serial: Arc::new(Mutex::new(serial)),
        viommu: None,
        vcpu_clocks: Vec::new(),
        vcpu_probes: Vec::new(),
        endpoint_dma: vec![(crate::pci::Bdf::slot(3), a), (crate::pci::Bdf::slot(4), b)],
        reboots: Default::default(),
    };
    live.reboots.fetch_add(2, Ordering::Relaxed);
    let text = live.render();
    let m = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let a = "{endpoint=\"0000:00:03.0\"}";
    let b = "{endpoint=\"0000:00:04.0\"}";
    assert_eq!(
        m[&format!("viommu_endpoint_map_calls_total{a}")],
        1.0,
        "{text}"
    );
    assert_eq!(m[&format!("viommu_endpoint_bytes_mapped_total{a}")], 8192.0);
    assert_eq!(m[&format!("viommu_endpoint_unmap_calls_total{a}")], 0.0);
    assert_eq!(m[&format!("viommu_endpoint_map_calls_total{b}")], 1.0);
    assert_eq!(m[&format!("viommu_endpoint_unmap_calls_total{b}")], 1.0);
    assert_eq!(m["vmm_reboots_total"], 2.0);
}

/// Runs `f` on a current-thread runtime, as the API thread does.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

extern "C" fn ignore_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// `vm.vcpus` waits for vCPUs that do not answer without blocking the
/// API's runtime: a `/metrics` request made meanwhile is answered at once,
/// and all vCPUs are waited for together (one timeout, not one each).
#[test]
fn a_vcpus_probe_waiting_for_silent_vcpus_does_not_block_other_requests() {
    use crate::vcpu_probe::VcpuProbe;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    vmm_sys_util::signal::register_signal_handler(vmm_sys_util::signal::SIGRTMIN(), ignore_kick)
        .unwrap();
    const N: usize = 8;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let probes: Vec<Arc<VcpuProbe>> = (0..N).map(|_| Arc::default()).collect();
    let silent: Vec<_> = probes
        .iter()
        .map(|p| {
            let (p, stop, tx) = (p.clone(), stop.clone(), tx.clone());
            std::thread::spawn(move || {
                p.register_thread();
                tx.send(()).unwrap();
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    for _ in 0..N {
        rx.recv().unwrap();
    }
    let serial = crate::devices::serial::SerialDevice::new(
        Arc::new(crate::devices::serial::RecordedLine::default()),
        Box::new(std::io::sink()),
    );
    let live = Arc::new(super::liveness::Liveness {
        serial: Arc::new(std::sync::Mutex::new(serial)),
        viommu: None,
        vcpu_clocks: vec![None; N],
        vcpu_probes: probes,
        endpoint_dma: Vec::new(),
        reboots: Default::default(),
    });
    let (mut s, _exit) = state(Counters::default());
    s.vcpus = Box::new(move || {
        let live = live.clone();
        Box::pin(async move { live.vcpus_json().await })
    });
    let dir = std::env::temp_dir().join(format!("vmm-api-vcpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("api.sock");
    let _ = std::fs::remove_file(&path);
    let _socket = spawn(&path, s, api_filter(), None).unwrap();
    let p = path.clone();
    let start = Instant::now();
    let vcpus = std::thread::spawn(move || request(&p, "GET", "/api/v1/vm.vcpus").unwrap());
    std::thread::sleep(Duration::from_millis(30));
    let asked = Instant::now();
    assert_eq!(request(&path, "GET", "/metrics").unwrap().0, 200);
    let metrics_took = asked.elapsed();
    let (status, body) = vcpus.join().unwrap();
    let vcpus_took = start.elapsed();
    stop.store(true, Ordering::Release);
    silent.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), N);
    assert!(v[0]["rip"].is_null(), "{v}");
    // One probe timeout each would be N x 200 ms, on the runtime thread.
    assert!(
        metrics_took < Duration::from_millis(800),
        "{metrics_took:?}"
    );
    assert!(vcpus_took < Duration::from_millis(1200), "{vcpus_took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The client gives up on a server that never answers, and on an answer
/// larger than its limit.
#[test]
fn the_client_has_a_timeout_and_an_answer_size_limit() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("vmm-api-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("api.sock");
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        // First: read the request, never answer (until the client left).
        let (mut c, _) = listener.accept().unwrap();
        let mut b = [0u8; 1024];
        let _ = c.read(&mut b);
        let (mut big, _) = listener.accept().unwrap();
        let _ = big.read(&mut b);
        let _ = big.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
        let _ = big.write_all(&vec![b'x'; 1 << 20]);
        let _ = c.read(&mut b);
    });
    let start = Instant::now();
    let e = request_within(
        &path,
        "GET",
        "/metrics",
        Duration::from_millis(300),
        1 << 30,
    )
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(start.elapsed() < Duration::from_secs(5));
    let e =
        request_within(&path, "GET", "/metrics", Duration::from_secs(30), 64 << 10).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
