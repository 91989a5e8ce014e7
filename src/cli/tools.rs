//! grep, find, search, tag, untag, meta.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::Ctx;
use super::output::Paint;
use crate::diff::{ChangeKind, diff_roots};
use crate::documents::tools::{
    FindReport, FoundEntry, GrepMatch, GrepReport, SearchReport, TagReport,
};
use crate::error::{Error, Result};
use crate::tags::{meta_attr, meta_of, parse_filter, tag_attr, tags_of};
use crate::util::rfc3339;
use crate::walk::{Next, is_binary, walk};
use crate::workspace::path::{display, parse};
use crate::workspace::{Entry, Hash, Kind, Store, Workspace, content};

#[derive(Args, Debug)]
pub struct GrepArgs {
    /// A regular expression (Rust `regex` syntax, as ripgrep's).
    pattern: String,
    /// File or directory to search (default: the whole workspace).
    #[arg(default_value = "/")]
    path: OsString,
    /// Match case-insensitively.
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// Print line numbers.
    #[arg(short = 'n', long)]
    line_number: bool,
    /// Print only the paths of files with a match.
    #[arg(short = 'l', long)]
    files_with_matches: bool,
    /// The pattern is a literal string, not a regular expression.
    #[arg(short = 'F', long)]
    fixed_strings: bool,
    /// Match whole words only.
    #[arg(short = 'w', long)]
    word_regexp: bool,
    /// Also search files and directories whose names start with '.'.
    #[arg(long)]
    hidden: bool,
    /// Search the files as they were at this checkpoint.
    #[arg(long, value_name = "CHECKPOINT")]
    at: Option<String>,
    /// Show at most N matching lines (with -l, files) from `--cursor` on (default: 100
    /// with --json, all otherwise); `total` and `next_cursor` say what is left.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TypeArg {
    /// regular file
    F,
    /// directory
    D,
    /// symbolic link
    L,
    /// FIFO
    P,
    /// socket
    S,
    /// character device
    C,
    /// block device
    B,
}

impl TypeArg {
    fn kind(self) -> Kind {
        match self {
            TypeArg::F => Kind::File,
            TypeArg::D => Kind::Dir,
            TypeArg::L => Kind::Symlink,
            TypeArg::P => Kind::Fifo,
            TypeArg::S => Kind::Socket,
            TypeArg::C => Kind::CharDev,
            TypeArg::B => Kind::BlockDev,
        }
    }
}

#[derive(Args, Debug)]
pub struct FindArgs {
    /// Where to start (default: the whole workspace).
    #[arg(default_value = "/")]
    path: OsString,
    /// The name (last component) matches this glob: *, ?, [abc], {a,b}. Repeat for any of several.
    #[arg(long, value_name = "GLOB")]
    name: Vec<String>,
    /// Only entries of these types (repeatable).
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    kind: Vec<TypeArg>,
    /// Size in bytes: +N more than N, -N less than N, N exactly; suffixes k, M, G, T
    /// (1024-based). Repeat for a range (--size +1k --size -1M).
    #[arg(long, value_name = "[+|-]N[kMGT]", allow_hyphen_values = true)]
    size: Vec<String>,
    /// Only entries added or changed since this checkpoint (content, type, mode, tags or
    /// metadata; a directory only when it was added or its own mode or tags changed).
    #[arg(long, value_name = "CHECKPOINT")]
    newer: Option<String>,
    /// Only entries with this tag (repeat: all of them).
    #[arg(long, value_name = "TAG")]
    tag: Vec<String>,
    /// Only entries with this metadata key, or key and value (repeat: all of them).
    #[arg(long, value_name = "KEY[=VALUE]")]
    meta: Vec<String>,
    /// Descend at most N levels below PATH.
    #[arg(long, value_name = "N")]
    max_depth: Option<usize>,
    /// Look at the tree of this checkpoint instead of the live state.
    #[arg(long, value_name = "CHECKPOINT")]
    at: Option<String>,
    /// Show at most N entries from `--cursor` on (default: 100 with --json, all
    /// otherwise); `total` and `next_cursor` say what is left.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// Words to find; a file must hold all of them, and a word ending in * matches as a
    /// prefix. With --fts, an SQLite FTS5 query (OR, NOT, "a phrase", NEAR(a b), pre*).
    #[arg(required = true, num_args = 1.., value_name = "QUERY")]
    query: Vec<String>,
    /// Only files under this path.
    #[arg(long, value_name = "PATH")]
    path: Option<OsString>,
    /// At most N results.
    #[arg(long, default_value_t = 20, value_name = "N")]
    limit: usize,
    /// The query is FTS5 syntax.
    #[arg(long)]
    fts: bool,
}

