//! The workspace's symlinks, followed as the host's kernel will follow them in a run that
//! sees the host (`--no-sandbox`). The policy reads the line; a line that names
//! `hostroot/etc/x` looks like a workspace path, but with `hostroot -> /` already in the
//! workspace (made by `avfs ln -s`, imported, checked out, left by an earlier run) the
//! command reads the host's `/etc/x`. In the sandbox the same link resolves in the
//! sandbox's view, which is why only unconfined runs ask.

use std::path::Path;

use crate::error::Result;
use crate::policy::Links;
use crate::policy::paths::{self, Verdict, Where};
use crate::store::objects::Kind;
use crate::workspace::Peek;
use crate::workspace::path::components;

/// Links followed before the kernel would answer `ELOOP`.
const MAX_HOPS: usize = 40;

/// A workspace's tree, as stored, read without changing it.
pub struct TreeLinks<'p, 'w, 'a> {
    pub peek: &'p Peek<'w, 'a>,
    /// Where the run sees the workspace on the host.
    pub ws_path: &'p Path,
}

impl Links for TreeLinks<'_, '_, '_> {
    fn follow(&self, comps: &[String]) -> Verdict {
        self.walk(comps).unwrap_or_else(|e| {
            // Fail closed: a tree that cannot be read cannot be vouched for.
            Verdict::Outside(format!("its symlinks could not be followed ({e})"))
        })
    }
}

impl TreeLinks<'_, '_, '_> {
    fn walk(&self, comps: &[String]) -> Result<Verdict> {
        let mut path: Vec<Vec<u8>> = comps.iter().map(|c| c.as_bytes().to_vec()).collect();
        let mut hops = 0;
        'restart: loop {
            // `path[..i]` is always the real directory reached so far (links substituted).
            let mut cur = self.peek.root()?;
            let mut i = 0;
            while i < path.len() {
                if path[i] == b".." {
                    if i == 0 {
                        return Ok(Verdict::Outside(format!(
                            "{} climbs above the workspace root",
                            shown(comps)
                        )));
                    }
                    path.drain(i - 1..=i);
                    continue 'restart;
                }
                if !cur.is_dir() {
                    // The command gets ENOTDIR: nothing on the host is reached.
                    return Ok(Verdict::Inside);
                }
                let Some(next) = self.peek.child(&cur, &path[i])? else {
                    // Not there yet: whatever the command makes, it makes here.
                    return Ok(Verdict::Inside);
                };
                if next.kind() == Kind::Symlink {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return Ok(Verdict::Inside); // ELOOP
                    }
                    let target = next.target().unwrap_or_default().to_vec();
                    let link = display_bytes(&path[..=i]);
                    let mut joined = if target.starts_with(b"/") {
                        Vec::new()
                    } else {
                        join(&path[..i])
                    };
                    joined.push(b'/');
                    joined.extend_from_slice(&target);
                    for rest in &path[i + 1..] {
                        joined.push(b'/');
                        joined.extend_from_slice(rest);
                    }
                    if target.starts_with(b"/") {
                        // An absolute target leads where it says on the host: into the
                        // workspace (at its path) or out of it.
                        let host = String::from_utf8_lossy(&joined).into_owned();
                        match paths::inside(&host, &Where::In(vec![]), Some(self.ws_path)) {
                            Some(below) => {
                                path = below.into_iter().map(String::into_bytes).collect();
                                continue 'restart;
                            }
                            None => {
                                let to = String::from_utf8_lossy(&target);
                                return Ok(match paths::judge(&host, &Where::In(vec![]), None) {
                                    Verdict::Outside(_) | Verdict::Inside => {
                                        Verdict::Outside(format!(
                                            "{link} is a symlink to {to}, outside the \
                                                 workspace"
                                        ))
                                    }
                                    other => other,
                                });
                            }
                        }
                    }
                    // A relative target: `..` keeps its kernel meaning (from where the
                    // link is, after earlier links).
                    path = raw_components(&joined);
                    continue 'restart;
                }
                cur = next;
                i += 1;
            }
            return Ok(Verdict::Inside);
        }
    }
}

/// Components with `.` and empty ones dropped and `..` kept.
fn raw_components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
        .collect()
}

fn join(comps: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    for c in comps {
        v.push(b'/');
        v.extend_from_slice(c);
    }
    v
}

fn display_bytes(comps: &[Vec<u8>]) -> String {
    match components(&join(comps)) {
        Ok(c) => crate::workspace::path::display(&c),
        Err(_) => String::from_utf8_lossy(&join(comps)).into_owned(),
    }
}

fn shown(comps: &[String]) -> String {
    format!("/{}", comps.join("/"))
}
