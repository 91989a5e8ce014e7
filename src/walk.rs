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
    // Depth first with an explicit stack of the directories being listed (their entries
    // and the next one to visit): no recursion, however deep the tree.
    let mut stack: Vec<(Vec<Entry>, usize)> = vec![];
    let mut next = Some(e);
    loop {
        if let Some(e) = next.take() {
            let depth = stack.len();
            match visit(&comps, &e, depth)? {
                Next::Stop => return Ok(true),
                Next::Skip => {}
                Next::Descend => {
                    if e.kind == Kind::Dir
                        && max_depth.is_none_or(|m| depth < m)
                        && let Some(h) = e.hash
                    {
                        stack.push((get_tree(db, &h)?.entries, 0));
                        // `comps` names the directory being listed, then its entry.
                        comps.push(vec![]);
                    }
                }
            }
        }
        let Some((entries, i)) = stack.last_mut() else {
            return Ok(true);
        };
        match entries.get(*i) {
            Some(c) => {
                *i += 1;
                *comps
                    .last_mut()
                    .expect("one component per listed directory") = c.name.clone();
                next = Some(c.clone());
            }
            None => {
                stack.pop();
                comps.pop();
            }
        }
    }
}

/// True when `data` looks binary: a NUL byte in its first 8 KiB (as grep and ripgrep judge).
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8192)].contains(&0)
}
