//! The full output of each exec, kept on disk so that `avfs output EXEC_ID` can fetch
//! what the envelope's head and tail left out.
//!
//! Layout: `$AVFS_HOME/outputs/<vault key>/<exec id>.{stdout,stderr,json}`, the key
//! named after the vault file's absolute path as the package caches are (forks share the
//! file, so they share the directory and its cap), removed by `vault delete`. Beside the
//! vault rather than in it: output is not versioned content, writing it into the vault
//! would make every noisy build grow the file and its history, and a page of it is read
//! with one `pread`.
//!
//! Bounded twice: a stream keeps its first [`stream_cap`] bytes (the rest is counted,
//! not written, and the record says so), and a vault's outputs are [`vault_cap`] bytes
//! at most, from [`KEPT_EXECS`] execs at most: when an exec finishes, the oldest
//! finished execs' streams are dropped until the rest fits. A dropped exec keeps its
//! small record (`<id>.dropped`), so that asking for it says "dropped by the cap" rather
//! than "unknown"; those are kept for the newest [`KEPT_RECORDS`] dropped execs.
//!
//! The streams are written as the command prints (see `runner::pump`), never held in
//! memory. Only avfs's user can read them (0700 directories, 0600 files): a command's
//! output may carry secrets.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Bytes of one stream kept on disk by default (`AVFS_OUTPUT_STREAM_MAX` overrides).
pub const DEFAULT_STREAM_CAP: u64 = 16 * 1024 * 1024;
/// Bytes of all of one vault's kept outputs by default (`AVFS_OUTPUTS_MAX` overrides).
pub const DEFAULT_VAULT_CAP: u64 = 64 * 1024 * 1024;
/// Execs whose output a vault keeps at most (however small: a directory of a few
/// thousand names lists in well under a millisecond).
pub const KEPT_EXECS: usize = 1000;
/// Records of dropped execs kept per vault (about 200 bytes each).
pub const KEPT_RECORDS: usize = 1000;
/// Bytes `avfs output --json` returns when no `--limit` is given.
pub const DEFAULT_PAGE: u64 = 16 * 1024;

fn env_bytes(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

pub fn stream_cap() -> u64 {
    env_bytes("AVFS_OUTPUT_STREAM_MAX", DEFAULT_STREAM_CAP)
}

pub fn vault_cap() -> u64 {
    env_bytes("AVFS_OUTPUTS_MAX", DEFAULT_VAULT_CAP)
}

/// One of an exec's two streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Where all vaults' outputs are.
pub fn outputs_root(home: &Path) -> PathBuf {
    home.join("outputs")
}

/// The directory of one vault's outputs (see the module's comment).
pub fn vault_dir(home: &Path, vault_file: &Path) -> PathBuf {
    let abs = std::path::absolute(vault_file).unwrap_or(vault_file.into());
    let key = blake3::hash(abs.as_os_str().as_encoded_bytes()).to_hex();
    outputs_root(home).join(&key.as_str()[..16])
}

/// Removes a vault's outputs (`vault delete`). Best effort: nothing else refers to them.
pub fn discard_vault(home: &Path, vault_file: &Path) {
    let _ = fs::remove_dir_all(vault_dir(home, vault_file));
}

/// What is known of one exec's kept output: `<exec id>.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Record {
    pub exec: String,
    pub workspace: String,
    pub started_at_ns: i64,
    /// The `avfs exec` process that writes the streams (a record without `finished`
    /// whose writer is gone was left by a killed exec: droppable).
    pub pid: u32,
    /// The run is over and the totals below are final.
    pub finished: bool,
    /// Bytes each stream carried (kept or not); 0 until finished.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// The streams were dropped by the vault's cap.
    pub dropped: bool,
}

fn host_err(p: &Path, e: std::io::Error) -> Error {
    Error::host(p.display(), e)
}

fn file_of(dir: &Path, id: &str, ext: &str) -> PathBuf {
    dir.join(format!("{id}.{ext}"))
}