#[derive(Args, Debug)]
pub struct TagArgs {
    path: OsString,
    #[arg(required = true)]
    tags: Vec<String>,
}

#[derive(Args, Debug)]
pub struct MetaArgs {
    path: OsString,
    /// The key to show, set or remove (default: show all tags and metadata).
    key: Option<String>,
    /// The value to set.
    #[arg(conflicts_with = "unset")]
    value: Option<OsString>,
    /// Remove KEY.
    #[arg(long, short = 'd', requires = "key")]
    unset: bool,
}

/// What a read-only walk reads: a root tree, where to start in it and, for `find
/// --newer`, the root of the checkpoint to compare with.
struct Snapshot {
    store: Store,
    root: Hash,
    start: Vec<Vec<u8>>,
    newer: Option<Hash>,
}

/// A checkpoint's tree read literally, or the live state (hashed without writing, see
/// `Workspace::live_root`) with symlinks on the way to `comps` resolved. The vault is
/// opened read-only; the walk then reads immutable trees.
fn snapshot(
    ctx: &Ctx,
    comps: &[Vec<u8>],
    at: Option<&str>,
    newer: Option<&str>,
) -> Result<Snapshot> {
    let (v, mut store) = ctx.open_read()?;
    let (root, start, newer) = store.read(|db| {
        let ws = Workspace::open(db, &v.workspace)?;
        let newer = newer
            .map(|n| ws.find_checkpoint(n).map(|c| c.root))
            .transpose()?;
        match at {
            Some(cp) => Ok((ws.find_checkpoint(cp)?.root, comps.to_vec(), newer)),
            None => {
                let (_, real) = ws
                    .peek()
                    .resolve_full(comps, true)?
                    .ok_or_else(|| Error::NotFound(display(comps)))?;
                Ok((ws.live_root()?, real, newer))
            }
        }
    })?;
    Ok(Snapshot {
        store,
        root,
        start,
        newer,
    })
}

fn hidden(comps: &[Vec<u8>], start: usize) -> bool {
    comps[start..].iter().any(|c| c.starts_with(b"."))
}

