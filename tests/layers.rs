//! The layers of `src/` (ARCHITECTURE.md), checked the way cargo-deny checks dependencies:
//! the rule is data, `tests/data/layers.toml`, and a break is a failing test that names
//! the file and the import.
//!
//! Every `crate::`, `super::` and `self::` path in `src/` (and `use child::…` of a module
//! the file declares) is resolved to the file that defines it. Then:
//!
//! - an import from one top-level module into another must be allowed by the table, or
//!   listed as a known exception (file, module, why);
//! - no import circle may run through files of two top-level modules, unless listed (the
//!   modules it spans, why);
//! - a listed exception that nothing needs any more fails too, so the list only shrinks.
//!
//! Comments are left out (doc links are not imports); code inside strings is not told
//! apart, which no file needs today.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
struct Layers {
    /// Modules every module may import.
    anyone_may_import: Vec<String>,
    /// Each top-level module and the modules it may import.
    may_import: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    exception: Vec<Exception>,
    #[serde(default)]
    circle: Vec<Circle>,
}

#[derive(Deserialize)]
struct Exception {
    file: String,
    imports: String,
    why: String,
}

#[derive(Deserialize)]
struct Circle {
    modules: Vec<String>,
    why: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The source files of the library, relative to the repository (`src/store/mod.rs`),
/// without the binaries.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path a file defines: `src/store/mod.rs` -> [store], `src/store/audit.rs`
/// -> [store, audit], `src/lib.rs` -> [].
fn module_path(rel: &str) -> Vec<String> {
    let inner = rel
        .strip_prefix("src/")
        .unwrap()
        .strip_suffix(".rs")
        .unwrap();
    let mut parts: Vec<String> = inner.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The top-level module a file belongs to (`store` for `src/store/audit.rs`).
fn top(rel: &str) -> String {
    module_path(rel).into_iter().next().unwrap_or_default()
}

/// The text without comments.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths of a `use` tree body (`a::{b, c::d}, e as f`), each as its segments.
fn expand(prefix: &[String], body: &str, out: &mut Vec<Vec<String>>) {
    let mut parts = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    parts.push(cur);
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        if let Some(open) = p.find('{') {
            let head: Vec<String> = p[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let inner = &p[open + 1..p.rfind('}').unwrap_or(p.len())];
            let mut pre = prefix.to_vec();
            pre.extend(head);
            expand(&pre, inner, out);
        } else {
            let name = p.split(" as ").next().unwrap();
            let mut segs = prefix.to_vec();
            segs.extend(
                name.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != "self")
                    .map(String::from),
            );
            out.push(segs);
        }
    }
}

/// Every path a file names, as (position in the text, base, segments): base is `crate`,
/// `super`, `self` or `child` (a module the file declares).
fn named_paths(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut out = Vec::new();
    let children: BTreeSet<String> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect();
    // `use` items, with their trees; their text is not read again as code paths.
    let mut uses: Vec<(usize, usize)> = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("use ") {
        let start = at + i;
        at = start + 4;
        if start > 0 && is_ident(text[..start].chars().next_back().unwrap()) {
            continue;
        }
        let Some(end) = text[at..].find(';') else {
            break;
        };
        uses.push((start, at + end));
        let body = text[at..at + end].trim();
        let (base, rest) = match body.split_once("::") {
            Some((b, r)) => (b.trim(), r),
            None => continue,
        };
        let base = match base {
            "crate" | "super" | "self" => base.to_string(),
            b if children.contains(b) => {
                let mut segs = vec![];
                expand(&[b.to_string()], rest, &mut segs);
                for s in segs {
                    out.push((start, "self".into(), s));
                }
                continue;
            }
            _ => continue,
        };
        let mut segs = vec![];
        expand(&[], rest, &mut segs);
        for s in segs {
            out.push((start, base.clone(), s));
        }
    }
    // Paths in code: `crate::a::b`, `super::x`.
    for base in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(i) = text[at..].find(base) {
            let start = at + i;
            at = start + base.len();
            let before = text[..start].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':')
                || uses.iter().any(|(a, b)| (*a..*b).contains(&start))
            {
                continue;
            }
            let tail: String = text[at..]
                .chars()
                .take_while(|c| is_ident(*c) || *c == ':')
                .collect();
            let segs: Vec<String> = tail
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if !segs.is_empty() {
                out.push((start, base.trim_end_matches(':').to_string(), segs));
            }
        }
    }
    out
}

struct Graph {
    /// file -> files it imports (relative paths such as `src/store/mod.rs`).
    edges: BTreeMap<String, BTreeSet<String>>,
    /// (file, imported file) -> the first path that made the edge, for messages.
    why: BTreeMap<(String, String), String>,
}

