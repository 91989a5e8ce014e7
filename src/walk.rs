//! Walking stored trees (`grep`, `find`, the search index): reads tree objects directly,
//! so a walk costs the trees it visits and never materializes the live layer.

use rusqlite::Connection;

use crate::error::Result;
use crate::store::objects::{Entry, Hash, Kind, get_tree};
use crate::workspace::flush::entry_at;

/// What a visitor wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Go on, into this entry if it is a directory.
    Descend,
    /// Go on, but not below this entry.
    Skip,
    /// End the walk.
    Stop,
}

/// The visitor of `walk`: path components, entry, depth below the start.
pub type Visitor<'a> = dyn FnMut(&[Vec<u8>], &Entry, usize) -> Result<Next> + 'a;

/// Visits the entry at `start` below `root` and everything under it, depth first in name
/// order, up to `max_depth` levels below `start`. The visitor gets the path components,
/// the entry and its depth. Paths are read literally (no symlink is followed). Returns
/// false when `start` does not exist.
pub fn walk(
    db: &Connection,
    root: &Hash,
    start: &[Vec<u8>],
    max_depth: Option<usize>,
    visit: &mut Visitor,
) -> Result<bool> {
    let Some(e) = entry_at(db, root, start)? else {
        return Ok(false);
    };
    let mut comps = start.to_vec();
    visit_entry(db, &mut comps, &e, 0, max_depth, visit)?;
    Ok(true)
}

fn visit_entry(
    db: &Connection,
    comps: &mut Vec<Vec<u8>>,
    e: &Entry,
    depth: usize,
    max_depth: Option<usize>,
    visit: &mut Visitor,
) -> Result<Next> {
    match visit(comps, e, depth)? {
        Next::Stop => return Ok(Next::Stop),
        Next::Skip => return Ok(Next::Descend),
        Next::Descend => {}
    }
    if e.kind != Kind::Dir || max_depth.is_some_and(|m| depth >= m) {
        return Ok(Next::Descend);
    }
    let Some(h) = e.hash else {
        return Ok(Next::Descend);
    };
    for c in get_tree(db, &h)?.entries {
        comps.push(c.name.clone());
        let r = visit_entry(db, comps, &c, depth + 1, max_depth, visit)?;
        comps.pop();
        if r == Next::Stop {
            return Ok(Next::Stop);
        }
    }
    Ok(Next::Descend)
}

/// True when `data` looks binary: a NUL byte in its first 8 KiB (as grep and ripgrep judge).
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8192)].contains(&0)
}
