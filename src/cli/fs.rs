//! File commands: ls, cat, write, mkdir, rm, mv, cp, tree, stat, ln, chmod, import, export.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::Ctx;
use super::output::{format_mode, human_size};
use crate::error::{Error, Result};
use crate::store::content;
use crate::store::objects::Kind;
use crate::util::rfc3339;
use crate::workspace::flush::entry_at;
use crate::workspace::path::{components, display, parse};
use crate::workspace::{Inode, NewNode, RenameFlags, SetAttr, Workspace};

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
}

#[derive(Args, Debug)]
pub struct CatArgs {
    path: OsString,
    /// Print the file as it was at this checkpoint.
    #[arg(long, value_name = "CHECKPOINT")]
    at: Option<String>,
}

#[derive(Args, Debug)]
pub struct WriteArgs {
    path: OsString,
    /// The content; read from stdin when absent.
    content: Option<OsString>,
    /// Append instead of replacing.
    #[arg(long, short = 'a')]
    append: bool,
    /// Create missing parent directories.
    #[arg(long, short = 'p')]
    parents: bool,
}

#[derive(Args, Debug)]
pub struct MkdirArgs {
    /// Create parents as needed; no error if it exists.
    #[arg(short = 'p', long)]
    parents: bool,
    #[arg(required = true)]
    paths: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short = 'r', short_alias = 'R', long)]
    recursive: bool,
    /// Ignore missing paths.
    #[arg(short = 'f', long)]
    force: bool,
    #[arg(required = true)]
    paths: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct MvArgs {
    src: OsString,
    dst: OsString,
}

#[derive(Args, Debug)]
pub struct CpArgs {
    /// Copy directories recursively.
    #[arg(short = 'r', short_alias = 'R', long)]
    recursive: bool,
    src: OsString,
    dst: OsString,
}

#[derive(Args, Debug)]
pub struct TreeArgs {
    /// Descend at most N levels.
    #[arg(short = 'L', value_name = "N")]
    level: Option<usize>,
    /// Show names that start with '.'.
    #[arg(short = 'a')]
    all: bool,
    #[arg(default_value = "/")]
    path: OsString,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    path: OsString,
}

#[derive(Args, Debug)]
pub struct LnArgs {
    /// Make a symbolic link (the target is stored as given).
    #[arg(short = 's')]
    symbolic: bool,
    target: OsString,
    link: OsString,
}

#[derive(Args, Debug)]
pub struct ChmodArgs {
    mode: String,
    #[arg(required = true)]
    paths: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    host_dir: PathBuf,
    #[arg(default_value = "/")]
    vault_dir: OsString,
    /// Keep setuid/setgid bits (dropped by default).
    #[arg(long)]
    keep_setuid: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    vault_dir: OsString,
    host_dir: PathBuf,
    /// Write into an existing, non-empty host directory.
    #[arg(long)]
    force: bool,
    /// Keep setuid/setgid bits (dropped by default).
    #[arg(long)]
    keep_setuid: bool,
}

fn lossy(p: &OsString) -> String {
    p.to_string_lossy().into_owned()
}

