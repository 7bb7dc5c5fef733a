//! Counter structs that describe themselves, and their Prometheus text.
//!
//! [`counters!`] declares a plain struct of `u64` counters (serde-derived,
//! `Copy`, `Default`) whose doc comments are also the HELP text of each
//! counter, so a counter's name, meaning and value are written down once.
//! A field may instead hold a family (an array, or another counter struct,
//! whose members become the values of a label) or a nested counter struct
//! (its counters get the field's name as a prefix).
//!
//! [`prometheus_text`] renders any [`CounterSet`] in the Prometheus text
//! exposition format (version 0.0.4): a `# HELP` and a `# TYPE ... counter`
//! line per metric, one sample a line, every counter name ending in `_total`.

#![deny(missing_docs)]

use std::fmt::Write as _;

/// The content type of [`prometheus_text`]'s output.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Receives the counters of a [`CounterSet`].
pub trait Visitor {
    /// A single counter.
    fn counter(&mut self, name: &str, help: &str, value: u64);
    /// A family of counters told apart by the values of `label`.
    fn family(&mut self, name: &str, help: &str, label: &str, values: &[(String, u64)]);
    /// A nested set, whose counter names take `name` as a prefix.
    fn nested(&mut self, name: &str, set: &dyn CounterSet);
}

/// A struct of counters that can list them (see [`counters!`]).
pub trait CounterSet {
    /// Calls `v` once per counter, family or nested set, in field order.
    fn visit(&self, v: &mut dyn Visitor);
}

/// The members of a family: label value and count.
pub trait LabelValues {
    /// `(label value, count)` of every member, in order.
    fn label_values(&self) -> Vec<(String, u64)>;
}

impl<const N: usize> LabelValues for [u64; N] {
    fn label_values(&self) -> Vec<(String, u64)> {
        self.iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), *v))
            .collect()
    }
}

struct Flatten(Vec<(String, u64)>);

impl Visitor for Flatten {
    fn counter(&mut self, name: &str, _: &str, value: u64) {
        self.0.push((name.to_string(), value));
    }
    fn family(&mut self, name: &str, _: &str, _: &str, values: &[(String, u64)]) {
        for (l, v) in values {
            self.0.push((format!("{name}_{l}"), *v));
        }
    }
    fn nested(&mut self, name: &str, set: &dyn CounterSet) {
        let mut inner = Flatten(Vec::new());
        set.visit(&mut inner);
        for (n, v) in inner.0 {
            self.0.push((format!("{name}_{n}"), v));
        }
    }
}

/// A counter struct used as a family: its field names are the label values.
pub fn members(set: &dyn CounterSet) -> Vec<(String, u64)> {
    let mut f = Flatten(Vec::new());
    set.visit(&mut f);
    f.0
}

