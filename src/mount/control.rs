//! The control socket of a mount: other `avfs` processes ask the serving process to
//! flush its buffers before they read the workspace (checkpoint, diff, fork), and to
//! invalidate the kernel's caches after they changed it (restore, CLI writes).
//! One JSON request per line, one JSON reply per line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{AvfsFs, MountRecord};
use crate::error::{Error, Result};

pub struct Server {
    pub fs: Arc<AvfsFs>,
    pub notifier: fuser::Notifier,
    pub mountpoint: PathBuf,
    pub record: MountRecord,
}

impl Server {
    pub fn serve(self, listener: UnixListener) {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let _ = self.handle(conn);
        }
    }

    fn handle(&self, conn: UnixStream) -> std::io::Result<()> {
        let mut reader = BufReader::new(conn.try_clone()?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let req: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let reply = match req["op"].as_str() {
            Some("ping") => json!({"ok": true, "mount": self.record}),
            Some("sync") => {
                self.kernel_writeback();
                // What the mount changed is audited before another command looks.
                match self
                    .fs
                    .sync(req["durable"].as_bool().unwrap_or(false))
                    .and_then(|()| self.fs.audit_changes())
                {
                    Ok(()) => json!({"ok": true}),
                    Err(e) => json!({"ok": false, "error": e.to_string()}),
                }
            }
            Some("invalidate") => match self.invalidate() {
                Ok(n) => json!({"ok": true, "invalidated": n}),
                Err(e) => json!({"ok": false, "error": e.to_string()}),
            },
            Some("counters") => {
                let (counters, busy_ns) = self.fs.counters();
                json!({"ok": true, "counters": counters, "busy_ns": busy_ns})
            }
            Some("quota") => {
                let (n, msg) = self.fs.quota_refusals();
                json!({"ok": true, "refused": n, "message": msg})
            }
            Some("unmount") => {
                self.kernel_writeback();
                let r = self.fs.sync(true);
                let mut w = conn.try_clone()?;
                writeln!(w, "{}", json!({"ok": r.is_ok()}))?;
                let _ = super::force_unmount(&self.mountpoint);
                return Ok(());
            }
            _ => json!({"ok": false, "error": "unknown request"}),
        };
        let mut w = conn;
        writeln!(w, "{reply}")
    }

    /// Tells the kernel to forget what it cached from us that an outside change made
    /// stale (see `AvfsFs::outside_change`).
    fn invalidate(&self) -> Result<usize> {
        invalidate(&self.fs, &self.notifier)
    }

    /// Makes the kernel write back the pages it holds dirty (writeback cache, shared
    /// mmaps) and waits until they reached us, so a checkpoint holds every write() that
    /// returned, also of files still open. syncfs(2) does not wait for a FUSE server's
    /// replies; fsync(2) does (it waits for the inode's outstanding writes), so each
    /// file open for writing is fsynced through the mount.
    fn kernel_writeback(&self) {
        let paths = match self.fs.written_paths() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("avfs: listing open files: {e}");
                return;
            }
        };
        for rel in paths {
            let path = self.mountpoint.join(rel);
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&path);
            if let Ok(f) = f
                && f.metadata().map(|m| m.is_file()).unwrap_or(false)
            {
                let _ = f.sync_all();
            }
        }
    }
}

use std::os::unix::ffi::OsStrExt;

/// Tells the kernel to forget what it cached from `fs` that is stale now (an outside
/// change, or writes the vault refused).
pub fn invalidate(fs: &AvfsFs, notifier: &fuser::Notifier) -> Result<usize> {
    let inv = fs.outside_change()?;
    for ino in &inv.pages {
        let _ = notifier.inval_inode(fuser::INodeNo(*ino), 0, 0);
    }
    for (parent, name) in &inv.names {
        let _ = notifier.inval_entry(fuser::INodeNo(*parent), std::ffi::OsStr::from_bytes(name));
    }
    for ino in &inv.attrs {
        let _ = notifier.inval_inode(fuser::INodeNo(*ino), -1, 0);
    }
    Ok(inv.names.len() + inv.pages.len() + inv.attrs.len())
}

/// Sends one request to a mount's control socket.
pub fn request(socket: &Path, req: &Value) -> Result<Value> {
    let fail = |e: std::io::Error| Error::host(format!("control socket {}", socket.display()), e);
    let mut s = UnixStream::connect(socket).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(fail)?;
    writeln!(s, "{req}").map_err(fail)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).map_err(fail)?;
    let v: Value = serde_json::from_str(&line)
        .map_err(|e| Error::Internal(format!("bad control reply: {e}")))?;
    if v["ok"] != json!(true) {
        return Err(Error::Internal(format!(
            "mount server: {}",
            v["error"].as_str().unwrap_or("request failed")
        )));
    }
    Ok(v)
}