pub fn grep(ctx: &Ctx, a: GrepArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let mut pat = if a.fixed_strings {
        regex::escape(&a.pattern)
    } else {
        a.pattern.clone()
    };
    if a.word_regexp {
        pat = format!(r"\b(?:{pat})\b");
    }
    let re = regex::bytes::RegexBuilder::new(&pat)
        .case_insensitive(a.ignore_case)
        .multi_line(true)
        .build()
        .map_err(|e| {
            Error::InvalidArgument(a.pattern.clone(), format!("not a valid regex: {e}"))
        })?;
    let Snapshot {
        mut store,
        root,
        start,
        ..
    } = snapshot(ctx, &comps, a.at.as_deref(), None)?;
    let paint = ctx.out.paint();
    let json = ctx.out.json;
    let mut matches: Vec<GrepMatch> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    let mut files_matched = 0usize;
    // Pages of matching lines, or of files with -l; past the page they are only counted.
    let mut pager = crate::page::Pager::new(
        a.cursor.as_deref(),
        crate::page::limit_for(a.limit, ctx.out.json),
    )?;
    let (mut searched, mut binary) = (0u64, 0u64);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut single = false;
    let found = store.read(|db| {
        walk(db, &root, &start, None, &mut |p, e, depth| {
            if !a.hidden && hidden(p, start.len()) {
                return Ok(Next::Skip);
            }
            if e.kind != Kind::File {
                return Ok(Next::Descend);
            }
            single = depth == 0;
            searched += 1;
            // A file with holes holds NUL bytes: binary, known from its extents without
            // reading it (a sparse terabyte is not read into memory).
            let ext = content::extents(db, e.hash.as_ref().unwrap(), e.size)?;
            if ext.allocated() < e.size {
                binary += 1;
                return Ok(Next::Descend);
            }
            let data = content::read_at(db, &ext, 0, e.size as usize)?;
            if is_binary(&data) {
                binary += 1;
                return Ok(Next::Descend);
            }
            let shown = display(p);
            let mut any = false;
            let mut on_page = false;
            for_each_matching_line(&re, &data, |line_no, line| {
                any = true;
                if a.files_with_matches {
                    return false;
                }
                if !pager.take() {
                    return true;
                }
                on_page = true;
                if json {
                    matches.push(GrepMatch {
                        path: shown.clone(),
                        line: line_no,
                        text: String::from_utf8_lossy(line).into_owned(),
                    });
                } else {
                    let mut s = String::new();
                    if !single {
                        s.push_str(&paint.path(&shown));
                        s.push(':');
                    }
                    if a.line_number {
                        s.push_str(&paint.line_no(&line_no.to_string()));
                        s.push(':');
                    }
                    s.push_str(&highlight(&re, line, paint));
                    let _ = writeln!(out, "{s}");
                }
                true
            });
            if any {
                files_matched += 1;
                if a.files_with_matches {
                    on_page = pager.take();
                    if on_page && !json {
                        let _ = writeln!(out, "{}", paint.path(&shown));
                    }
                }
                if on_page {
                    files.push(shown);
                }
            }
            Ok(Next::Descend)
        })
    })?;
    if !found {
        return Err(Error::NotFound(match &a.at {
            Some(cp) => format!("{} (at checkpoint {cp})", display(&comps)),
            None => display(&comps),
        }));
    }
    let _ = out.flush();
    drop(out);
    let no_match = files_matched == 0;
    more_notice(ctx, "grep", &pager);
    ctx.out.emit(
        &GrepReport {
            binary_files_skipped: binary,
            files_searched: searched,
            files,
            files_matched,
            matches,
            next_cursor: pager.next_cursor(),
            path: display(&start),
            pattern: a.pattern,
            total: pager.total(),
        },
        || {},
    );
    Ok(if no_match { 1 } else { 0 })
}

/// In text output, a page that stops before the end says so on stderr (stdout stays
/// the list, for pipes), with the cursor that continues it.
fn more_notice(ctx: &Ctx, cmd: &str, pager: &crate::page::Pager) {
    if let (false, Some(c)) = (ctx.out.json, pager.next_cursor()) {
        eprintln!(
            "avfs {cmd}: showed {} of {}; the rest: add --cursor {c}",
            pager.shown(),
            pager.total()
        );
    }
}

/// Calls `f(line_number, line)` for every line of `data` holding a match, in order, until
/// it returns false. The whole buffer is searched at once and only lines with a candidate
/// are looked at, so files without a match cost one regex scan; a match must lie within
/// one line (as in grep and ripgrep).
fn for_each_matching_line(
    re: &regex::bytes::Regex,
    data: &[u8],
    mut f: impl FnMut(u64, &[u8]) -> bool,
) {
    let mut pos = 0;
    let (mut counted, mut line_no) = (0usize, 1u64);
    while pos <= data.len() {
        let Some(m) = re.find_at(data, pos) else {
            break;
        };
        let at = m.start();
        if at == data.len() && (data.is_empty() || data.ends_with(b"\n")) {
            break;
        }
        let ls = data[..at]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let le = data[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |i| at + i);
        let line = &data[ls..le];
        if re.is_match(line) {
            line_no += data[counted..ls].iter().filter(|b| **b == b'\n').count() as u64;
            counted = ls;
            let mut text = line;
            if let Some(t) = text.strip_suffix(b"\r") {
                text = t;
            }
            if !f(line_no, text) {
                return;
            }
        }
        pos = le + 1;
    }
}