fn graph() -> Graph {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    let rels: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|r| r != "src/main.rs")
        .collect();
    let by_module: BTreeMap<Vec<String>, String> =
        rels.iter().map(|r| (module_path(r), r.clone())).collect();
    let resolve = |segs: &[String]| -> Option<String> {
        (1..=segs.len())
            .rev()
            .find_map(|n| by_module.get(&segs[..n]).cloned())
    };
    let mut g = Graph {
        edges: BTreeMap::new(),
        why: BTreeMap::new(),
    };
    for rel in &rels {
        let text = strip_comments(&std::fs::read_to_string(root().join(rel)).unwrap());
        let me = module_path(rel);
        // Inside an inline module (`mod tests { use super::*; }`, at the end of a file)
        // `super` is this file.
        let mut offset = 0;
        let mut inline = None;
        for line in text.split_inclusive('\n') {
            let t = line.trim();
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
            if t.starts_with("mod ") && t.ends_with('{') {
                inline = Some(offset);
                break;
            }
            offset += line.len();
        }
        for (pos, base, segs) in named_paths(&text) {
            let inside = inline.is_some_and(|i| pos > i);
            let full: Vec<String> = match base.as_str() {
                "crate" => segs.clone(),
                "self" => me.iter().cloned().chain(segs.clone()).collect(),
                _ => {
                    let parent = if inside {
                        me.clone()
                    } else {
                        me[..me.len().saturating_sub(1)].to_vec()
                    };
                    parent.into_iter().chain(segs.clone()).collect()
                }
            };
            if let Some(target) = resolve(&full)
                && &target != rel
                && target != "src/lib.rs"
            {
                g.why
                    .entry((rel.clone(), target.clone()))
                    .or_insert_with(|| format!("{base}::{}", segs.join("::")));
                g.edges.entry(rel.clone()).or_default().insert(target);
            }
        }
    }
    g
}

fn layers() -> Layers {
    let path = root().join("tests/data/layers.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Strongly connected components of the file graph with more than one file (Tarjan).
fn circles(g: &Graph) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.edges.get(v) {
            for w in ws {
                if !t.index.contains_key(w.as_str()) {
                    visit(t, w);
                    let l = t.low[w.as_str()].min(t.low[v]);
                    t.low.insert(v, l);
                } else if t.on.contains(w.as_str()) {
                    let l = t.index[w.as_str()].min(t.low[v]);
                    t.low.insert(v, l);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    let nodes: Vec<&str> = g.edges.keys().map(String::as_str).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn every_import_goes_down_the_layers() {
    let g = graph();
    let l = layers();
    let mut breaks = Vec::new();
    let mut used = vec![false; l.exception.len()];
    let mut unknown = BTreeSet::new();
    for (from, targets) in &g.edges {
        let m = top(from);
        if from == "src/lib.rs" {
            continue;
        }
        let Some(allowed) = l.may_import.get(&m) else {
            unknown.insert(m);
            continue;
        };
        for to in targets {
            let t = top(to);
            if t == m || allowed.contains(&t) || l.anyone_may_import.contains(&t) {
                continue;
            }
            match l
                .exception
                .iter()
                .position(|e| e.file == *from && e.imports == t)
            {
                Some(i) => used[i] = true,
                None => breaks.push(format!(
                    "{from} imports {to} (`{}`): {m} may not import {t}",
                    g.why[&(from.clone(), to.clone())]
                )),
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "tests/data/layers.toml: add these modules to [may_import]: {unknown:?}"
    );
    let stale: Vec<String> = l
        .exception
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(e, _)| format!("{} -> {} ({})", e.file, e.imports, e.why))
        .collect();
    assert!(
        breaks.is_empty(),
        "imports that break the layers of tests/data/layers.toml (ARCHITECTURE.md):\n  {}",
        breaks.join("\n  ")
    );
    assert!(
        stale.is_empty(),
        "tests/data/layers.toml lists exceptions nothing needs any more: remove them:\n  {}",
        stale.join("\n  ")
    );
    eprintln!(
        "layers: {} files, {} known exceptions",
        g.edges.len(),
        l.exception.len()
    );
}

#[test]
fn no_import_circle_crosses_modules() {
    let g = graph();
    let l = layers();
    let mut breaks = Vec::new();
    let mut used = vec![false; l.circle.len()];
    for comp in circles(&g) {
        let modules: BTreeSet<String> = comp.iter().map(|f| top(f)).collect();
        if modules.len() < 2 {
            continue;
        }
        match l.circle.iter().position(|c| {
            c.modules.iter().cloned().collect::<BTreeSet<_>>() == modules && !c.why.is_empty()
        }) {
            Some(i) => used[i] = true,
            None => breaks.push(format!(
                "{} files of modules {modules:?}: {}",
                comp.len(),
                comp.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }
    let stale: Vec<String> = l
        .circle
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(c, _)| format!("{:?}", c.modules))
        .collect();
    assert!(
        breaks.is_empty(),
        "import circles across top-level modules (each file reaches the others through \
         `use`):\n  {}",
        breaks.join("\n  ")
    );
    assert!(
        stale.is_empty(),
        "tests/data/layers.toml lists circles that are gone or changed: update them:\n  {}",
        stale.join("\n  ")
    );
}

/// The reader itself, on a small text: use trees, code paths, comments left out.
#[test]
fn paths_are_read_from_use_trees_and_code() {
    let text = strip_comments(
        "//! see crate::nowhere\nmod child;\nuse crate::a::{b, c::{d, e as f}};\nuse super::g;\n\
         use child::h;\nfn x() { crate::i::j(); /* crate::k */ }\n",
    );
    let got: Vec<String> = named_paths(&text)
        .into_iter()
        .map(|(_, base, segs)| format!("{base}::{}", segs.join("::")))
        .collect();
    for want in [
        "crate::a::b",
        "crate::a::c::d",
        "crate::a::c::e",
        "super::g",
        "self::child::h",
        "crate::i::j",
    ] {
        assert!(got.contains(&want.to_string()), "{want} not in {got:?}");
    }
    assert!(
        !got.iter()
            .any(|p| p.contains("nowhere") || p.contains("::k"))
    );
}