fn write_record(dir: &Path, r: &Record) -> Result<()> {
    let f = file_of(dir, &r.exec, "json");
    let tmp = dir.join(format!(".{}.json.tmp", r.exec));
    let json = serde_json::to_vec(r).expect("output record serializes");
    fs::write(&tmp, json).map_err(|e| host_err(&tmp, e))?;
    fs::rename(&tmp, &f).map_err(|e| host_err(&f, e))
}

fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// The files one run writes its streams to, made before it starts.
pub struct OutputFiles {
    dir: PathBuf,
    record: Record,
    pub stdout: File,
    pub stderr: File,
    /// Bytes of each stream written at most.
    pub cap: u64,
}

impl OutputFiles {
    /// Makes the exec's record and its two empty stream files.
    pub fn create(home: &Path, vault_file: &Path, workspace: &str, id: &str) -> Result<Self> {
        let dir = vault_dir(home, vault_file);
        let root = outputs_root(home);
        for d in [&root, &dir] {
            fs::create_dir_all(d).map_err(|e| host_err(d, e))?;
            let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o700));
        }
        let record = Record {
            exec: id.to_string(),
            workspace: workspace.to_string(),
            started_at_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i64),
            pid: std::process::id(),
            ..Record::default()
        };
        write_record(&dir, &record)?;
        let open = |ext: &str| {
            let p = file_of(&dir, id, ext);
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&p)
                .map_err(|e| host_err(&p, e))
        };
        Ok(OutputFiles {
            stdout: open("stdout")?,
            stderr: open("stderr")?,
            dir,
            record,
            cap: stream_cap(),
        })
    }

    /// A writer for one stream (its own descriptor, for the thread that pumps it).
    pub fn spill(&self, stream: Stream) -> Option<Spill> {
        let f = match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        };
        Some(Spill {
            file: f.try_clone().ok()?,
            room: self.cap,
        })
    }

    /// The run is over: records the streams' totals, then drops the oldest execs'
    /// outputs while the vault's are over the cap. Best effort: the run's result does
    /// not depend on its kept copy.
    pub fn finish(mut self, stdout_bytes: u64, stderr_bytes: u64) {
        self.record.finished = true;
        self.record.stdout_bytes = stdout_bytes;
        self.record.stderr_bytes = stderr_bytes;
        let id = self.record.exec.clone();
        // An empty stream needs no file (most execs print little to one of them).
        for (f, ext) in [(&self.stdout, "stdout"), (&self.stderr, "stderr")] {
            if f.metadata().is_ok_and(|m| m.len() == 0) {
                let _ = fs::remove_file(file_of(&self.dir, &id, ext));
            }
        }
        if write_record(&self.dir, &self.record).is_ok() {
            // The record's mtime is the exec's start: the cap drops by age without
            // reading every record.
            let start = std::time::UNIX_EPOCH
                + std::time::Duration::from_nanos(self.record.started_at_ns.max(0) as u64);
            if let Ok(f) = File::options()
                .write(true)
                .open(file_of(&self.dir, &id, "json"))
            {
                let _ = f.set_modified(start);
            }
        }
        enforce_cap(&self.dir, vault_cap(), &id);
    }
}

/// Writes one stream to its file, up to its cap; what comes after is not written (the
/// record's total says how much was cut).
pub struct Spill {
    file: File,
    room: u64,
}

impl Spill {
    pub fn push(&mut self, buf: &[u8]) {
        if self.room == 0 {
            return;
        }
        let n = (buf.len() as u64).min(self.room) as usize;
        // A full disk stops the copy, not the run: the envelope still has head and tail.
        if self.file.write_all(&buf[..n]).is_err() {
            self.room = 0;
            return;
        }
        self.room -= n as u64;
    }
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid != 0 && unsafe { libc::kill(pid as i32, 0) == 0 }
}

fn size(p: &Path) -> u64 {
    fs::metadata(p).map_or(0, |m| m.len())
}

