//! The object store behind a remote: an S3-compatible service (object_store's `AmazonS3`)
//! or a local directory (`LocalFileSystem`), driven from synchronous code through a small
//! current-thread tokio runtime. Every request is counted (the reports and the benchmark
//! show them), and every error is scrubbed of the credentials before it goes anywhere.

use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;

use super::config::{Location, Settings};
use crate::error::{Error, Result};

/// Requests and bytes one process sent to one remote.
#[derive(Default, Debug)]
pub struct Counters {
    pub requests: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct Traffic {
    pub requests: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

impl std::ops::Sub for Traffic {
    type Output = Traffic;
    fn sub(self, o: Traffic) -> Traffic {
        Traffic {
            requests: self.requests - o.requests,
            bytes_up: self.bytes_up - o.bytes_up,
            bytes_down: self.bytes_down - o.bytes_down,
        }
    }
}

/// One listed object: its key below the remote's prefix, size and age.
#[derive(Clone, Debug)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub modified_unix: i64,
}

/// The outcome of a conditional write.
#[derive(Debug, PartialEq, Eq)]
pub enum Cas {
    Written,
    /// The object was not in the expected state (someone else wrote it first).
    Conflict,
}

pub struct Transport {
    /// The remote's name, for messages.
    pub name: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// For `file://` remotes: the directory (refs are compared and swapped under a lock
    /// on it, as `LocalFileSystem` has no conditional update).
    local: Option<PathBuf>,
    rt: tokio::runtime::Runtime,
    /// Strings that must never appear in a message (secret key, session token).
    secrets: Vec<String>,
    pub counters: Counters,
    /// How long to wait after a ref write before reading it back.
    pub settle: Duration,
    /// `single_writer = true` in the remotes file for this bucket.
    pub single_writer: bool,
}

fn install_crypto() {
    // rustls needs a process-wide provider; ring is the one compiled in. A second call
    // finds it installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Transport {
    pub fn open(name: &str, location: &Location, settings: &Settings) -> Result<Transport> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::host("tokio runtime", e))?;
        let mut secrets = Vec::new();
        let (store, prefix, local): (Arc<dyn ObjectStore>, String, Option<PathBuf>) =
            match location {
                Location::Local { dir } => {
                    std::fs::create_dir_all(dir).map_err(|e| Error::host(dir.display(), e))?;
                    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir).map_err(
                        |e| Error::Remote {
                            remote: name.into(),
                            message: e.to_string(),
                        },
                    )?;
                    (Arc::new(fs), String::new(), Some(dir.clone()))
                }
                Location::S3 { bucket, prefix } => {
                    install_crypto();
                    // A plain-HTTP endpoint (a local server) needs no TLS roots: loading
                    // the system's was a quarter of a lazy `cat`'s instructions.
                    let plain_http = settings
                        .endpoint
                        .as_deref()
                        .is_some_and(|e| e.starts_with("http://"));
                    let mut b = object_store::aws::AmazonS3Builder::new()
                        .with_bucket_name(bucket)
                        .with_retry(object_store::RetryConfig {
                            backoff: Default::default(),
                            max_retries: settings.retries,
                            retry_timeout: Duration::from_secs(30),
                        })
                        .with_client_options(
                            object_store::ClientOptions::new()
                                .with_connect_timeout(Duration::from_secs(10))
                                .with_timeout(Duration::from_secs(300))
                                .with_no_system_certificates(plain_http),
                        );
                    if let Some(e) = &settings.endpoint {
                        b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
                    }
                    b = b.with_region(settings.region.as_deref().unwrap_or("us-east-1"));
                    match (&settings.access_key_id, &settings.secret_access_key) {
                        (Some(k), Some(s)) => {
                            secrets.push(s.clone());
                            b = b.with_access_key_id(k).with_secret_access_key(s);
                            if let Some(t) = &settings.session_token {
                                secrets.push(t.clone());
                                b = b.with_token(t);
                            }
                        }
                        _ => b = b.with_skip_signature(true),
                    }
                    let s3 = b.build().map_err(|e| Error::Remote {
                        remote: name.into(),
                        message: scrub(&e.to_string(), &secrets),
                    })?;
                    (Arc::new(s3), prefix.clone(), None)
                }
            };
        Ok(Transport {
            name: name.to_string(),
            store,
            prefix,
            local,
            rt,
            secrets,
            counters: Counters::default(),
            settle: settings.settle(),
            single_writer: settings.single_writer.unwrap_or(false),
        })
    }

    /// A `file://` remote, whose refs avfs itself compares and swaps under a lock.
    pub fn is_directory(&self) -> bool {
        self.local.is_some()
    }

    pub fn traffic(&self) -> Traffic {
        Traffic {
            requests: self.counters.requests.load(Ordering::Relaxed),
            bytes_up: self.counters.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.counters.bytes_down.load(Ordering::Relaxed),
        }
    }

    fn path(&self, key: &str) -> ObjPath {
        if self.prefix.is_empty() {
            ObjPath::from(key)
        } else {
            ObjPath::from(format!("{}/{key}", self.prefix))
        }
    }

    fn count(&self, up: u64, down: u64) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_up.fetch_add(up, Ordering::Relaxed);
        self.counters.bytes_down.fetch_add(down, Ordering::Relaxed);
    }

    pub fn err(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Remote {
            remote: self.name.clone(),
            message: scrub(&format!("{what}: {e}"), &self.secrets),
        }
    }

    /// Runs `f` to completion on this remote's runtime. Called from synchronous code
    /// only; a caller already inside a runtime (none today) gets a thread of its own.
    pub fn run<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Like `run`, for callers that may be inside another runtime (the lazy fetch is
    /// reached from whatever reads a file).
    pub fn run_anywhere<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| self.rt.block_on(f))
                    .join()
                    .expect("remote thread")
            })
        } else {
            self.rt.block_on(f)
        }
    }

    /// The whole object, or None when there is none.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(key)).await {
            Ok(r) => {
                let b = r.bytes().await.map_err(|e| self.err(key, e))?;
                self.count(0, b.len() as u64);
                Ok(Some(b))
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.count(0, 0);
                Ok(None)
            }
            Err(e) => Err(self.err(key, e)),
        }
    }

    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let want = range.end - range.start;
        if want == 0 {
            // An empty object (an empty file's chunk): nothing to ask for, and stores
            // refuse an empty range.
            return Ok(Bytes::new());
        }
        let b = self
            .store
            .get_range(&self.path(key), range)
            .await
            .map_err(|e| self.err(key, e))?;
        self.count(0, b.len() as u64);
        if b.len() as u64 != want {
            return Err(self.err(
                key,
                format!(
                    "asked for {want} bytes, got {} (truncated object?)",
                    b.len()
                ),
            ));
        }
        Ok(b)
    }

    /// Stores an immutable, content-addressed object. Overwriting is harmless (same
    /// bytes), so a retried or resumed upload needs no check first.
    pub async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let n = data.len() as u64;
        self.store
            .put(&self.path(key), PutPayload::from_bytes(data))
            .await
            .map_err(|e| self.err(key, e))?;
        self.count(n, 0);
        Ok(())
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        self.count(0, 0);
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Every object whose key starts with `dir/` (one request per 1 000 keys).
    pub async fn list(&self, dir: &str) -> Result<Vec<Listed>> {
        let base = self.path(dir);
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|e| self.err(dir, e))?;
        // One request per page of 1 000, as S3 pages them (the local store none).
        self.count(0, 0);
        for _ in 1..metas.len().div_ceil(1000) {
            self.count(0, 0);
        }
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let key = m.location.as_ref().strip_prefix(&strip)?.to_string();
                Some(Listed {
                    key,
                    size: m.size,
                    modified_unix: m.last_modified.timestamp(),
                })
            })
            .collect())
    }

    /// Reads a small mutable object (a ref) with the version a conditional write needs.
    pub async fn get_versioned(&self, key: &str) -> Result<Option<(Bytes, String)>> {
        if let Some(dir) = &self.local {
            self.count(0, 0);
            return match std::fs::read(dir.join(key)) {
                Ok(b) => {
                    let tag = local_tag(&b);
                    Ok(Some((Bytes::from(b), tag)))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(self.err(key, e)),
            };
        }
        match self.store.get(&self.path(key)).await {
            Ok(r) => {
                let tag = r.meta.e_tag.clone().ok_or_else(|| {
                    self.err(key, "the server sent no ETag, so refs cannot move safely")
                })?;
                let b = r.bytes().await.map_err(|e| self.err(key, e))?;
                self.count(0, b.len() as u64);
                Ok(Some((b, tag)))
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.count(0, 0);
                Ok(None)
            }
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Writes `key` only if it is still at version `expected` (None: only if it does not
    /// exist): S3's If-Match / If-None-Match, or for a directory a compare-and-rename
    /// under an exclusive lock.
    pub async fn put_if(&self, key: &str, data: Bytes, expected: Option<&str>) -> Result<Cas> {
        if let Some(dir) = &self.local {
            self.count(data.len() as u64, 0);
            return local_cas(dir, key, &data, expected).map_err(|e| self.err(key, e));
        }
        let n = data.len() as u64;
        let mode = match expected {
            None => PutMode::Create,
            Some(tag) => PutMode::Update(UpdateVersion {
                e_tag: Some(tag.to_string()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let r = self
            .store
            .put_opts(&self.path(key), PutPayload::from_bytes(data), opts)
            .await;
        self.count(n, 0);
        match r {
            Ok(_) => Ok(Cas::Written),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Cas::Conflict),
            // If-Match on a ref someone deleted meanwhile.
            Err(object_store::Error::NotFound { .. }) if expected.is_some() => Ok(Cas::Conflict),
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Fetches many ranges of one object: neighbours closer than `gap` bytes are read in
    /// one request, and up to `parallel` requests run at once. Returns the bytes of each
    /// asked range, in order.
    pub async fn get_ranges(
        &self,
        key: &str,
        ranges: &[Range<u64>],
        gap: u64,
        parallel: usize,
    ) -> Result<Vec<Bytes>> {
        let nonempty: Vec<Range<u64>> =
            ranges.iter().filter(|r| r.end > r.start).cloned().collect();
        let merged = coalesce(&nonempty, gap);
        let fetched: Vec<(Range<u64>, Bytes)> = futures_util::stream::iter(merged)
            .map(|r| async move {
                let b = self.get_range(key, r.clone()).await?;
                Ok::<_, Error>((r, b))
            })
            .buffered(parallel.max(1))
            .try_collect()
            .await?;
        ranges
            .iter()
            .map(|r| {
                if r.end == r.start {
                    return Ok(Bytes::new());
                }
                let i = fetched.partition_point(|(m, _)| m.end < r.end);
                let (m, b) = fetched
                    .get(i)
                    .filter(|(m, _)| m.start <= r.start && r.end <= m.end)
                    .ok_or_else(|| self.err(key, "range bookkeeping"))?;
                Ok(b.slice((r.start - m.start) as usize..(r.end - m.start) as usize))
            })
            .collect()
    }
}

/// Sorted, merged ranges covering `ranges`, joining neighbours less than `gap` apart.
pub fn coalesce(ranges: &[Range<u64>], gap: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The version of a ref in a directory remote: the hash of its bytes.
fn local_tag(b: &[u8]) -> String {
    blake3::hash(b).to_hex().to_string()
}

fn local_cas(dir: &Path, key: &str, data: &[u8], expected: Option<&str>) -> std::io::Result<Cas> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let target = dir.join(key);
    let parent = target.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)?;
    // One lock for all refs of the remote: flock is released by the kernel if the
    // process dies, so a killed push never leaves it held.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".refs.lock"))?;
    // SAFETY: flock on a file descriptor we own; it stays open until the end of the
    // function, which releases the lock.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let current = match std::fs::read(&target) {
        Ok(b) => Some(local_tag(&b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if current.as_deref() != expected {
        return Ok(Cas::Conflict);
    }
    let tmp = parent.join(format!(
        ".{}.tmp-{}",
        target.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &target)?;
    std::fs::File::open(parent)?.sync_all()?;
    drop(lock);
    Ok(Cas::Written)
}

/// Removes every secret from a message (the client's errors may quote a request).
pub fn scrub(msg: &str, secrets: &[String]) -> String {
    let mut out = msg.to_string();
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(s.as_str(), "[secret]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::coalesce;

    #[test]
    fn coalesce_joins_close_ranges_only() {
        assert_eq!(
            coalesce(&[10..20, 0..5, 21..30, 100..110], 2),
            vec![0..5, 10..30, 100..110]
        );
        assert_eq!(coalesce(&[0..5, 5..9], 0), vec![0..9]);
        assert_eq!(coalesce(&[], 10), Vec::<std::ops::Range<u64>>::new());
    }
}
