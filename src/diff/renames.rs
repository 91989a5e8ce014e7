//! Rename detection over a change list, as `git diff -M` does: a deleted file and an added
//! file become one `renamed` change (`from` → `path`). Same content (equal hashes) is a
//! rename at 100 %; otherwise the pair's similarity is the share of bytes in lines both
//! sides have (counted as multisets, so moved lines still count), and pairs at or above
//! the threshold (default 50 %) are renames, best pairs first.
//!
//! Bounds, so a diff of a huge tree stays fast: only regular files are paired; empty
//! files are never paired (any two are "equal"); the similarity pass reads files up to
//! `SIMILARITY_MAX_BYTES` and runs only when there are at most `MAX_PAIRS` candidate pairs
//! (otherwise only exact renames are found).

use std::collections::HashMap;

use rusqlite::Connection;

use super::{Change, ChangeKind};
use crate::error::Result;
use crate::store::objects::{Entry, Hash, Kind};

/// Default minimum similarity, in percent, of an edited rename.
pub const DEFAULT_THRESHOLD: u8 = 50;
/// Files larger than this are paired only by equal content.
pub const SIMILARITY_MAX_BYTES: u64 = 1024 * 1024;
/// Most deleted × added pairs compared for similarity.
pub const MAX_PAIRS: usize = 10_000;

fn file_of(e: &Option<Entry>) -> Option<&Entry> {
    e.as_ref()
        .filter(|e| e.kind == Kind::File && e.size > 0 && e.hash.is_some())
}

/// Pairs deleted and added files of `changes` into `renamed` changes (with `similarity`
/// set); `threshold` 0 turns detection off. Other changes keep their order; a rename
/// takes the place of its added side.
pub fn detect(db: &Connection, changes: Vec<Change>, threshold: u8) -> Result<Vec<Change>> {
    if threshold == 0 {
        return Ok(changes);
    }
    let deleted: Vec<usize> = (0..changes.len())
        .filter(|&i| {
            changes[i].kind == ChangeKind::Deleted && file_of(&changes[i].before).is_some()
        })
        .collect();
    let added: Vec<usize> = (0..changes.len())
        .filter(|&i| changes[i].kind == ChangeKind::Added && file_of(&changes[i].after).is_some())
        .collect();
    if deleted.is_empty() || added.is_empty() {
        return Ok(changes);
    }
    // added index -> (deleted index, similarity)
    let mut pairs: HashMap<usize, (usize, u8)> = HashMap::new();
    let mut used = vec![false; changes.len()];
    // Exact renames first: the same content hash.
    let mut by_hash: HashMap<Hash, Vec<usize>> = HashMap::new();
    for &d in deleted.iter().rev() {
        let h = file_of(&changes[d].before).unwrap().hash.unwrap();
        by_hash.entry(h).or_default().push(d);
    }
    for &a in &added {
        let h = file_of(&changes[a].after).unwrap().hash.unwrap();
        if let Some(d) = by_hash.get_mut(&h).and_then(|v| v.pop()) {
            used[d] = true;
            used[a] = true;
            pairs.insert(a, (d, 100));
        }
    }
    // Edited renames among what is left.
    let small = |i: usize, e: &Option<Entry>| {
        !used[i] && file_of(e).is_some_and(|e| e.size <= SIMILARITY_MAX_BYTES)
    };
    let left_d: Vec<usize> = deleted
        .iter()
        .copied()
        .filter(|&d| small(d, &changes[d].before))
        .collect();
    let left_a: Vec<usize> = added
        .iter()
        .copied()
        .filter(|&a| small(a, &changes[a].after))
        .collect();
    if !left_d.is_empty() && !left_a.is_empty() && left_d.len() * left_a.len() <= MAX_PAIRS {
        let read =
            |e: &Entry| crate::store::content::read_all(db, e.hash.as_ref().unwrap(), e.size);
        let mut olds = Vec::with_capacity(left_d.len());
        for &d in &left_d {
            olds.push(read(file_of(&changes[d].before).unwrap())?);
        }
        let old_lines: Vec<HashMap<&[u8], usize>> = olds.iter().map(|o| line_counts(o)).collect();
        let mut scored: Vec<(u8, usize, usize)> = Vec::new();
        for &a in &left_a {
            let new = read(file_of(&changes[a].after).unwrap())?;
            let new_lines = line_counts(&new);
            for (k, &d) in left_d.iter().enumerate() {
                let sim = similarity(&old_lines[k], olds[k].len(), &new_lines, new.len());
                if sim >= threshold {
                    scored.push((sim, a, d));
                }
            }
        }
        // Best pairs first; ties in path order (the indices follow it).
        scored.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        for (sim, a, d) in scored {
            if !used[a] && !used[d] {
                used[a] = true;
                used[d] = true;
                pairs.insert(a, (d, sim.min(99)));
            }
        }
    }
    if pairs.is_empty() {
        return Ok(changes);
    }
    let gone: std::collections::HashSet<usize> = pairs.values().map(|p| p.0).collect();
    let mut slots: Vec<Option<Change>> = changes.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len() - gone.len());
    for i in 0..slots.len() {
        if gone.contains(&i) {
            continue;
        }
        let mut c = slots[i].take().unwrap();
        if let Some(&(d, sim)) = pairs.get(&i) {
            let old = slots[d].take().unwrap();
            c.kind = ChangeKind::Renamed;
            c.from = Some(old.path);
            c.similarity = Some(sim);
            c.type_before = old.type_before;
            c.size_before = old.size_before;
            c.mode_before = old.mode_before;
            c.before = old.before;
        }
        out.push(c);
    }
    Ok(out)
}

/// How many times each line (with its newline) occurs.
fn line_counts(data: &[u8]) -> HashMap<&[u8], usize> {
    let mut m: HashMap<&[u8], usize> = HashMap::new();
    for line in data.split_inclusive(|b| *b == b'\n') {
        *m.entry(line).or_default() += 1;
    }
    m
}

/// Bytes in lines common to both sides (as multisets), over the mean size, in percent.
fn similarity(
    old: &HashMap<&[u8], usize>,
    old_len: usize,
    new: &HashMap<&[u8], usize>,
    new_len: usize,
) -> u8 {
    if old_len + new_len == 0 {
        return 100;
    }
    let (small, big) = if old.len() <= new.len() {
        (old, new)
    } else {
        (new, old)
    };
    let common: usize = small
        .iter()
        .map(|(line, n)| big.get(line).map_or(0, |m| (*n).min(*m) * line.len()))
        .sum();
    ((2 * common * 100) / (old_len + new_len)).min(100) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_counts_shared_lines() {
        let a = b"one\ntwo\nthree\nfour\n";
        let b = b"one\ntwo\nthree\nFIVE\n";
        let s = similarity(&line_counts(a), a.len(), &line_counts(b), b.len());
        assert!((70..90).contains(&s), "{s}");
        let c = b"nothing\nalike\n";
        assert_eq!(
            similarity(&line_counts(a), a.len(), &line_counts(c), c.len()),
            0
        );
    }
}