fn highlight(re: &regex::bytes::Regex, line: &[u8], paint: Paint) -> String {
    if !paint.on {
        return String::from_utf8_lossy(line).into_owned();
    }
    let mut s = String::new();
    let mut last = 0;
    for m in re.find_iter(line) {
        if m.start() == m.end() {
            continue;
        }
        s.push_str(&String::from_utf8_lossy(&line[last..m.start()]));
        s.push_str(&paint.matched(&String::from_utf8_lossy(m.as_bytes())));
        last = m.end();
    }
    s.push_str(&String::from_utf8_lossy(&line[last..]));
    s
}

/// `--size` as a predicate.
fn size_filter(s: &str) -> Result<impl Fn(u64) -> bool + use<>> {
    let (cmp, rest) = match s.as_bytes().first() {
        Some(b'+') => (1, &s[1..]),
        Some(b'-') => (-1, &s[1..]),
        _ => (0, s),
    };
    let bad = || {
        Error::InvalidArgument(
            s.into(),
            "expected a size like 100, +10k, -1M (units c, k, M, G, T)".into(),
        )
    };
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (num, unit) = rest.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit {
        "" | "c" => 1,
        "k" | "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(bad()),
    };
    let limit = n.checked_mul(mult).ok_or_else(bad)?;
    Ok(move |size: u64| match cmp {
        1 => size > limit,
        -1 => size < limit,
        _ => size == limit,
    })
}

fn has_xattr(e: &Entry, name: &[u8], value: Option<&[u8]>) -> bool {
    e.xattrs
        .iter()
        .any(|(n, v)| n == name && value.is_none_or(|want| v == want))
}

pub fn find(ctx: &Ctx, a: FindArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let mut globs = globset::GlobSetBuilder::new();
    for g in &a.name {
        globs.add(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| Error::InvalidArgument(g.clone(), format!("not a valid glob: {e}")))?,
        );
    }
    let globs = globs
        .build()
        .map_err(|e| Error::InvalidArgument(a.name.join(" "), e.to_string()))?;
    let sizes: Vec<_> = a
        .size
        .iter()
        .map(|s| size_filter(s))
        .collect::<Result<_>>()?;
    let kinds: Vec<Kind> = a.kind.iter().map(|k| k.kind()).collect();
    let tags: Vec<Vec<u8>> = a.tag.iter().map(|t| tag_attr(t)).collect::<Result<_>>()?;
    let metas: Vec<(Vec<u8>, Option<Vec<u8>>)> = a
        .meta
        .iter()
        .map(|m| parse_filter(m))
        .collect::<Result<_>>()?;
    let Snapshot {
        mut store,
        root,
        start,
        newer: newer_root,
    } = snapshot(ctx, &comps, a.at.as_deref(), a.newer.as_deref())?;
    let keep = |p: &[Vec<u8>], e: &Entry| -> bool {
        if !a.name.is_empty() {
            let name = p.last().map(|n| n.as_slice()).unwrap_or(b"/");
            if !globs.is_match(std::ffi::OsStr::from_bytes(name)) {
                return false;
            }
        }
        (kinds.is_empty() || kinds.contains(&e.kind))
            && sizes
                .iter()
                .all(|f| f(if e.kind == Kind::Dir { 0 } else { e.size }))
            && tags.iter().all(|t| has_xattr(e, t, None))
            && metas.iter().all(|(k, v)| has_xattr(e, k, v.as_deref()))
    };
    let found_entry = |p: &[Vec<u8>], e: &Entry| FoundEntry {
        path: display(p),
        kind: e.kind.name(),
        size: if e.kind == Kind::Dir { 0 } else { e.size },
        mode: format!("{:04o}", e.mode & 0o7777),
        mtime: rfc3339(e.mtime_ns),
        tags: tags_of(&e.xattrs),
        meta: meta_of(&e.xattrs),
    };
    let mut entries: Vec<FoundEntry> = Vec::new();
    let json = ctx.out.json;
    let mut pager =
        crate::page::Pager::new(a.cursor.as_deref(), crate::page::limit_for(a.limit, json))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut emit = |p: &[Vec<u8>], e: &Entry| {
        // Past the page, entries are only counted (`total`).
        if !pager.take() {
            return;
        }
        if json {
            entries.push(found_entry(p, e));
        } else {
            let _ = writeln!(out, "{}", display(p));
        }
    };
    store
        .read(|db| {
            match newer_root {
                // Only what changed since the checkpoint: a diff, O(changes).
                Some(old) => {
                    let changes = diff_roots(db, &old, &root)?;
                    let mut seen = HashSet::new();
                    for c in changes {
                        let Some(e) = &c.after else { continue };
                        if c.kind == ChangeKind::Deleted
                            || !c.comps.starts_with(&start)
                            || a.max_depth.is_some_and(|m| c.comps.len() - start.len() > m)
                            || !seen.insert(c.comps.clone())
                        {
                            continue;
                        }
                        if keep(&c.comps, e) {
                            emit(&c.comps, e);
                        }
                    }
                    Ok(true)
                }
                None => walk(db, &root, &start, a.max_depth, &mut |p, e, _| {
                    if keep(p, e) {
                        emit(p, e);
                    }
                    Ok(Next::Descend)
                }),
            }
        })
        .and_then(|found| {
            if found {
                Ok(())
            } else {
                Err(Error::NotFound(display(&comps)))
            }
        })?;
    let _ = out.flush();
    drop(out);
    let next_cursor = pager.next_cursor();
    more_notice(ctx, "find", &pager);
    ctx.out.emit(
        &FindReport {
            entries,
            next_cursor,
            path: display(&start),
            total: pager.total(),
        },
        || {},
    );
    Ok(0)
}