/// One file's attributes as shown by `stat` and `ls -l --json`.
#[derive(Serialize, Debug)]
pub struct StatJson {
    pub path: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub mode: String,
    pub size: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: String,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

fn stat_json(path: String, name: &[u8], i: &Inode) -> StatJson {
    StatJson {
        path,
        name: String::from_utf8_lossy(name).into_owned(),
        kind: i.kind.name(),
        mode: format!("{:04o}", i.mode),
        size: i.size,
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        mtime: rfc3339(i.mtime_ns),
        mtime_ns: i.mtime_ns,
        ctime_ns: i.ctime_ns,
        ino: i.ino,
        target: i
            .target
            .as_ref()
            .map(|t| String::from_utf8_lossy(t).into_owned()),
        content_hash: if i.kind == Kind::File {
            i.hash.map(|h| h.to_hex())
        } else {
            None
        },
    }
}

fn long_line(s: &StatJson) -> String {
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

pub fn ls(ctx: &Ctx, a: LsArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let shown = display(&comps);
    let entries = ctx.view(|ws| {
        let node = ws.resolve_existing(&comps, true)?;
        if node.kind != Kind::Dir {
            let name = comps.last().cloned().unwrap_or_default();
            return Ok(vec![stat_json(shown.clone(), &name, &node)]);
        }
        let mut out = Vec::new();
        for (name, i) in ws.readdir(&node)? {
            if !a.all && name.starts_with(b".") {
                continue;
            }
            let mut p = comps.clone();
            p.push(name.clone());
            out.push(stat_json(display(&p), &name, &i));
        }
        Ok(out)
    })?;
    ctx.out
        .emit(&json!({"path": shown, "entries": entries}), || {
            for e in &entries {
                if a.long {
                    println!("{}", long_line(e));
                } else if e.kind == "dir" {
                    println!("{}/", e.name);
                } else {
                    println!("{}", e.name);
                }
            }
        });
    Ok(0)
}

/// The largest file `cat --json` puts into its document; larger files stream as bytes.
const CAT_JSON_MAX: u64 = 64 << 20;

pub fn cat(ctx: &Ctx, a: CatArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let json = ctx.out.json;
    let data = ctx.view(|ws| {
        let (hash, size) = match &a.at {
            Some(cp) => {
                let cp = ws.find_checkpoint(cp)?;
                let e = entry_at(ws.db, &cp.root, &comps)?.ok_or_else(|| {
                    Error::NotFound(format!("{} (at checkpoint {})", display(&comps), cp.name))
                })?;
                match e.kind {
                    Kind::File => (e.hash.unwrap_or(crate::store::objects::HOLE), e.size),
                    Kind::Dir => return Err(Error::IsADirectory(display(&comps))),
                    _ => {
                        return Err(Error::InvalidArgument(
                            display(&comps),
                            format!("is a {}, not a file", e.kind.name()),
                        ));
                    }
                }
            }
            None => {
                let node = ws.resolve_existing(&comps, true)?;
                match node.kind {
                    Kind::File => (node.hash.unwrap_or(crate::store::objects::HOLE), node.size),
                    Kind::Dir => return Err(Error::IsADirectory(display(&comps))),
                    _ => {
                        return Err(Error::InvalidArgument(
                            display(&comps),
                            "not a regular file".into(),
                        ));
                    }
                }
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
        let v = match std::str::from_utf8(&data) {
            Ok(s) => {
                json!({"path": display(&comps), "size": data.len(), "encoding": "utf-8", "content": s})
            }
            Err(_) => json!({"path": display(&comps), "size": data.len(), "encoding": "hex",
                "content": data.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
        };
        ctx.out.emit(&v, || {});
    }
    Ok(0)
}

/// Walks to the parent directory of `comps`, creating missing directories when asked.
fn parent_dir(ws: &Workspace, comps: &[Vec<u8>], create: bool) -> Result<(Inode, Vec<u8>)> {
    if !create {
        return ws.resolve_parent(comps);
    }
    let Some((name, parents)) = comps.split_last() else {
        return ws.resolve_parent(comps);
    };
    let dir = mkdir_p(ws, parents)?;
    Ok((dir, name.clone()))
}

fn mkdir_p(ws: &Workspace, comps: &[Vec<u8>]) -> Result<Inode> {
    let mut dir = ws.get(crate::workspace::ROOT_INO)?;
    for (n, c) in comps.iter().enumerate() {
        dir = match ws.resolve(&comps[..=n], true)? {
            Some(d) if d.kind == Kind::Dir => d,
            Some(_) => return Err(Error::NotADirectory(display(&comps[..=n]))),
            None => ws.create(&dir, c, NewNode::new(Kind::Dir, 0o755))?,
        };
    }
    Ok(dir)
}

pub fn write(ctx: &Ctx, a: WriteArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let data = match &a.content {
        Some(c) => c.as_bytes().to_vec(),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Error::host("stdin", e))?;
            buf
        }
    };
    let shown = display(&comps);
    let detail = json!({"path": shown, "bytes": data.len(), "append": a.append});
    let size = ctx.mutate("write", detail, |ws| {
        let existing = match ws.resolve(&comps, true) {
            Err(Error::NotFound(_)) if a.parents => None,
            other => other?,
        };
        match existing {
            Some(node) if node.kind == Kind::Dir => Err(Error::IsADirectory(shown.clone())),
            Some(node) if node.kind != Kind::File => Err(Error::InvalidArgument(
                shown.clone(),
                format!("is a {}", node.kind.name()),
            )),
            Some(node) => {
                let (hash, size) = if a.append {
                    // Only the last block is read again, however large the file.
                    let old = node.hash.unwrap_or(crate::store::objects::HOLE);
                    let mut p = content::Patch::new(ws.db, &old, node.size)?;
                    p.write(ws.db, node.size, &data)?;
                    p.commit(ws.db)?
                } else {
                    content::write_bytes(ws.db, &data)?
                };
                ws.set_content(node.ino, hash, size)?;
                Ok(size as usize)
            }
            None => {
                let (dir, name) = parent_dir(ws, &comps, a.parents)?;
                let hash = content::write_bytes(ws.db, &data)?.0;
                let node = NewNode {
                    content: Some((hash, data.len() as u64)),
                    ..NewNode::new(Kind::File, 0o644)
                };
                ws.create(&dir, &name, node)?;
                Ok(data.len())
            }
        }
    })?;
    ctx.out.emit(&json!({"path": shown, "size": size}), || {});
    Ok(0)
}

pub fn mkdir(ctx: &Ctx, a: MkdirArgs) -> Result<i32> {
    let all: Vec<Vec<Vec<u8>>> = a.paths.iter().map(|p| parse(p)).collect::<Result<_>>()?;
    let shown: Vec<String> = all.iter().map(|c| display(c)).collect();
    ctx.mutate(
        "mkdir",
        json!({"paths": shown, "parents": a.parents}),
        |ws| {
            for comps in &all {
                if a.parents {
                    mkdir_p(ws, comps)?;
                } else {
                    let (dir, name) = ws.resolve_parent(comps)?;
                    ws.create(&dir, &name, NewNode::new(Kind::Dir, 0o755))?;
                }
            }
            Ok(())
        },
    )?;
    ctx.out.emit(&json!({"created": shown}), || {});
    Ok(0)
}

pub fn rm(ctx: &Ctx, a: RmArgs) -> Result<i32> {
    let all: Vec<Vec<Vec<u8>>> = a.paths.iter().map(|p| parse(p)).collect::<Result<_>>()?;
    let shown: Vec<String> = all.iter().map(|c| display(c)).collect();
    let removed = ctx.mutate(
        "rm",
        json!({"paths": shown, "recursive": a.recursive}),
        |ws| {
            let mut removed = Vec::new();
            for comps in &all {
                if comps.is_empty() {
                    return Err(Error::Refused(
                        "refusing to remove the workspace root '/'".into(),
                    ));
                }
                let (dir, name) = ws.resolve_parent(comps)?;
                match ws.lookup(&dir, &name)? {
                    None if a.force => continue,
                    None => return Err(Error::NotFound(display(comps))),
                    Some(n) if n.kind == Kind::Dir && !a.recursive => {
                        return Err(Error::IsADirectory(format!(
                            "{} (use -r to remove a directory)",
                            display(comps)
                        )));
                    }
                    Some(_) => ws.remove_tree(&dir, &name)?,
                }
                removed.push(display(comps));
            }
            Ok(removed)
        },
    )?;
    ctx.out.emit(&json!({"removed": removed}), || {});
    Ok(0)
}

/// `DST` naming an existing directory means "inside it, under the source's name".
fn destination(ws: &Workspace, src: &[Vec<u8>], dst: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    if let Some(d) = ws.resolve(dst, true)?
        && d.kind == Kind::Dir
    {
        let mut p = dst.to_vec();
        p.push(
            src.last()
                .cloned()
                .ok_or_else(|| Error::Refused("cannot move or copy '/'".into()))?,
        );
        return Ok(p);
    }
    Ok(dst.to_vec())
}

pub fn mv(ctx: &Ctx, a: MvArgs) -> Result<i32> {
    let (src, dst) = (parse(&a.src)?, parse(&a.dst)?);
    let detail = json!({"from": display(&src), "to": display(&dst)});
    let to = ctx.mutate("mv", detail, |ws| {
        let dst = destination(ws, &src, &dst)?;
        let (sdir, sname) = ws.resolve_parent(&src)?;
        let (ddir, dname) = ws.resolve_parent(&dst)?;
        ws.rename(&sdir, &sname, &ddir, &dname, RenameFlags::default())?;
        Ok(display(&dst))
    })?;
    ctx.out
        .emit(&json!({"from": display(&src), "to": to}), || {});
    Ok(0)
}

pub fn cp(ctx: &Ctx, a: CpArgs) -> Result<i32> {
    let (src, dst) = (parse(&a.src)?, parse(&a.dst)?);
    let detail = json!({"from": display(&src), "to": display(&dst), "recursive": a.recursive});
    let to = ctx.mutate("cp", detail, |ws| {
        let node = ws.resolve_existing(&src, true)?;
        if node.kind == Kind::Dir && !a.recursive {
            return Err(Error::IsADirectory(format!(
                "{} (use -r to copy a directory)",
                display(&src)
            )));
        }
        let dst = destination(ws, &src, &dst)?;
        if dst.starts_with(&src) && node.kind == Kind::Dir {
            return Err(Error::InvalidArgument(
                display(&dst),
                "cannot copy a directory into itself".into(),
            ));
        }
        let entry = ws.entry_for(b"x", &node)?;
        let (ddir, dname) = ws.resolve_parent(&dst)?;
        if let Some(existing) = ws.lookup(&ddir, &dname)? {
            if existing.kind == Kind::Dir {
                return Err(Error::IsADirectory(display(&dst)));
            }
            ws.unlink(&ddir, &dname)?;
        }
        let ddir = ws.get(ddir.ino)?;
        ws.graft(&ddir, &dname, &entry)?;
        Ok(display(&dst))
    })?;
    ctx.out
        .emit(&json!({"from": display(&src), "to": to}), || {});
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

fn tree_of(
    ws: &Workspace,
    node: &Inode,
    name: &[u8],
    depth: usize,
    max: Option<usize>,
    all: bool,
) -> Result<TreeNode> {
    let children = if node.kind == Kind::Dir && max.is_none_or(|m| depth < m) {
        let mut v = Vec::new();
        for (n, c) in ws.readdir(node)? {
            if !all && n.starts_with(b".") {
                continue;
            }
            v.push(tree_of(ws, &c, &n, depth + 1, max, all)?);
        }
        Some(v)
    } else {
        None
    };
    Ok(TreeNode {
        name: String::from_utf8_lossy(name).into_owned(),
        kind: node.kind.name(),
        size: node.size,
        children,
    })
}

fn print_tree(t: &TreeNode, prefix: &str, counts: &mut (usize, usize)) {
    let Some(children) = &t.children else { return };
    for (i, c) in children.iter().enumerate() {
        let last = i + 1 == children.len();
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
        print_tree(
            c,
            &format!("{prefix}{}", if last { "    " } else { "│   " }),
            counts,
        );
    }
}

pub fn tree(ctx: &Ctx, a: TreeArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let t = ctx.view(|ws| {
        let node = ws.resolve_existing(&comps, true)?;
        tree_of(ws, &node, display(&comps).as_bytes(), 0, a.level, a.all)
    })?;
    ctx.out.emit(&t, || {
        println!("{}", t.name);
        let mut counts = (0, 0);
        print_tree(&t, "", &mut counts);
        println!("\n{} directories, {} files", counts.0, counts.1);
    });
    Ok(0)
}

pub fn stat(ctx: &Ctx, a: StatArgs) -> Result<i32> {
    let comps = parse(&a.path)?;
    let s = ctx.view(|ws| {
        let node = ws.resolve_existing(&comps, false)?;
        Ok(stat_json(
            display(&comps),
            comps.last().map(|c| c.as_slice()).unwrap_or(b"/"),
            &node,
        ))
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
            s.nlink, s.ino, s.uid, s.gid
        );
        println!("Modify: {}", s.mtime);
        if let Some(h) = &s.content_hash {
            println!("  Hash: {h}");
        }
    });
    Ok(0)
}

pub fn ln(ctx: &Ctx, a: LnArgs) -> Result<i32> {
    let link = parse(&a.link)?;
    let detail =
        json!({"target": lossy(&a.target), "link": display(&link), "symbolic": a.symbolic});
    let link = ctx.mutate("ln", detail, |ws| {
        let link = destination(ws, &components(a.target.as_bytes())?, &link)?;
        let (dir, name) = ws.resolve_parent(&link)?;
        if a.symbolic {
            let node = NewNode {
                target: Some(a.target.as_bytes().to_vec()),
                ..NewNode::new(Kind::Symlink, 0o777)
            };
            ws.create(&dir, &name, node)?;
        } else {
            let target = ws.resolve_existing(&parse(&a.target)?, false)?;
            ws.link(target.ino, &dir, &name)?;
        }
        Ok(link)
    })?;
    ctx.out.emit(
        &json!({"link": display(&link), "target": lossy(&a.target), "symbolic": a.symbolic}),
        || {},
    );
    Ok(0)
}

/// Applies `spec` (octal, or symbolic like `u+x,go-w,a=r`) to `mode`.
pub fn apply_mode(spec: &str, mode: u32, is_dir: bool) -> Result<u32> {
    if !spec.is_empty() && spec.chars().all(|c| c.is_digit(8)) {
        return u32::from_str_radix(spec, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| Error::InvalidArgument(spec.into(), "mode out of range".into()));
    }
    let bad = || {
        Error::InvalidArgument(
            spec.into(),
            "expected an octal mode (755) or symbolic one (u+x,go-w)".into(),
        )
    };
    let mut m = mode;
    for clause in spec.split(',') {
        let op_at = clause.find(['+', '-', '=']).ok_or_else(bad)?;
        let (who, rest) = clause.split_at(op_at);
        let mut mask = 0u32;
        for w in who.chars() {
            mask |= match w {
                'u' => 0o4700,
                'g' => 0o2070,
                'o' => 0o1007,
                'a' => 0o7777,
                _ => return Err(bad()),
            };
        }
        if who.is_empty() {
            mask = 0o7777;
        }
        let op = rest.chars().next().ok_or_else(bad)?;
        let mut bits = 0u32;
        for p in rest[1..].chars() {
            bits |= match p {
                'r' => 0o444,
                'w' => 0o222,
                'x' => 0o111,
                'X' if is_dir || m & 0o111 != 0 => 0o111,
                'X' => 0,
                's' => 0o6000,
                't' => 0o1000,
                _ => return Err(bad()),
            };
        }
        let bits = bits & mask;
        m = match op {
            '+' => m | bits,
            '-' => m & !bits,
            _ => (m & !(mask & 0o777)) | bits,
        };
    }
    Ok(m & 0o7777)
}

pub fn chmod(ctx: &Ctx, a: ChmodArgs) -> Result<i32> {
    let all: Vec<Vec<Vec<u8>>> = a.paths.iter().map(|p| parse(p)).collect::<Result<_>>()?;
    let shown: Vec<String> = all.iter().map(|c| display(c)).collect();
    apply_mode(&a.mode, 0, false)?;
    let modes = ctx.mutate("chmod", json!({"mode": a.mode, "paths": shown}), |ws| {
        let mut out = Vec::new();
        for comps in &all {
            let node = ws.resolve_existing(comps, true)?;
            let mode = apply_mode(&a.mode, node.mode, node.kind == Kind::Dir)?;
            ws.setattr(
                node.ino,
                &SetAttr {
                    mode: Some(mode),
                    ..Default::default()
                },
            )?;
            out.push(json!({"path": display(comps), "mode": format!("{mode:04o}")}));
        }
        Ok(out)
    })?;
    ctx.out.emit(&json!({"changed": modes}), || {});
    Ok(0)
}

fn progress_bar(ctx: &Ctx, what: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if ctx.out.json || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg} {pos} files ({per_sec}, {elapsed})",
        )
        .unwrap(),
    );
    pb.set_message(what.to_string());
    Some(pb)
}

pub fn import(ctx: &Ctx, a: ImportArgs) -> Result<i32> {
    let dest = parse(&a.vault_dir)?;
    let meta = std::fs::metadata(&a.host_dir).map_err(|e| Error::host(a.host_dir.display(), e))?;
    if !meta.is_dir() {
        return Err(Error::NotADirectory(a.host_dir.display().to_string()));
    }
    let pb = progress_bar(ctx, "importing");
    let detail = json!({"from": a.host_dir.display().to_string(), "to": display(&dest)});
    let stats = ctx.mutate("import", detail, |ws| {
        crate::hostio::import(ws, &a.host_dir, &dest, a.keep_setuid, &|n| {
            if let Some(pb) = &pb {
                pb.set_position(n)
            }
        })
    })?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    ctx.out.emit(
        &json!({"from": a.host_dir.display().to_string(), "to": display(&dest), "stats": stats}),
        || {
            println!(
                "imported {} files, {} dirs, {} symlinks ({}) into {}",
                stats.files,
                stats.dirs,
                stats.symlinks,
                human_size(stats.bytes),
                display(&dest)
            );
            if stats.setuid_dropped > 0 {
                println!(
                    "dropped the setuid/setgid bits of {} entries (--keep-setuid keeps them)",
                    stats.setuid_dropped
                );
            }
        },
    );
    Ok(0)
}

pub fn export(ctx: &Ctx, a: ExportArgs) -> Result<i32> {
    let src = parse(&a.vault_dir)?;
    let pb = progress_bar(ctx, "exporting");
    let stats = ctx.view(|ws| {
        crate::hostio::export(ws, &src, &a.host_dir, a.force, a.keep_setuid, &|n| {
            if let Some(pb) = &pb {
                pb.set_position(n)
            }
        })
    })?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    ctx.out.emit(
        &json!({"from": display(&src), "to": a.host_dir.display().to_string(), "stats": stats}),
        || {
            println!(
                "exported {} files, {} dirs, {} symlinks ({}) to {}",
                stats.files,
                stats.dirs,
                stats.symlinks,
                human_size(stats.bytes),
                a.host_dir.display()
            );
            if stats.setuid_dropped > 0 {
                println!(
                    "dropped the setuid/setgid bits of {} entries (--keep-setuid keeps them)",
                    stats.setuid_dropped
                );
            }
        },
    );
    Ok(0)
}
