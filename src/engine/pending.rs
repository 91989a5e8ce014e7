//! What a kept overlay's upper holds that its last ingest did not take in, counted
//! cheaply for `avfs service list` (writes of the workspace's services not taken in yet).
//!
//! Read-only and lock-free: it reads the upper beside its mounted overlay (as
//! `kept::describe` does), takes no run lock, ingests and checkpoints nothing. The last
//! ingest's time is when its record of the files it read (`memo.json`) was saved; an
//! entry changed since has a ctime at or after it (ctime cannot be set back). The count
//! is bounded: at most `MAX_LOOKED` entries are looked at and `MAX_COUNTED` counted, and
//! `at_least` says the walk stopped early.
//!
//! What it counts: files, symbolic links, deletions (whiteouts) and other entries changed
//! since, and a directory changed since when nothing below it counts (a new empty
//! directory, or a file only the upper held removed from it). It is close to, not
//! exactly, what the next ingest takes in: a file written and removed again since still
//! counts its directory; an entry changed while the last ingest ran (before its record
//! was saved) does not count; files written to ignored paths count (the next run moves
//! them to the ignored directory, outside the history).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Entries of the upper looked at, at most.
pub const MAX_LOOKED: u64 = 20_000;
/// Changed entries counted, at most.
pub const MAX_COUNTED: u64 = 1_000;

/// The upper's changed entries, as counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    pub entries: u64,
    /// The walk stopped early (a cap, or a directory it could not read): there may be
    /// more.
    pub at_least: bool,
}

/// When the kept overlay of `kept_dir` was last ingested (ns since the epoch); 0 when
/// its upper never was (everything in it is new).
pub fn last_ingest_ns(kept_dir: &Path) -> i64 {
    fs::metadata(kept_dir.join("memo.json"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64)
}

fn ctime_ns(m: &fs::Metadata) -> i64 {
    m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec()
}

/// Counts what changed in the upper of the kept overlay at `kept_dir` since its last
/// ingest; None when there is no kept overlay there.
pub fn pending(kept_dir: &Path) -> Option<Pending> {
    if !kept_dir.join("kept.json").exists() {
        return None;
    }
    let since = last_ingest_ns(kept_dir);
    let upper = kept_dir.join("upper");
    let root_meta = fs::symlink_metadata(&upper).ok()?;
    // Directories found: (parent index, changed since, something below counts). The
    // root of an upper never ingested is as avfs made it (a new overlay): it counts only
    // after an ingest (a file only the upper held removed from it).
    let root_changed = since > 0 && ctime_ns(&root_meta) >= since;
    let mut dirs: Vec<(usize, bool, bool)> = vec![(0, root_changed, false)];
    let mut stack: Vec<(usize, PathBuf)> = vec![(0, upper)];
    let (mut looked, mut counted, mut at_least) = (0u64, 0u64, false);
    'walk: while let Some((idx, dir)) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else {
            // Gone meanwhile (an ingest's move of ignored files), or too deep to name.
            at_least = true;
            continue;
        };
        for e in rd.flatten() {
            if looked >= MAX_LOOKED || counted >= MAX_COUNTED {
                at_least = true;
                break 'walk;
            }
            looked += 1;
            let Ok(m) = e.metadata() else {
                continue;
            };
            let changed = ctime_ns(&m) >= since;
            if m.is_dir() {
                dirs.push((idx, changed, false));
                stack.push((dirs.len() - 1, e.path()));
            } else if changed {
                counted += 1;
                // Its directories count no more on their own.
                let mut i = idx;
                while !dirs[i].2 {
                    dirs[i].2 = true;
                    if i == 0 {
                        break;
                    }
                    i = dirs[i].0;
                }
            }
        }
    }
    // A directory counts only once its whole subtree was seen (not after a cut walk).
    if !at_least {
        counted += dirs.iter().filter(|(_, ch, below)| *ch && !*below).count() as u64;
        if counted > MAX_COUNTED {
            counted = MAX_COUNTED;
            at_least = true;
        }
    }
    Some(Pending {
        entries: counted,
        at_least,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(dir: &Path) {
        fs::create_dir_all(dir.join("upper")).unwrap();
        fs::write(dir.join("kept.json"), "{}").unwrap();
    }

    #[test]
    fn counts_what_changed_since_the_last_ingest_and_stops_at_its_caps() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("k");
        assert_eq!(pending(&d), None);
        kept(&d);
        // A new overlay's empty upper holds nothing new.
        assert_eq!(pending(&d).unwrap(), Pending::default());
        fs::create_dir_all(d.join("upper/old")).unwrap();
        fs::write(d.join("upper/old/a"), "a").unwrap();
        fs::create_dir(d.join("upper/empty")).unwrap();
        // Never ingested: all of it is new (the file, and the empty directory; `old`
        // counts through its file).
        let p = pending(&d).unwrap();
        assert_eq!((p.entries, p.at_least), (2, false), "{p:?}");
        // Ingested after all of it was written: nothing is new.
        let memo = fs::File::create(d.join("memo.json")).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        memo.set_modified(later).unwrap();
        assert_eq!(pending(&d).unwrap(), Pending::default());
        fs::remove_file(d.join("memo.json")).unwrap();
        fs::create_dir(d.join("upper/many")).unwrap();
        for i in 0..MAX_COUNTED + 5 {
            fs::write(d.join(format!("upper/many/{i}")), "").unwrap();
        }
        let p = pending(&d).unwrap();
        assert_eq!((p.entries, p.at_least), (MAX_COUNTED, true), "{p:?}");
    }
}