pub fn search(ctx: &Ctx, a: SearchArgs) -> Result<i32> {
    let shown = a.query.join(" ");
    let fts = if a.fts {
        shown.clone()
    } else {
        crate::search::plain_query(&shown)?
    };
    let under = a
        .path
        .as_deref()
        .map(parse)
        .transpose()?
        .unwrap_or_default();
    let (v, mut store) = ctx.open()?;
    let bar: std::cell::OnceCell<Option<indicatif::ProgressBar>> = std::cell::OnceCell::new();
    let progress = |n: u64| {
        if let Some(pb) = bar.get_or_init(|| ctx.out.progress(None, "indexing")) {
            pb.set_position(n);
        }
    };
    let update = store.write(|db| {
        let mut ws = Workspace::open(db, &v.workspace)?;
        crate::search::update(&mut ws, &progress)
    });
    if let Some(Some(pb)) = bar.get() {
        pb.finish_and_clear();
    }
    let update = update?;
    let ws_id = store.read(|db| Ok(Workspace::open(db, &v.workspace)?.info.id))?;
    let hits = store.read(|db| crate::search::query(db, ws_id, &fts, &shown, &under, a.limit))?;
    let paint = ctx.out.paint();
    let doc = SearchReport {
        fts_query: fts,
        index: update,
        query: shown,
        results: hits,
    };
    let hits = &doc.results;
    ctx.out.emit(&doc, || {
        for h in hits {
            let line = h
                .line
                .map(|l| format!(":{}", paint.line_no(&l.to_string())));
            println!(
                "{}{}  {}",
                paint.path(&h.path),
                line.unwrap_or_default(),
                highlight_terms(&h.snippet, &h.terms, paint)
            );
        }
    });
    Ok(0)
}

