//! File commands that change the workspace: write, mkdir, rm, mv, cp, ln, chmod, import;
//! and export. The reads (ls, cat, tree, stat) are in `view`.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::Ctx;
use super::output::human_size;
use crate::documents::files::FileWritten;
use crate::error::{Error, Result};
use crate::workspace::content;
use crate::workspace::path::{components, display, parse};
use crate::workspace::{Inode, Kind, NewNode, RenameFlags, SetAttr, Workspace};

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
    /// Also copy the workspace's ignored files (.venv, node_modules, target/: kept
    /// outside the vault) beside the tracked ones.
    #[arg(long)]
    include_ignored: bool,
}

fn lossy(p: &OsString) -> String {
    crate::names::escape(p.as_bytes())
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
                    let old = node.hash.unwrap_or(crate::workspace::HOLE);
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
    ctx.out.emit(&FileWritten { path: shown, size }, || {});
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
    let ignored = match a.include_ignored {
        true => {
            let (_, v) = ctx.existing()?;
            Some(crate::engine::ignored::ignored_dir(
                &ctx.home,
                &v.path,
                &v.workspace,
            ))
        }
        false => None,
    };
    let stats = ctx.view_loading(|ws| {
        let flags = (a.force, a.keep_setuid);
        crate::hostio::export(ws, &src, &a.host_dir, flags, ignored.as_deref(), &|n| {
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
