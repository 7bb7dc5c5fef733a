//! The crate's layering, read from its source: every production module's
//! `crate::`, `super::` and `self::` paths are edges of an import graph
//! (one node per source file), which must have no cycle, and no module may
//! import from a wing above its own:
//!
//! ```text
//! base ← setup ← run ← report ← app
//! ```
//!
//! Base is every module at the crate root that is not a wing. Unit tests
//! (`<module>/tests.rs`), `lib.rs` and `main.rs` are not nodes: the tests
//! may reach anywhere, lib.rs only declares the modules and main.rs only
//! calls `app`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The wings, lowest first; base (rank 0) is everything else.
const WINGS: [&str; 4] = ["setup", "run", "report", "app"];

/// A module's rank: 0 for base, then the wings in order.
fn rank(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or(module);
    WINGS.iter().position(|w| *w == top).map_or(0, |i| i + 1)
}

/// Rust source with comments removed and string and char literals
/// emptied, so that only code is left to search for paths.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            i = j + close.len();
            out.push_str("\"\"");
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\'') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 3;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch) == Some(&b'\'') {
                    i += 2 + ch;
                } else {
                    out.push('\'');
                    i += 1;
                    continue;
                }
            }
            out.push_str("' '");
        } else {
            let ch = src[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Every path that starts with `crate`, `super` or `self`, with `use`
/// groups (`a::{b, c::d}`) expanded, as lists of segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_word =
            i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| code[i..].starts_with(h));
        match head {
            Some(h) if at_word => {
                let (end, mut trees) = tree(code, i + h.len() - 2);
                for t in trees.iter_mut() {
                    t.insert(0, h[..h.len() - 2].to_string());
                }
                found.extend(trees);
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    found
}

/// The use tree at `i` (which points at `::` or at a segment): its end and
/// its paths.
fn tree(code: &str, mut i: usize) -> (usize, Vec<Vec<String>>) {
    let b = code.as_bytes();
    let mut prefix: Vec<String> = Vec::new();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if code[i..].starts_with("::") {
            i += 2;
            continue;
        }
        if b.get(i) == Some(&b'{') {
            let mut all = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    break;
                }
                let (end, inner) = tree(code, i);
                for mut p in inner {
                    let mut full = prefix.clone();
                    full.append(&mut p);
                    all.push(full);
                }
                i = end;
            }
            return (i + 1, all);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i == start {
            return (i, vec![prefix]);
        }
        prefix.push(code[start..i].to_string());
        let mut j = i;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if !code[j..].starts_with("::") {
            return (i, vec![prefix]);
        }
        i = j;
    }
}

/// The crate's production modules, by path (`run::hang::our_vmm`), with
/// their code.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, under: &[String], out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("dir entry").path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                let mut u = under.to_vec();
                u.push(name);
                walk(&p, &u, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                if stem == "tests" || (under.is_empty() && (stem == "lib" || stem == "main")) {
                    continue;
                }
                let mut m = under.to_vec();
                m.push(stem.to_string());
                let text = std::fs::read_to_string(&p).expect("read source");
                out.insert(m.join("::"), code_only(&text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

/// The import graph: for each module, the modules its paths name (the
/// longest known module prefix of each path), itself left out.
fn graph(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (m, code) in modules {
        let here: Vec<&str> = m.split("::").collect();
        let mut to = BTreeSet::new();
        for p in paths(code) {
            let mut abs: Vec<String> = match p[0].as_str() {
                "crate" => Vec::new(),
                "self" => here.iter().map(|s| s.to_string()).collect(),
                _ => here[..here.len() - 1]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            };
            let mut rest = &p[1..];
            while rest.first().map(String::as_str) == Some("super") {
                abs.pop();
                rest = &rest[1..];
            }
            abs.extend(rest.iter().cloned());
            let target = (1..=abs.len())
                .rev()
                .map(|n| abs[..n].join("::"))
                .find(|t| modules.contains_key(t));
            if let Some(t) = target {
                if t != *m {
                    to.insert(t);
                }
            }
        }
        g.insert(m.clone(), to);
    }
    g
}

/// The graph's cycles: its strongly connected components of more than one
/// module (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[v].min(s.low[w]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.low[v].min(s.index[w]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut c = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                s.out.push(c);
            }
        }
    }
    let mut s = St {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The graph with every module folded into its top-level module (a wing,
/// or a base module with its submodules).
fn top_level(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut t: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, to) in g {
        let e = t.entry(top(m)).or_default();
        e.extend(to.iter().map(|x| top(x)).filter(|x| *x != top(m)));
    }
    t
}

/// Everything wrong with a crate's layering, one line each.
fn problems(modules: &BTreeMap<String, String>) -> Vec<String> {
    let g = graph(modules);
    let mut out = Vec::new();
    for c in cycles(&g) {
        out.push(format!("import cycle among modules: {}", c.join(", ")));
    }
    for c in cycles(&top_level(&g)) {
        out.push(format!(
            "import cycle among top-level modules: {}",
            c.join(", ")
        ));
    }
    for (m, to) in &g {
        for t in to {
            if rank(t) > rank(m) {
                out.push(format!("{m} imports {t}, from a wing above its own"));
            }
        }
    }
    out
}

#[test]
fn the_crate_has_no_import_cycle_and_no_upward_import() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let m = modules(&src);
    assert!(m.len() > 20, "found the crate's modules: {:?}", m.keys());
    let p = problems(&m);
    assert!(p.is_empty(), "layering problems:\n{}", p.join("\n"));
}

/// A made-up crate for the checker itself.
fn fake(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(m, s)| (m.to_string(), code_only(s)))
        .collect()
}

#[test]
fn a_cycle_is_found_through_groups_super_and_long_paths() {
    let m = fake(&[
        ("plan", "use crate::columns::{self, Column};"),
        ("columns", "fn f() { crate::units::parse(1); }"),
        ("units", "use crate::{cli::Config, plan::Phase};"),
        ("cli", ""),
        ("run", ""),
        ("run::a", "use super::b::X;"),
        ("run::b", "pub fn g() -> crate::run::a::Y { todo!() }"),
    ]);
    let p = problems(&m);
    assert!(
        p.iter()
            .any(|l| l == "import cycle among modules: columns, plan, units"),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|l| l == "import cycle among modules: run::a, run::b"),
        "{p:?}"
    );
}

#[test]
fn an_upward_import_is_found_and_comments_and_strings_are_not_code() {
    let m = fake(&[
        (
            "plan",
            "// use crate::report::x;\n/// [`crate::run::r`]\nconst S: &str = \"crate::run::r\";",
        ),
        ("setup", ""),
        (
            "setup::image",
            "use crate::plan; const C: char = '\"'; fn f<'a>(x: &'a u8) { crate::run::r::go(); }",
        ),
        ("run", ""),
        ("run::r", "use crate::plan;"),
    ]);
    let p = problems(&m);
    assert_eq!(
        p,
        vec!["setup::image imports run::r, from a wing above its own".to_string()]
    );
}
