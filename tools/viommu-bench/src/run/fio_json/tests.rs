use super::*;

/// Real fio output: Debian 12's fio 3.33 and Debian 13's fio 3.39, run
/// on a file (`tests/data/fio/README.md` has the command lines).
pub(crate) const FIXTURES: [(&str, &str); 10] = [
    (
        "fio-3.33-randread-j1",
        include_str!("../../../tests/data/fio/fio-3.33-randread-j1.json"),
    ),
    (
        "fio-3.33-randread-j2",
        include_str!("../../../tests/data/fio/fio-3.33-randread-j2.json"),
    ),
    (
        "fio-3.33-randrw",
        include_str!("../../../tests/data/fio/fio-3.33-randrw.json"),
    ),
    (
        "fio-3.33-nogroup-j2",
        include_str!("../../../tests/data/fio/fio-3.33-nogroup-j2.json"),
    ),
    (
        "fio-3.33-guest-randrw-j2",
        include_str!("../../../tests/data/fio/fio-3.33-guest-randrw-j2.json"),
    ),
    (
        "fio-3.39-randread-j1",
        include_str!("../../../tests/data/fio/fio-3.39-randread-j1.json"),
    ),
    (
        "fio-3.39-randread-j2",
        include_str!("../../../tests/data/fio/fio-3.39-randread-j2.json"),
    ),
    (
        "fio-3.39-randrw",
        include_str!("../../../tests/data/fio/fio-3.39-randrw.json"),
    ),
    (
        "fio-3.39-nogroup-j2",
        include_str!("../../../tests/data/fio/fio-3.39-nogroup-j2.json"),
    ),
    (
        "fio-3.39-guest-randrw-j2",
        include_str!("../../../tests/data/fio/fio-3.39-guest-randrw-j2.json"),
    ),
];

pub(crate) fn fixture(name: &str) -> &'static str {
    FIXTURES.iter().find(|(n, _)| *n == name).unwrap().1
}

fn ordered(l: &Latency) {
    let (p50, p99, p999) = (l.p50_ns.unwrap(), l.p99_ns.unwrap(), l.p999_ns.unwrap());
    assert!(0 < p50 && p50 <= p99 && p99 <= p999, "{l:?}");
    assert!(
        l.clat_mean_ns > 0.0 && l.lat_mean_ns >= l.clat_mean_ns,
        "{l:?}"
    );
    assert!(l.samples > 0);
}

#[test]
fn every_fixture_parses_with_its_version_and_latencies() {
    for (name, text) in FIXTURES {
        let out = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let version = &name[..8];
        assert_eq!(out.version.as_deref(), Some(version), "{name}");
        assert_eq!(out.error(), 0, "{name}");
        let rec = out.apply(FioRecord::default());
        assert!(
            rec.read_iops > 0 && rec.read_kib > 0 && rec.read_ms > 0,
            "{name}"
        );
        ordered(rec.read_lat.as_ref().unwrap());
        let rw = name.contains("randrw");
        assert_eq!(rec.write_lat.is_some(), rw, "{name}");
        assert_eq!(rec.write_iops > 0, rw, "{name}");
        if let Some(w) = &rec.write_lat {
            ordered(w);
        }
        let jobs = if name.contains("nogroup") { 2 } else { 1 };
        assert_eq!(rec.read_lat.as_ref().unwrap().jobs, jobs, "{name}");
        assert_eq!(rec.latency().unwrap().0, "read", "{name}");
    }
}

#[test]
fn the_figures_are_the_terse_fields_in_their_units() {
    let out = parse(fixture("fio-3.33-randread-j1")).unwrap();
    let rec = out.apply(FioRecord {
        phase: "randread-4k".into(),
        numjobs: 1,
        ..Default::default()
    });
    // Straight from the file: io_bytes 67268608, bw_bytes 33617495,
    // iops 8207.396302, runtime 2001, clat p50/p99/p99.9.
    assert_eq!(rec.read_kib, 67268608 / 1024);
    assert_eq!(rec.read_bw_kib, 33617495 / 1024);
    assert_eq!(rec.read_iops, 8207);
    assert_eq!(rec.read_ms, 2001);
    let l = rec.read_lat.unwrap();
    assert_eq!(
        (l.p50_ns, l.p99_ns, l.p999_ns),
        (Some(59648), Some(2932736), Some(7241728))
    );
    assert_eq!(l.samples, 16423);
    assert_eq!(rec.fio_version.as_deref(), Some("fio-3.33"));
    assert_eq!(rec.phase, "randread-4k");
}

