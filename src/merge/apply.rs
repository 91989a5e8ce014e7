//! Making a merge plan's changes in the target's live layer.

use super::*;

/// The live entry at `comps`, read literally (no symlink followed).
fn literal(ws: &Workspace, comps: &[Vec<u8>]) -> Result<Inode> {
    let mut cur = ws.get(ROOT_INO)?;
    for (i, c) in comps.iter().enumerate() {
        if cur.kind != Kind::Dir {
            return Err(Error::NotADirectory(display(&comps[..i])));
        }
        cur = ws
            .lookup(&cur, c)?
            .ok_or_else(|| Error::NotFound(display(&comps[..=i])))?;
    }
    Ok(cur)
}

/// The live directory at `comps`, creating missing ones like the fork has them.
fn ensure_dir(ws: &Workspace, comps: &[Vec<u8>], fork_root: &Hash) -> Result<Inode> {
    let mut cur = ws.get(ROOT_INO)?;
    for (i, c) in comps.iter().enumerate() {
        cur = match ws.lookup(&cur, c)? {
            Some(d) if d.kind == Kind::Dir => d,
            Some(_) => return Err(Error::NotADirectory(display(&comps[..=i]))),
            None => {
                let fe = entry_at(ws.db, fork_root, &comps[..=i])?.filter(|e| e.kind == Kind::Dir);
                let mut n = NewNode::new(Kind::Dir, fe.as_ref().map_or(0o755, |e| e.mode));
                if let Some(e) = &fe {
                    (n.uid, n.gid, n.mtime_ns) = (e.uid, e.gid, Some(e.mtime_ns));
                }
                let d = ws.create(&cur, c, n)?;
                for (xn, xv) in fe.iter().flat_map(|e| e.xattrs.iter()) {
                    ws.set_xattr(d.ino, xn, xv)?;
                }
                ws.get(d.ino)?
            }
        };
    }
    Ok(cur)
}

/// Makes the plan's changes in the target's live layer.
pub fn apply(ws: &Workspace, plan: &Plan, fork_root: &Hash) -> Result<()> {
    for a in &plan.actions {
        match a {
            Action::Take { comps, entry } => {
                let Some((name, parents)) = comps.split_last() else {
                    return Err(Error::Internal("merge cannot replace the root".into()));
                };
                let mut dir = ensure_dir(ws, parents, fork_root)?;
                if ws.lookup(&dir, name)?.is_some() {
                    ws.remove_tree(&dir, name)?;
                    dir = ws.get(dir.ino)?;
                }
                if let Some(e) = entry {
                    ws.graft(&dir, name, e)?;
                }
            }
            Action::Update {
                comps,
                content,
                owner,
                xattrs,
            } => {
                let node = literal(ws, comps)?;
                if let Some((hash, size)) = content {
                    ws.set_content(node.ino, *hash, *size)?;
                }
                if let Some((mode, uid, gid)) = owner {
                    ws.setattr(
                        node.ino,
                        &SetAttr {
                            mode: Some(*mode),
                            uid: Some(*uid),
                            gid: Some(*gid),
                            ..Default::default()
                        },
                    )?;
                }
                for (n, v) in xattrs {
                    match v {
                        Some(v) => ws.set_xattr(node.ino, n, v)?,
                        None => {
                            ws.remove_xattr(node.ino, n)?;
                        }
                    }
                }
            }
            Action::Write { comps, data } => {
                let node = literal(ws, comps)?;
                let hash = crate::store::content::write_bytes(ws.db, data)?.0;
                ws.set_content(node.ino, hash, data.len() as u64)?;
            }
        }
    }
    Ok(())
}
