use super::*;
use tokio::io::AsyncBufReadExt;

/// A fake QEMU QMP server at `path` for one connection: greets (unless
/// `greeting` is None), then answers each command line with
/// `answer(command, arguments)` (None: say nothing), and returns the
/// commands it got.
pub(crate) fn serve(
    path: &Path,
    greeting: Option<&'static str>,
    answer: impl Fn(&str, &Value) -> Option<String> + Send + 'static,
) -> tokio::task::JoinHandle<Vec<Value>> {
    serve_after(path, None, greeting, answer)
}

/// [`serve`], bound only once the file `after` exists (a fake QEMU
/// started by the runner, which first removes a stale socket).
pub(crate) fn serve_after(
    path: &Path,
    after: Option<PathBuf>,
    greeting: Option<&'static str>,
    answer: impl Fn(&str, &Value) -> Option<String> + Send + 'static,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let bind = |p: &Path| tokio::net::UnixListener::bind(p).unwrap();
    let now = after.is_none().then(|| bind(path));
    let path = path.to_path_buf();
    tokio::spawn(async move {
        let l = match now {
            Some(l) => l,
            None => {
                while !after.as_ref().is_some_and(|a| a.exists()) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                bind(&path)
            }
        };
        let (s, _) = l.accept().await.unwrap();
        let (r, mut w) = s.into_split();
        let mut got = Vec::new();
        if let Some(g) = greeting {
            w.write_all(format!("{g}\r\n").as_bytes()).await.unwrap();
        }
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let v: Value = serde_json::from_str(&line).unwrap();
            let cmd = v["execute"].as_str().unwrap_or("").to_string();
            let reply = answer(&cmd, &v["arguments"]);
            got.push(v);
            if let Some(r) = reply {
                w.write_all(format!("{r}\r\n").as_bytes()).await.unwrap();
            }
        }
        got
    })
}

pub(crate) const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 1, "major": 11}, "package": "Debian 1:11.1+dfsg-1"}, "capabilities": ["oob"]}}"#;

#[tokio::test]
async fn negotiates_then_sets_trace_events_skipping_async_events() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.sock");
    let server = serve(&p, Some(GREETING), |cmd, _| {
        Some(match cmd {
            // An asynchronous event may come before an answer.
            "trace-event-set-state" => {
                r#"{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}
{"return": {}}"#
                    .to_string()
            }
            _ => r#"{"return": {}}"#.to_string(),
        })
    });
    let mut q = Qmp::connect(&p).await.unwrap();
    q.set_trace(&["virtio_iommu_map", "vfio_iommu_map_notify"], true)
        .await
        .unwrap();
    q.set_trace(&["virtio_iommu_map"], false).await.unwrap();
    drop(q);
    let got = server.await.unwrap();
    assert_eq!(got[0], json!({"execute": "qmp_capabilities"}));
    assert_eq!(
        got[1],
        json!({"execute": "trace-event-set-state", "arguments": {"name": "virtio_iommu_map", "enable": true}})
    );
    assert_eq!(got[2]["arguments"]["name"], "vfio_iommu_map_notify");
    assert_eq!(got[3]["arguments"]["enable"], false);
    assert_eq!(got.len(), 4);
}

#[tokio::test]
async fn refusals_and_silence_are_named() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.sock");
    let _server = serve(&p, Some(GREETING), |cmd, args| match cmd {
        "qmp_capabilities" => Some(r#"{"return": {}}"#.into()),
        "trace-event-set-state" if args["name"] == "no_such_event" => Some(
            r#"{"error": {"class": "GenericError", "desc": "No such event 'no_such_event'"}}"#
                .into(),
        ),
        _ => None,
    });
    let mut q = Qmp::connect(&p).await.unwrap();
    let e = q.set_trace(&["no_such_event"], true).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "QMP trace-event-set-state: QEMU answered GenericError: No such event 'no_such_event'"
    );
    // The fake says nothing to this one: a timeout naming the command.
    let e = q.execute("query-status", Value::Null).await.unwrap_err();
    assert!(
        matches!(&e, QmpError::Timeout { what, .. } if what == "query-status"),
        "{e}"
    );
}

#[tokio::test]
async fn a_socket_that_is_not_qmp() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.sock");
    let e = Qmp::connect(&p).await.unwrap_err();
    assert!(
        e.to_string().contains("-qmp unix:") && matches!(e, QmpError::Io { .. }),
        "{e}"
    );
    let _server = serve(&p, Some(r#"{"hello": 1}"#), |_, _| None);
    let e = Qmp::connect(&p).await.unwrap_err();
    assert!(
        matches!(&e, QmpError::Protocol { what, line, .. } if what == "QEMU's greeting" && line.contains("hello")),
        "{e}"
    );
    let p2 = d.path().join("q2.sock");
    let _server = serve(&p2, Some("not json"), |_, _| None);
    assert!(matches!(
        Qmp::connect(&p2).await.unwrap_err(),
        QmpError::Protocol { .. }
    ));
}
