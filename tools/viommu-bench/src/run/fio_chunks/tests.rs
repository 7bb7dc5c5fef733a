use super::*;
use crate::run::fio_json::tests::{fixture, FIXTURES};
use crate::run::guest::{parse_line, Marker};
use crate::setup::image::INIT_SCRIPT;

/// What the guest's fio_emit prints for `json`, done here the same way.
fn guest_lines(phase: &str, json: &str, width: usize) -> Vec<String> {
    let s: String = json.lines().map(str::trim_start).collect();
    let chunks: Vec<&str> = s
        .as_bytes()
        .chunks(width)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let mut out: Vec<String> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| format!("@@LAB-FIO@@ {phase} {}/{} {c}", i + 1, chunks.len()))
        .collect();
    out.push(record_line(phase, s.len()));
    out
}

fn record_line(phase: &str, bytes: usize) -> String {
    format!(
        r#"@@LAB-GUEST@@ {{"event":"fio","phase":"{phase}","numjobs":2,"json_bytes":{bytes},"counters":{{"iommu-dma-pool/hits":7}}}}"#
    )
}

/// Feed `lines` through the console parser and the assembler: the
/// records and the errors, in order.
fn feed(a: &mut Assembler, lines: &[String]) -> Vec<Result<FioRecord, String>> {
    let mut out = Vec::new();
    for l in lines {
        match parse_line(l) {
            Ok(Some(Marker::FioChunk(c))) => a.chunk(c),
            Ok(Some(Marker::Fio(r))) => out.push(a.complete(r).map_err(|e| e.to_string())),
            Ok(other) => panic!("{other:?}"),
            Err(e) => out.push(Err(e.to_string())),
        }
    }
    out
}

#[test]
fn every_fixture_crosses_the_console() {
    let mut a = Assembler::default();
    for (name, text) in FIXTURES {
        let got = feed(&mut a, &guest_lines("randrw-4k-j2", text, 1000));
        let rec = got[0].as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
        let direct = crate::run::fio_json::parse(text).unwrap().apply(FioRecord {
            phase: "randrw-4k-j2".into(),
            numjobs: 2,
            counters: [("iommu-dma-pool/hits".to_string(), 7)].into(),
            json_bytes: rec.json_bytes,
            ..Default::default()
        });
        assert_eq!(rec, &direct, "{name}");
        assert!(rec.read_lat.is_some() && rec.read_iops > 0, "{name}");
    }
}

#[test]
fn chunks_keep_their_blanks() {
    // A chunk that starts or ends with a blank: the blank is data.
    let json = r#"{"fio version" : "fio-3.33", "jobs" : [{"error" : 0}]}"#;
    let mut a = Assembler::default();
    let got = feed(&mut a, &guest_lines("p", json, 5));
    assert_eq!(
        got[0].as_ref().unwrap().fio_version.as_deref(),
        Some("fio-3.33")
    );
}

#[test]
fn a_record_without_json_passes_as_it_is() {
    let line = r#"@@LAB-GUEST@@ {"event":"fio","phase":"idle","numjobs":1,"error":0,"read_iops":5,"counters":{}}"#;
    let got = feed(&mut Assembler::default(), &[line.to_string()]);
    assert_eq!(got[0].as_ref().unwrap().read_iops, 5);
}

#[test]
fn broken_transport_is_a_clear_error_and_the_next_run_is_whole() {
    let text = fixture("fio-3.39-randread-j1");
    let good = guest_lines("next", text, 1000);
    let mut lines = guest_lines("p", text, 1000);
    let n = lines.len();
    let chunks = n - 1;
    let bytes: usize = text.lines().map(|l| l.trim_start().len()).sum();
    let cases: Vec<(Vec<String>, String)> = vec![
        // A chunk lost.
        (
            [&lines[..2], &lines[3..]].concat(),
            format!("chunk 4 of {chunks} of its JSON output came where chunk 3 was due"),
        ),
        // The last chunk lost.
        (
            [&lines[..n - 2], &lines[n - 1..]].concat(),
            format!(
                "its record came after {} of the {chunks} chunks",
                chunks - 1
            ),
        ),
        // No chunk at all.
        (vec![lines[n - 1].clone()], "after 0 of the 0 chunks".into()),
        // Garbled bytes inside a chunk.
        (
            {
                let mut l = lines.clone();
                l[1] = l[1].replace(':', ";");
                l
            },
            "does not parse".into(),
        ),
        // A chunk cut short by the console.
        (
            {
                let mut l = lines.clone();
                let keep = l[2].len() - 10;
                l[2].truncate(keep);
                l
            },
            format!("came as {} bytes, the guest sent {bytes}", bytes - 10),
        ),
        // fio printed nothing.
        (vec![record_line("p", 0)], "holds no JSON object".into()),
    ];
    for (case, want) in cases {
        let mut a = Assembler::default();
        let got = feed(&mut a, &case);
        let e = got.last().unwrap().as_ref().unwrap_err();
        assert!(e.contains(&want), "{e} (wanted {want})");
        assert!(e.starts_with("fio p: "), "{e}");
        // The assembler is ready for the next run.
        assert!(feed(&mut a, &good)[0].is_ok());
    }
    // A malformed chunk line is the console parser's error.
    lines[0] = "@@LAB-FIO@@ p 0/7 {".into();
    assert!(parse_line(&lines[0])
        .unwrap_err()
        .to_string()
        .contains("1 <= SEQ <= TOTAL"));
    for bad in [
        "@@LAB-FIO@@ p",
        "@@LAB-FIO@@ p x/y {",
        "@@LAB-FIO@@ p 2/99999 {",
        "@@LAB-FIO@@ p 3/2 {",
    ] {
        assert!(parse_line(bad).is_err(), "{bad}");
    }
    let long = format!("@@LAB-FIO@@ p 1/1 {}", "x".repeat(MAX_CHUNK + 1));
    assert!(parse_line(&long)
        .unwrap_err()
        .to_string()
        .contains("more than"));
}