/// Colours the query words in a snippet (case-insensitively, ASCII letters only).
fn highlight_terms(s: &str, terms: &[String], paint: Paint) -> String {
    if !paint.on || terms.is_empty() {
        return s.to_string();
    }
    let alts: Vec<String> = terms.iter().map(|t| regex::escape(t)).collect();
    let Ok(re) = regex::RegexBuilder::new(&alts.join("|"))
        .case_insensitive(true)
        .build()
    else {
        return s.to_string();
    };
    re.replace_all(s, |c: &regex::Captures| paint.matched(&c[0]))
        .into_owned()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn tag(ctx: &Ctx, a: TagArgs, add: bool) -> Result<i32> {
    let comps = parse(&a.path)?;
    let shown = display(&comps);
    let attrs: Vec<Vec<u8>> = a.tags.iter().map(|t| tag_attr(t)).collect::<Result<_>>()?;
    let action = if add { "tag" } else { "untag" };
    let (changed, now) = ctx.mutate(action, json!({"path": shown, "tags": a.tags}), |ws| {
        let node = ws.resolve_existing(&comps, true)?;
        let have = ws.xattrs(node.ino)?;
        let mut changed = Vec::new();
        for (t, attr) in a.tags.iter().zip(&attrs) {
            let present = have.iter().any(|(n, _)| n == attr);
            if add && !present {
                ws.set_xattr(node.ino, attr, b"")?;
                changed.push(t.clone());
            } else if !add && present {
                ws.remove_xattr(node.ino, attr)?;
                changed.push(t.clone());
            }
        }
        Ok((changed, tags_of(&ws.xattrs(node.ino)?)))
    })?;
    let (added, removed) = if add {
        (Some(changed), None)
    } else {
        (None, Some(changed))
    };
    let doc = TagReport {
        added,
        path: shown.clone(),
        removed,
        tags: now.clone(),
    };
    ctx.out.emit(&doc, || {
        println!(
            "{shown}: {}",
            if now.is_empty() {
                "(no tags)".into()
            } else {
                now.join(" ")
            }
        );
    });
    Ok(0)
}

pub fn meta(ctx: &Ctx, a: MetaArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let shown = display(&comps);
    match (&a.key, &a.value, a.unset) {
        (None, _, _) => {
            let x = ctx.view(|ws| {
                let p = ws.peek();
                let node = p.resolve_existing(&comps, true)?;
                p.xattrs(&node)
            })?;
            let (tags, meta) = (tags_of(&x), meta_of(&x));
            ctx.out
                .emit(&json!({"path": shown, "tags": tags, "meta": meta}), || {
                    if !tags.is_empty() {
                        println!("tags: {}", tags.join(" "));
                    }
                    for (k, v) in &meta {
                        println!("{k}={v}");
                    }
                });
        }
        (Some(key), None, false) => {
            let attr = meta_attr(key)?;
            let value = ctx.view(|ws| {
                let p = ws.peek();
                let node = p.resolve_existing(&comps, true)?;
                Ok(p.xattrs(&node)?
                    .into_iter()
                    .find(|(n, _)| *n == attr)
                    .map(|(_, v)| v))
            })?;
            let value = value
                .ok_or_else(|| Error::NotFound(format!("{shown} has no metadata key {key}")))?;
            if ctx.out.json {
                ctx.out.emit(
                    &json!({"path": shown, "key": key, "value": lossy(&value)}),
                    || {},
                );
            } else {
                let mut o = std::io::stdout();
                let _ = o.write_all(&value);
                let _ = o.write_all(b"\n");
            }
        }
        (Some(key), Some(value), _) => {
            let attr = meta_attr(key)?;
            let bytes = value.as_bytes().to_vec();
            let detail = json!({"path": shown, "key": key, "value": lossy(&bytes)});
            ctx.mutate("meta.set", detail, |ws| {
                let node = ws.resolve_existing(&comps, true)?;
                ws.set_xattr(node.ino, &attr, &bytes)
            })?;
            ctx.out.emit(
                &json!({"path": shown, "key": key, "value": lossy(&bytes)}),
                || {},
            );
        }
        (Some(key), None, true) => {
            let attr = meta_attr(key)?;
            let removed = ctx.mutate("meta.unset", json!({"path": shown, "key": key}), |ws| {
                let node = ws.resolve_existing(&comps, true)?;
                ws.remove_xattr(node.ino, &attr)
            })?;
            ctx.out.emit(
                &json!({"path": shown, "key": key, "removed": removed}),
                || {},
            );
        }
    }
    Ok(0)
}