fn mtime(p: &Path) -> std::time::SystemTime {
    fs::metadata(p)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Drops the streams of the oldest execs (not `current`, not one still running) while
/// the directory's streams are over `cap` bytes or it keeps more than [`KEPT_EXECS`]
/// execs; a dropped exec's record becomes `<id>.dropped`, and the newest
/// [`KEPT_RECORDS`] of those are kept. Costs a listing of names and a `stat` per kept
/// stream; records are read only for the execs it drops.
fn enforce_cap(dir: &Path, cap: u64, current: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut live: Vec<String> = Vec::new();
    let mut dropped: Vec<PathBuf> = Vec::new();
    let mut total = 0u64;
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name.strip_suffix(".json") {
            if !id.starts_with('.') {
                live.push(id.to_string());
            }
        } else if name.ends_with(".dropped") {
            dropped.push(e.path());
        } else if name.ends_with(".stdout") || name.ends_with(".stderr") {
            total += e.metadata().map_or(0, |m| m.len());
        }
    }
    let streams = |id: &str| [file_of(dir, id, "stdout"), file_of(dir, id, "stderr")];
    if total > cap || live.len() > KEPT_EXECS {
        // A record's mtime is its exec's start (`OutputFiles::finish` sets it).
        let mut by_age: Vec<(std::time::SystemTime, String)> = live
            .iter()
            .map(|id| (mtime(&file_of(dir, id, "json")), id.clone()))
            .collect();
        by_age.sort();
        let mut count = live.len();
        for (_, id) in by_age {
            if total <= cap && count <= KEPT_EXECS {
                break;
            }
            let rec = file_of(dir, &id, "json");
            let Some(mut r) = read_record(&rec) else {
                continue;
            };
            if id == current || (!r.finished && pid_alive(r.pid)) {
                continue;
            }
            for p in streams(&id) {
                total = total.saturating_sub(size(&p));
                let _ = fs::remove_file(p);
            }
            r.dropped = true;
            let tomb = file_of(dir, &id, "dropped");
            if fs::write(&tomb, serde_json::to_vec(&r).unwrap_or_default()).is_ok() {
                dropped.push(tomb);
            }
            let _ = fs::remove_file(&rec);
            count -= 1;
        }
    }
    if dropped.len() > KEPT_RECORDS {
        let mut by_age: Vec<(std::time::SystemTime, PathBuf)> =
            dropped.into_iter().map(|p| (mtime(&p), p)).collect();
        by_age.sort();
        let over = by_age.len() - KEPT_RECORDS;
        for (_, p) in by_age.into_iter().take(over) {
            let _ = fs::remove_file(p);
        }
    }
}

/// One page of a kept stream.
pub struct Page {
    pub record: Record,
    /// Bytes of the stream kept on disk.
    pub kept: u64,
    /// Bytes the stream carried (the kept ones unless the run was cut or is unfinished).
    pub total: u64,
    pub offset: u64,
    pub data: Vec<u8>,
}

impl Page {
    /// The stream on disk is shorter than what the command printed (its cap cut it).
    pub fn truncated(&self) -> bool {
        self.total > self.kept
    }

    /// Where the next page starts; `None` at the end of what is kept.
    pub fn next_offset(&self) -> Option<u64> {
        let end = self.offset + self.data.len() as u64;
        (end < self.kept).then_some(end)
    }
}

/// Exec ids are `ex-` and hex (`boundary::new_id`); anything else would be a path.
fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(
            format!("{id:?}"),
            "not an exec id (like ex-1a2b3c4d5e: the envelope's `id`, also in its audit row)"
                .into(),
        ))
    }
}

/// The exec id a name stands for: the id itself, or the name of a checkpoint the exec
/// took (`exec-<hex>` before it, `exec-<hex>-after`), as `avfs log` and `checkpoint list`
/// show them.
fn exec_id(name: &str) -> String {
    match name.strip_prefix("exec-") {
        Some(rest) => format!("ex-{}", rest.strip_suffix("-after").unwrap_or(rest)),
        None => name.to_string(),
    }
}

