//! The file reads: ls, cat, tree, stat. They open the vault read-only and read through
//! `Workspace::peek`, so they leave the vault file exactly as it was, and `ls` streams a
//! directory of any size, entry by entry, in text and in JSON.

use std::ffi::OsString;
use std::io::Write;

use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::Ctx;
use super::output::{ListStream, format_mode, human_size};
use crate::documents::files::{BriefEntry, FileContent, StatDoc};
use crate::error::{Error, Result};
use crate::names::escape;
use crate::util::rfc3339;
use crate::workspace::flush::entry_at;
use crate::workspace::path::{display, parse};
use crate::workspace::{HOLE, Hash, Kind, Node, Peek, content};

#[derive(Args, Debug)]
pub struct LsArgs {
    /// Long listing: mode, links, owner, size, time.
    #[arg(short = 'l')]
    long: bool,
    /// Show names that start with '.'.
    #[arg(short = 'a')]
    all: bool,
    #[arg(default_value = "/")]
    path: OsString,
    /// With --json: each entry's name, type and size only (and a symlink's target).
    #[arg(long)]
    brief: bool,
    /// Show at most N entries from `--cursor` on (default: 100 with --json, all
    /// otherwise); `total` and `next_cursor` say what is left.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue where a page ended: its `next_cursor`.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Args, Debug)]
pub struct CatArgs {
    path: OsString,
    /// Print the file as it was at this checkpoint.
    #[arg(long, value_name = "CHECKPOINT")]
    at: Option<String>,
}

#[derive(Args, Debug)]
pub struct TreeArgs {
    /// Descend at most N levels.
    #[arg(short = 'L', long = "level", value_name = "N")]
    level: Option<usize>,
    /// Show names that start with '.'.
    #[arg(short = 'a', long = "all")]
    all: bool,
    #[arg(default_value = "/")]
    path: OsString,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    path: OsString,
}

/// Lowercase hex, without a `format!` per byte (`ls` of a million files prints a million
/// content hashes).
fn hex(h: &Hash) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in h.0 {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn stat_json(p: &Peek, path: String, name: &[u8], n: &Node) -> Result<StatDoc> {
    Ok(StatDoc {
        path,
        name: escape(name),
        kind: n.kind().name(),
        mode: format!("{:04o}", n.mode()),
        size: n.size(),
        nlink: p.nlink(n)?,
        uid: n.uid(),
        gid: n.gid(),
        mtime: rfc3339(n.mtime_ns()),
        mtime_ns: n.mtime_ns(),
        ctime_ns: n.ctime_ns(),
        ino: n.ino(),
        target: n.target().map(escape),
        content_hash: if n.kind() == Kind::File {
            n.hash().map(|h| hex(&h))
        } else {
            None
        },
    })
}

fn long_line(s: &StatDoc) -> String {
    let st_mode = kind_of(s.kind).ifmt() | u32::from_str_radix(&s.mode, 8).unwrap_or(0);
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {}",
        format_mode(st_mode),
        s.nlink,
        s.uid,
        s.gid,
        s.size,
        &s.mtime[..19].replace('T', " "),
        s.name
    );
    if let Some(t) = &s.target {
        line.push_str(" -> ");
        line.push_str(t);
    }
    line
}

fn kind_of(name: &str) -> Kind {
    match name {
        "dir" => Kind::Dir,
        "symlink" => Kind::Symlink,
        "fifo" => Kind::Fifo,
        "socket" => Kind::Socket,
        "char_device" => Kind::CharDev,
        "block_device" => Kind::BlockDev,
        _ => Kind::File,
    }
}

type StdoutBuf = std::io::BufWriter<std::io::StdoutLock<'static>>;

pub fn ls(ctx: &Ctx, a: LsArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let shown = display(&comps);
    let mut list = ListStream::new(
        std::io::BufWriter::new(std::io::stdout().lock()),
        ctx.out.json,
        "entries",
    );
    // Entries past the page are only counted: the walk stays one pass, entry by entry,
    // and attributes are worked out for the page alone.
    let mut pager = crate::page::Pager::new(
        a.cursor.as_deref(),
        crate::page::limit_for(a.limit, ctx.out.json),
    )?;
    let r = ctx.view(|ws| {
        let p = ws.peek();
        let node = p.resolve_existing(&comps, true)?;
        let show = |s: StatDoc, list: &mut ListStream<StdoutBuf>| {
            list.item(&s, |w: &mut StdoutBuf| {
                if a.long {
                    writeln!(w, "{}", long_line(&s))
                } else if s.kind == "dir" {
                    writeln!(w, "{}/", s.name)
                } else {
                    writeln!(w, "{}", s.name)
                }
            })
        };
        let brief = |name: &[u8], n: &Node| BriefEntry {
            name: escape(name),
            size: n.size(),
            target: n.target().map(escape),
            kind: n.kind().name(),
        };
        if !node.is_dir() {
            if !pager.take() {
                return Ok(());
            }
            let name = comps.last().cloned().unwrap_or_default();
            if a.brief && ctx.out.json {
                return list.item(&brief(&name, &node), |_| Ok(()));
            }
            return show(stat_json(&p, shown.clone(), &name, &node)?, &mut list);
        }
        let mut path = comps.clone();
        let names_only = !a.long && !ctx.out.json;
        p.list(&node, &mut |name, n| {
            if !a.all && name.starts_with(b".") {
                return Ok(true);
            }
            if !pager.take() {
                return Ok(true);
            }
            if names_only {
                // Plain `ls` prints names only: no attributes to work out.
                let dir = if n.is_dir() { "/" } else { "" };
                list.item(&(), |w: &mut StdoutBuf| {
                    writeln!(w, "{}{dir}", escape(name))
                })?;
                return Ok(true);
            }
            if a.brief && ctx.out.json {
                list.item(&brief(name, &n), |_| Ok(()))?;
                return Ok(true);
            }
            path.push(name.to_vec());
            let s = stat_json(&p, display(&path), name, &n)?;
            path.pop();
            show(s, &mut list)?;
            Ok(true)
        })
    });
    // On an error part-way, `total` is what was counted before it.
    let tail = [
        ("next_cursor", json!(pager.next_cursor())),
        ("path", json!(shown)),
        ("total", json!(pager.total())),
    ];
    match r {
        Ok(()) => {
            list.finish(&tail)?;
            if let (false, Some(c)) = (ctx.out.json, pager.next_cursor()) {
                eprintln!(
                    "avfs ls: showed {} of {}; the rest: add --cursor {c}",
                    pager.shown(),
                    pager.total()
                );
            }
            Ok(0)
        }
        // An error after entries went out still ends in one JSON document.
        Err(e) => list.fail(e, &tail),
    }
}

/// The largest file `cat --json` puts into its document; larger files stream as bytes.
const CAT_JSON_MAX: u64 = 64 << 20;

pub fn cat(ctx: &Ctx, a: CatArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let json = ctx.out.json;
    let not_a_file = |kind: Kind| match kind {
        Kind::Dir => Error::IsADirectory(display(&comps)),
        _ => Error::InvalidArgument(
            display(&comps),
            format!("is a {}, not a regular file", kind.name()),
        ),
    };
    let data = ctx.view(|ws| {
        let (hash, size) = match &a.at {
            Some(cp) => {
                let cp = ws.find_checkpoint(cp)?;
                let e = entry_at(ws.db, &cp.root, &comps)?.ok_or_else(|| {
                    Error::NotFound(format!("{} (at checkpoint {})", display(&comps), cp.name))
                })?;
                if e.kind != Kind::File {
                    return Err(not_a_file(e.kind));
                }
                (e.hash.unwrap_or(HOLE), e.size)
            }
            None => {
                let node = ws.peek().resolve_existing(&comps, true)?;
                if node.kind() != Kind::File {
                    return Err(not_a_file(node.kind()));
                }
                (node.hash().unwrap_or(HOLE), node.size())
            }
        };
        if json {
            if size > CAT_JSON_MAX {
                return Err(Error::InvalidArgument(
                    display(&comps),
                    format!(
                        "{size} bytes is more than --json prints ({CAT_JSON_MAX}); run `avfs cat` without --json, or `avfs export`"
                    ),
                ));
            }
            return content::read_all(ws.db, &hash, size);
        }
        // Streamed one block at a time: memory stays small whatever the size.
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        content::copy_to(ws.db, &hash, size, &mut out).map_err(|e| match e {
            Error::Host { message, .. } => Error::Host {
                what: "stdout".into(),
                message,
            },
            other => other,
        })?;
        out.flush().map_err(|e| Error::host("stdout", e))?;
        Ok(vec![])
    })?;
    if json {
        ctx.out
            .emit(&FileContent::of(display(&comps), &data), || {});
    }
    Ok(0)
}

#[derive(Serialize)]
struct TreeNode {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<TreeNode>>,
}

/// A directory of the tree being built: its node and name, the children still to visit
/// (last first) and the ones done.
struct Pending {
    name: String,
    node: Node,
    depth: usize,
    todo: Vec<(String, Node)>,
    done: Vec<TreeNode>,
}

/// The tree below `node`, built with an explicit stack so that a chain of any depth costs
/// no call stack (a run can leave a tree deeper than PATH_MAX).
fn tree_of(p: &Peek, node: Node, name: String, max: Option<usize>, all: bool) -> Result<TreeNode> {
    let open = |node: Node, name: String, depth: usize| -> Result<Pending> {
        let mut todo = Vec::new();
        p.list(&node, &mut |n, c| {
            if all || !n.starts_with(b".") {
                todo.push((escape(n), c));
            }
            Ok(true)
        })?;
        todo.reverse();
        Ok(Pending {
            name,
            node,
            depth,
            todo,
            done: Vec::new(),
        })
    };
    let expands = |node: &Node, depth: usize| node.is_dir() && max.is_none_or(|m| depth < m);
    let leaf = |node: &Node, name: String| TreeNode {
        name,
        kind: node.kind().name(),
        size: node.size(),
        children: None,
    };
    if !expands(&node, 0) {
        return Ok(leaf(&node, name));
    }
    let mut stack = vec![open(node, name, 0)?];
    loop {
        let top = stack
            .last_mut()
            .expect("the root stays until it is returned");
        if let Some((n, c)) = top.todo.pop() {
            let depth = top.depth + 1;
            if expands(&c, depth) {
                stack.push(open(c, n, depth)?);
            } else {
                top.done.push(leaf(&c, n));
            }
            continue;
        }
        let dir = stack.pop().expect("checked above");
        let built = TreeNode {
            kind: dir.node.kind().name(),
            size: dir.node.size(),
            name: dir.name,
            children: Some(dir.done),
        };
        match stack.last_mut() {
            Some(parent) => parent.done.push(built),
            None => return Ok(built),
        }
    }
}

/// Prints the children of `t` as `tree` does, with an explicit stack (see `tree_of`).
fn print_tree(t: &TreeNode, counts: &mut (usize, usize)) {
    // (the children left to print, the prefix of their lines)
    let mut stack: Vec<(std::slice::Iter<'_, TreeNode>, String)> = Vec::new();
    if let Some(children) = &t.children {
        stack.push((children.iter(), String::new()));
    }
    while let Some((iter, prefix)) = stack.last_mut() {
        let Some(c) = iter.next() else {
            stack.pop();
            continue;
        };
        let last = iter.len() == 0;
        let suffix = if c.kind == "dir" { "/" } else { "" };
        println!(
            "{prefix}{}{}{suffix}",
            if last { "└── " } else { "├── " },
            c.name
        );
        if c.kind == "dir" {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        if let Some(children) = &c.children {
            let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
            stack.push((children.iter(), deeper));
        }
    }
}

pub fn tree(ctx: &Ctx, a: TreeArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let t = ctx.view(|ws| {
        let p = ws.peek();
        let node = p.resolve_existing(&comps, true)?;
        tree_of(&p, node, display(&comps), a.level, a.all)
    })?;
    ctx.out.emit(&t, || {
        println!("{}", t.name);
        let mut counts = (0, 0);
        print_tree(&t, &mut counts);
        println!("\n{} directories, {} files", counts.0, counts.1);
    });
    Ok(0)
}

pub fn stat(ctx: &Ctx, a: StatArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let s = ctx.view(|ws| {
        let p = ws.peek();
        let node = p.resolve_existing(&comps, false)?;
        stat_json(
            &p,
            display(&comps),
            comps.last().map(|c| c.as_slice()).unwrap_or(b"/"),
            &node,
        )
    })?;
    ctx.out.emit(&s, || {
        println!("  Path: {}", s.path);
        println!(
            "  Type: {}{}",
            s.kind,
            s.target
                .as_ref()
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default()
        );
        println!("  Size: {} ({})", s.size, human_size(s.size));
        println!(
            "  Mode: {} ({})",
            s.mode,
            format_mode(kind_of(s.kind).ifmt() | u32::from_str_radix(&s.mode, 8).unwrap_or(0))
        );
        println!(
            " Links: {}   Inode: {}   Uid: {}   Gid: {}",
            s.nlink,
            s.ino.map_or("-".to_string(), |i| i.to_string()),
            s.uid,
            s.gid
        );
        println!("Modify: {}", s.mtime);
        if let Some(h) = &s.content_hash {
            println!("  Hash: {h}");
        }
    });
    Ok(0)
}