#[test]
fn two_jobs_without_group_reporting_sum_and_take_the_larger_percentile() {
    for name in ["fio-3.33-nogroup-j2", "fio-3.39-nogroup-j2"] {
        let out = parse(fixture(name)).unwrap();
        assert_eq!(out.jobs.len(), 2);
        let r = out.read();
        let (a, b) = (&out.jobs[0].read, &out.jobs[1].read);
        assert_eq!(r.io_bytes, a.io_bytes + b.io_bytes);
        assert!((r.iops - (a.iops + b.iops)).abs() < 1e-6);
        assert_eq!(r.runtime_ms, a.runtime.max(b.runtime));
        let l = r.latency.unwrap();
        let (ca, cb) = (a.clat_ns.as_ref().unwrap(), b.clat_ns.as_ref().unwrap());
        assert_eq!(l.p99_ns, ca.at(99.0).max(cb.at(99.0)));
        assert_eq!(l.samples, ca.n + cb.n);
        let mean = (ca.mean * ca.n as f64 + cb.mean * cb.n as f64) / (ca.n + cb.n) as f64;
        assert!((l.clat_mean_ns - mean).abs() < 1e-3);
        assert_eq!(l.jobs, 2);
    }
    // With --group_reporting (the guest's runs): one entry, the run's own.
    for name in ["fio-3.33-randread-j2", "fio-3.39-guest-randrw-j2"] {
        assert_eq!(parse(fixture(name)).unwrap().jobs.len(), 1, "{name}");
    }
}

#[test]
fn the_guests_percentile_list_gives_exactly_the_three() {
    for name in ["fio-3.33-guest-randrw-j2", "fio-3.39-guest-randrw-j2"] {
        let out = parse(fixture(name)).unwrap();
        let c = out.jobs[0].read.clat_ns.as_ref().unwrap();
        let keys: Vec<&str> = c.percentile.keys().map(String::as_str).collect();
        assert_eq!(keys, ["50.000000", "99.000000", "99.900000"], "{name}");
    }
}

#[test]
fn notices_before_and_text_after_the_object_are_skipped() {
    let text = format!(
        "note: both iodepth >= 1 and synchronous I/O engine are selected\n{}\ntrailing\n",
        fixture("fio-3.39-randrw")
    );
    assert_eq!(parse(&text).unwrap().jobs.len(), 1);
}

#[test]
fn bad_output_is_a_clear_error_never_a_panic() {
    let full = fixture("fio-3.39-randread-j1");
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "no JSON object"),
        ("fio: engine libaio not loadable".into(), "no JSON object"),
        (full[..full.len() / 2].into(), "does not parse"),
        (full.replace("\"jobs\"", "\"jabs\""), "does not parse"),
        (r#"{"jobs":[]}"#.into(), "no job"),
        (
            r#"{"jobs":[{"read":{"iops":"many"}}]}"#.into(),
            "does not parse",
        ),
        (
            r#"{"jobs":[{"read":{"io_bytes":-1}}]}"#.into(),
            "does not parse",
        ),
        ("{".repeat(100_000), "does not parse"),
        (
            format!("{{\"jobs\":[{}]}}", "[".repeat(10_000)),
            "does not parse",
        ),
        (" ".repeat(MAX_JSON_BYTES + 1), "more than the 1048576"),
    ];
    for (text, want) in cases {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains(want), "{e} (wanted {want})");
    }
}

#[test]
fn no_completions_no_latency() {
    let out = parse(r#"{"fio version":"fio-3.39","jobs":[{"error":5,"read":{"io_bytes":0,"clat_ns":{"N":0,"mean":0}}}]}"#)
        .unwrap();
    let rec = out.apply(FioRecord::default());
    assert_eq!(rec.error, 5);
    assert!(rec.read_lat.is_none() && rec.write_lat.is_none());
    assert!(rec.latency().is_none());
}