/// Declares a counter struct. Every field has a doc comment (its HELP
/// text) and is a `u64` counter, or, after `=>`:
/// - `family "label"`: an array (label values `0`, `1`, ...) or a counter
///   struct (label values are its field names) counted under one name;
/// - `nested`: a counter struct whose counters are prefixed with the
///   field's name.
///
/// ```
/// viommu_counters::counters! {
///     /// What a cache did.
///     pub struct Cache {
///         /// Lookups that found their entry.
///         pub hits: u64,
///         /// Lookups by size class (log2 of the size).
///         pub by_class: [u64; 4] => family "class",
///     }
/// }
/// let c = Cache { hits: 2, by_class: [1, 0, 0, 1] };
/// let text = viommu_counters::prometheus_text("cache", &c);
/// assert!(text.contains("# TYPE cache_hits_total counter\ncache_hits_total 2\n"));
/// assert!(text.contains("cache_by_class_total{class=\"3\"} 1\n"));
/// ```
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])+
                $fvis:vis $field:ident : $ty:ty $(=> $how:ident $($label:literal)?)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ::serde::Serialize, ::serde::Deserialize)]
        $vis struct $name {
            $( $(#[doc = $doc])+ $fvis $field: $ty, )*
        }

        impl $crate::CounterSet for $name {
            fn visit(&self, v: &mut dyn $crate::Visitor) {
                $(
                    $crate::__visit_field!(
                        v, self.$field, stringify!($field), concat!($($doc, "\n"),+),
                        $($how $($label)?)?
                    );
                )*
            }
        }

        impl $crate::LabelValues for $name {
            fn label_values(&self) -> Vec<(String, u64)> {
                $crate::members(self)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __visit_field {
    ($v:ident, $val:expr, $name:expr, $help:expr, ) => {
        $v.counter($name, $help, $val)
    };
    ($v:ident, $val:expr, $name:expr, $help:expr, family $label:literal) => {
        $v.family(
            $name,
            $help,
            $label,
            &$crate::LabelValues::label_values(&$val),
        )
    };
    ($v:ident, $val:expr, $name:expr, $help:expr, nested) => {
        $v.nested($name, &$val)
    };
}

struct Text {
    out: String,
    prefix: Vec<String>,
}

impl Text {
    fn header(&mut self, name: &str, help: &str) -> String {
        let mut full = self.prefix.join("_");
        if !full.is_empty() {
            full.push('_');
        }
        full.push_str(name);
        full.push_str("_total");
        // HELP text: one line; backslash and line feed escaped.
        let help = help
            .split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .replace('\\', "\\\\");
        let _ = writeln!(self.out, "# HELP {full} {help}");
        let _ = writeln!(self.out, "# TYPE {full} counter");
        full
    }
}

impl Visitor for Text {
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let full = self.header(name, help);
        let _ = writeln!(self.out, "{full} {value}");
    }

    fn family(&mut self, name: &str, help: &str, label: &str, values: &[(String, u64)]) {
        let full = self.header(name, help);
        for (l, v) in values {
            let l = l.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(self.out, "{full}{{{label}=\"{l}\"}} {v}");
        }
    }

    fn nested(&mut self, name: &str, set: &dyn CounterSet) {
        self.prefix.push(name.to_string());
        set.visit(self);
        self.prefix.pop();
    }
}

/// `set` in the Prometheus text exposition format, every name starting
/// with `prefix_`.
pub fn prometheus_text(prefix: &str, set: &dyn CounterSet) -> String {
    let mut t = Text {
        out: String::new(),
        prefix: vec![prefix.to_string()],
    };
    set.visit(&mut t);
    t.out
}

/// One sample of a set, flattened: full name (without `_total`), HELP
/// text, the labels of a family member, value.
type Sample = (String, String, Option<(String, String)>, u64);

struct Samples {
    prefix: Vec<String>,
    out: Vec<Sample>,
}

impl Samples {
    fn full(&self, name: &str) -> String {
        let mut p = self.prefix.clone();
        p.push(name.to_string());
        p.join("_")
    }
}

impl Visitor for Samples {
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let full = self.full(name);
        self.out.push((full, help.to_string(), None, value));
    }

    fn family(&mut self, name: &str, help: &str, label: &str, values: &[(String, u64)]) {
        let full = self.full(name);
        for (l, v) in values {
            let member = Some((label.to_string(), l.clone()));
            self.out.push((full.clone(), help.to_string(), member, *v));
        }
    }

    fn nested(&mut self, name: &str, set: &dyn CounterSet) {
        self.prefix.push(name.to_string());
        set.visit(self);
        self.prefix.pop();
    }
}

fn escape_label(l: &str) -> String {
    l.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Several sets of the same type in the Prometheus text format, one
/// sample per set and counter told apart by `label` (e.g. one set per
/// endpoint: `label` `"endpoint"`, values its names): every name starts
/// with `prefix_`, each metric has one HELP and TYPE.
pub fn prometheus_text_by(prefix: &str, label: &str, sets: &[(String, &dyn CounterSet)]) -> String {
    let mut t = Text {
        out: String::new(),
        prefix: Vec::new(),
    };
    let per_set: Vec<Vec<Sample>> = sets
        .iter()
        .map(|(_, set)| {
            let mut s = Samples {
                prefix: vec![prefix.to_string()],
                out: Vec::new(),
            };
            set.visit(&mut s);
            s.out
        })
        .collect();
    let Some(first) = per_set.first() else {
        return String::new();
    };
    let mut done = std::collections::BTreeSet::new();
    for (name, help, _, _) in first {
        if !done.insert(name.clone()) {
            continue;
        }
        let full = t.header(name, help);
        for ((value, _), samples) in sets.iter().zip(&per_set) {
            let value = escape_label(value);
            for (n, _, member, v) in samples.iter().filter(|s| &s.0 == name) {
                debug_assert_eq!(n, name);
                let member = member
                    .as_ref()
                    .map(|(l, m)| format!(",{l}=\"{}\"", escape_label(m)))
                    .unwrap_or_default();
                let _ = writeln!(t.out, "{full}{{{label}=\"{value}\"{member}}} {v}");
            }
        }
    }
    t.out
}

#[cfg(test)]
mod tests;
