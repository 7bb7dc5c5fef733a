use super::*;

counters! {
    /// Inner.
    pub struct Inner {
        /// Calls
        /// made.
        pub calls: u64,
        /// Bytes\moved.
        pub bytes: u64,
    }
}

counters! {
    /// Outer.
    pub struct Outer {
        /// Requests by type.
        pub requests: Inner => family "type",
        /// Host side.
        pub host: Inner => nested,
        /// Sizes.
        pub sizes: [u64; 2] => family "log2",
        /// Plain.
        pub plain: u64,
    }
}

#[test]
fn renders_every_kind_of_field() {
    let o = Outer {
        requests: Inner { calls: 1, bytes: 2 },
        host: Inner { calls: 3, bytes: 4 },
        sizes: [5, 6],
        plain: 7,
    };
    let t = prometheus_text("x", &o);
    assert_eq!(
        t,
        "# HELP x_requests_total Requests by type.\n\
         # TYPE x_requests_total counter\n\
         x_requests_total{type=\"calls\"} 1\n\
         x_requests_total{type=\"bytes\"} 2\n\
         # HELP x_host_calls_total Calls made.\n\
         # TYPE x_host_calls_total counter\n\
         x_host_calls_total 3\n\
         # HELP x_host_bytes_total Bytes\\\\moved.\n\
         # TYPE x_host_bytes_total counter\n\
         x_host_bytes_total 4\n\
         # HELP x_sizes_total Sizes.\n\
         # TYPE x_sizes_total counter\n\
         x_sizes_total{log2=\"0\"} 5\n\
         x_sizes_total{log2=\"1\"} 6\n\
         # HELP x_plain_total Plain.\n\
         # TYPE x_plain_total counter\n\
         x_plain_total 7\n"
    );
}

#[test]
fn renders_several_sets_by_label() {
    let a = Outer {
        requests: Inner { calls: 1, bytes: 2 },
        plain: 3,
        ..Default::default()
    };
    let b = Outer {
        plain: 9,
        ..Default::default()
    };
    let t = prometheus_text_by("x", "ep", &[("a".into(), &a), ("b\"".into(), &b)]);
    assert!(t.starts_with(
        "# HELP x_requests_total Requests by type.\n\
         # TYPE x_requests_total counter\n\
         x_requests_total{ep=\"a\",type=\"calls\"} 1\n\
         x_requests_total{ep=\"a\",type=\"bytes\"} 2\n\
         x_requests_total{ep=\"b\\\"\",type=\"calls\"} 0\n"
    ));
    assert!(t.contains("# HELP x_host_calls_total Calls made.\n"));
    assert!(t.ends_with(
        "# TYPE x_plain_total counter\n\
         x_plain_total{ep=\"a\"} 3\n\
         x_plain_total{ep=\"b\\\"\"} 9\n"
    ));
    assert_eq!(t.matches("# TYPE").count(), 5);
    assert!(prometheus_text_by("x", "ep", &[]).is_empty());
}
