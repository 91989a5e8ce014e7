//! Workspace paths: always absolute inside the workspace. `..` is resolved lexically and
//! never climbs above `/`, and symlink targets (absolute ones too) stay inside the workspace.

use std::os::unix::ffi::OsStrExt;

use super::{Inode, ROOT_INO, Workspace};
use crate::error::{Error, Result};
use crate::names::{escape, unescape};
use crate::store::objects::Kind;

const MAX_SYMLINK_HOPS: usize = 40;

/// Splits a path into normalized components; `..` at the root stays at the root.
pub fn components(path: &[u8]) -> Result<Vec<Vec<u8>>> {
    if path.contains(&0) {
        return Err(Error::InvalidName(format!(
            "{} (contains NUL)",
            escape(path)
        )));
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for c in path.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c if c.len() > 255 => {
                return Err(Error::NameTooLong(escape(c)));
            }
            c => out.push(c.to_vec()),
        }
    }
    Ok(out)
}

/// A path argument: raw bytes, or the text form of `crate::names` (`\xHH` for a byte
/// that is not UTF-8, `\\` for a backslash), as every path avfs prints is written.
pub fn parse(path: &std::ffi::OsStr) -> Result<Vec<Vec<u8>>> {
    components(&unescape(path.as_bytes()))
}

/// A path as text, exactly: names that are not UTF-8 (or hold a backslash) in the escaped
/// form of `crate::names`, which `parse` reads back to the same bytes.
pub fn display(comps: &[Vec<u8>]) -> String {
    if comps.is_empty() {
        return "/".into();
    }
    let mut s = String::new();
    for c in comps {
        s.push('/');
        s.push_str(&escape(c));
    }
    s
}

/// The same path as raw bytes (for exact round trips of non-UTF-8 names).
pub fn join_bytes(comps: &[Vec<u8>]) -> Vec<u8> {
    if comps.is_empty() {
        return b"/".to_vec();
    }
    let mut v = Vec::new();
    for c in comps {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    v
}

impl Workspace<'_> {
    /// Resolves a path to its inode; `Ok(None)` when only the last component is missing.
    /// Symlinks in the middle are always followed; the last one only with `follow_last`.
    pub fn resolve(&self, comps: &[Vec<u8>], follow_last: bool) -> Result<Option<Inode>> {
        Ok(self.resolve_full(comps, follow_last)?.map(|(i, _)| i))
    }

    /// Like `resolve`, also returning the path after following symlinks.
    pub fn resolve_full(
        &self,
        comps: &[Vec<u8>],
        follow_last: bool,
    ) -> Result<Option<(Inode, Vec<Vec<u8>>)>> {
        let mut path: Vec<Vec<u8>> = comps.to_vec();
        let mut hops = 0;
        'restart: loop {
            let mut cur = self.get(ROOT_INO)?;
            for i in 0..path.len() {
                let last = i + 1 == path.len();
                if cur.kind != Kind::Dir {
                    return Err(Error::NotADirectory(display(&path[..i])));
                }
                let Some(next) = self.lookup(&cur, &path[i])? else {
                    if last {
                        return Ok(None);
                    }
                    return Err(Error::NotFound(display(&path[..=i])));
                };
                if next.kind == Kind::Symlink && (!last || follow_last) {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(Error::SymlinkLoop(display(comps)));
                    }
                    let target = next.target.clone().unwrap_or_default();
                    let mut joined = if target.starts_with(b"/") {
                        Vec::new()
                    } else {
                        join_bytes(&path[..i])
                    };
                    joined.push(b'/');
                    joined.extend_from_slice(&target);
                    for rest in &path[i + 1..] {
                        joined.push(b'/');
                        joined.extend_from_slice(rest);
                    }
                    path = components(&joined)?;
                    continue 'restart;
                }
                cur = next;
            }
            return Ok(Some((cur, path)));
        }
    }

    /// Resolves an existing path or fails with `NotFound`.
    pub fn resolve_existing(&self, comps: &[Vec<u8>], follow_last: bool) -> Result<Inode> {
        self.resolve(comps, follow_last)?
            .ok_or_else(|| Error::NotFound(display(comps)))
    }

    /// The directory that holds the last component, and that component.
    pub fn resolve_parent(&self, comps: &[Vec<u8>]) -> Result<(Inode, Vec<u8>)> {
        let Some((name, parent)) = comps.split_last() else {
            return Err(Error::InvalidArgument(
                "/".into(),
                "the workspace root cannot be used here".into(),
            ));
        };
        let dir = self.resolve_existing(parent, true)?;
        if dir.kind != Kind::Dir {
            return Err(Error::NotADirectory(display(parent)));
        }
        Ok((dir, name.clone()))
    }
}