const MAX_CHUNK: usize = crate::run::guest::MAX_CHUNK_BYTES;

#[test]
fn more_than_the_cap_is_refused_and_memory_stays_bounded() {
    let total = (MAX_JSON_BYTES / MAX_CHUNK + 2) as u32;
    let mut a = Assembler::default();
    let data = " ".repeat(MAX_CHUNK);
    for seq in 1..=total {
        a.chunk(FioChunk {
            phase: "p".into(),
            seq,
            total,
            data: data.clone(),
        });
        assert!(a
            .partial
            .as_ref()
            .is_none_or(|p| p.buf.len() <= MAX_JSON_BYTES));
    }
    let e = a
        .complete(FioRecord {
            phase: "p".into(),
            json_bytes: Some(total as u64 * MAX_CHUNK as u64),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("passed 1048576 bytes after chunk 65"),
        "{e}"
    );
}

/// The guest's own fio_emit (guest/init), run by `sh` with the `awk` and
/// `tr` on PATH, or busybox's applets when `busybox` is set: its lines.
fn run_fio_emit(input: &str, busybox: bool) -> Option<Vec<String>> {
    let start = INIT_SCRIPT
        .find("fio_chunk=")
        .expect("fio_emit in guest/init");
    let end = INIT_SCRIPT[start..]
        .find("\n# end of fio_emit")
        .expect("end marker")
        + start;
    let d = tempfile::tempdir().unwrap();
    let input_file = d.path().join("fio.out");
    std::fs::write(&input_file, input).unwrap();
    let script = format!(
        "{}\nfio_emit randrw-4k-j2 2 '{{\"iommu-dma-pool/hits\":7}}' <{}\n",
        &INIT_SCRIPT[start..end],
        input_file.display()
    );
    let mut path = std::env::var("PATH").unwrap_or_default();
    let shell = if busybox {
        let bb = path
            .split(':')
            .map(|p| std::path::Path::new(p).join("busybox"))
            .find(|p| p.is_file())?;
        for applet in ["awk", "tr", "sh"] {
            std::os::unix::fs::symlink(&bb, d.path().join(applet)).unwrap();
        }
        path = format!("{}:{path}", d.path().display());
        d.path().join("sh")
    } else {
        "sh".into()
    };
    let o = std::process::Command::new(shell)
        .args(["-c", &script])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    Some(
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect(),
    )
}

#[test]
fn the_guests_fio_emit_round_trips_every_fixture() {
    for busybox in [false, true] {
        for (name, text) in FIXTURES {
            // fio's notice before its JSON is left out.
            let input = format!("note: a notice of fio's\n{text}");
            let Some(lines) = run_fio_emit(&input, busybox) else {
                eprintln!("no busybox on PATH: fio_emit checked with sh and awk only");
                break;
            };
            assert!(lines.iter().all(|l| l.len() < 1100), "{name}");
            assert!(
                lines[0].starts_with("@@LAB-FIO@@ randrw-4k-j2 1/"),
                "{name}: {lines:?}"
            );
            let got = feed(&mut Assembler::default(), &lines);
            assert_eq!(got.len(), 1, "{name}");
            let rec = got[0]
                .as_ref()
                .unwrap_or_else(|e| panic!("{name} busybox={busybox}: {e}"));
            let direct = crate::run::fio_json::parse(text).unwrap();
            assert_eq!(rec.read_lat, direct.read().latency, "{name}");
            assert_eq!(rec.write_iops, direct.write().iops as u64, "{name}");
            assert_eq!(rec.numjobs, 2);
            assert_eq!(rec.counters["iommu-dma-pool/hits"], 7);
        }
    }
}