/// Finds an exec's directory and record (a dropped one's too), in whichever vault ran it.
fn find(home: &Path, id: &str) -> Result<(PathBuf, Record)> {
    check_id(id)?;
    let id = &exec_id(id);
    let root = outputs_root(home);
    if let Ok(dirs) = fs::read_dir(&root) {
        for d in dirs.filter_map(|e| e.ok()) {
            for ext in ["json", "dropped"] {
                if let Some(r) = read_record(&file_of(&d.path(), id, ext)) {
                    return Ok((d.path(), r));
                }
            }
        }
    }
    Err(Error::NoSuchOutput(format!(
        "no kept output for exec {id}: no such exec has run here (ids are the envelope's \
         `id`; `avfs audit` lists them), or it was denied or awaited approval (nothing ran), \
         or its vault was deleted"
    )))
}

/// Reads up to `limit` bytes of an exec's `stream` from `offset` (`None`: to the end).
/// A page that would end inside a UTF-8 character ends before it (the next page starts
/// there), so that pages of text stay text.
pub fn read(
    home: &Path,
    id: &str,
    stream: Stream,
    offset: u64,
    limit: Option<u64>,
) -> Result<Page> {
    let (dir, record) = find(home, id)?;
    let id = record.exec.as_str();
    if record.dropped {
        return Err(Error::NoSuchOutput(format!(
            "the output of exec {id} was dropped: a vault keeps its newest execs' output, \
             {} bytes (AVFS_OUTPUTS_MAX) and {KEPT_EXECS} execs at most; its envelope's head \
             and tail are all that is left",
            vault_cap()
        )));
    }
    let path = file_of(&dir, id, stream.name());
    // No file: the stream was empty (`finish` removes empty ones).
    let file = match File::open(&path) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(host_err(&path, e)),
    };
    let kept = match &file {
        Some(f) => f.metadata().map_err(|e| host_err(&path, e))?.len(),
        None => 0,
    };
    let total = match stream {
        Stream::Stdout if record.finished => record.stdout_bytes,
        Stream::Stderr if record.finished => record.stderr_bytes,
        _ => kept,
    }
    .max(kept);
    if offset > kept {
        return Err(Error::InvalidArgument(
            format!("--offset {offset}"),
            format!(
                "past the end of exec {id}'s {} ({kept} bytes kept)",
                stream.name()
            ),
        ));
    }
    let want = limit.unwrap_or(kept - offset).min(kept - offset) as usize;
    let mut data = vec![0u8; want];
    let mut got = 0;
    while let (Some(file), true) = (&file, got < want) {
        match file.read_at(&mut data[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(host_err(&path, e)),
        }
    }
    data.truncate(got);
    if limit.is_some() && offset + (got as u64) < kept {
        data.truncate(utf8_cut(&data));
    }
    Ok(Page {
        record,
        kept,
        total,
        offset,
        data,
    })
}

/// Where to end a page so that it does not split a UTF-8 character at its end: the
/// length without an incomplete trailing sequence (at most 3 bytes shorter; never 0
/// for a non-empty page, so paging always moves on).
fn utf8_cut(data: &[u8]) -> usize {
    match std::str::from_utf8(data) {
        Ok(_) => data.len(),
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
            let cut = e.valid_up_to();
            if data.len() - cut <= 3 {
                cut
            } else {
                data.len()
            }
        }
        Err(_) => data.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_end_before_a_split_character() {
        assert_eq!(utf8_cut("abé".as_bytes()), 4);
        assert_eq!(utf8_cut(&"abé".as_bytes()[..3]), 2);
        assert_eq!(utf8_cut(&[0xff, 0xfe]), 2);
        assert_eq!(utf8_cut(&[0xc3]), 1);
    }

    #[test]
    fn checkpoint_names_stand_for_their_exec() {
        assert_eq!(exec_id("exec-0a1b2c3d4e"), "ex-0a1b2c3d4e");
        assert_eq!(exec_id("exec-0a1b2c3d4e-after"), "ex-0a1b2c3d4e");
        assert_eq!(exec_id("ex-0a1b2c3d4e"), "ex-0a1b2c3d4e");
    }

    #[test]
    fn ids_that_are_paths_are_refused() {
        assert!(check_id("ex-0123456789").is_ok());
        for bad in ["", "../x", "a/b", "ex 1"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }
}
