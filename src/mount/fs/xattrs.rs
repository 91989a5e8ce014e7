//! Extended attributes: only `user.*` is stored.

use super::*;

/// The answer for any attribute outside `user.*`: the mount stores only `user.*`, so the
/// other namespaces (security, system ACLs, trusted) are not supported, for reading as for
/// writing. EOPNOTSUPP rather than ENODATA matters for speed: `ls -l`, `cp` and others
/// then remember that the filesystem has no SELinux labels or ACLs and stop asking, where
/// ENODATA costs a kernel round trip per file (FUSE caches no missing attributes).
pub(super) const XATTR_UNSUPPORTED: i32 = libc::EOPNOTSUPP;

impl AvfsFs {
    pub(super) fn on_setxattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        reply: ReplyEmpty,
    ) {
        if !name.as_bytes().starts_with(b"user.") {
            return reply.error(Errno::from_i32(XATTR_UNSUPPORTED));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("setxattr", |db, st| {
                let ws = st.ws(db)?;
                let exists = ws.xattrs(ino.0)?.iter().any(|(n, _)| n == name.as_bytes());
                if flags & libc::XATTR_CREATE != 0 && exists {
                    return Err(Error::Exists(String::new()));
                }
                if flags & libc::XATTR_REPLACE != 0 && !exists {
                    return Err(Error::InvalidArgument(String::new(), "ENODATA".into()));
                }
                ws.set_xattr(ino.0, name.as_bytes(), value)
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(Error::InvalidArgument(_, m)) if m == "ENODATA" => {
                reply.error(Errno::from_i32(libc::ENODATA))
            }
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }

    pub(super) fn on_getxattr(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Only user.* attributes are stored; the kernel asks for security.capability on
        // every chown and write, so answer those without touching the vault.
        if !name.as_bytes().starts_with(b"user.") {
            self.count("getxattr_unsupported");
            return reply.error(Errno::from_i32(XATTR_UNSUPPORTED));
        }
        let r = self.with("getxattr", |db, st| {
            Ok(st
                .ws(db)?
                .xattrs(ino.0)?
                .into_iter()
                .find(|(n, _)| n == name.as_bytes())
                .map(|(_, v)| v))
        });
        match r {
            Ok(Some(v)) if size == 0 => reply.size(v.len() as u32),
            Ok(Some(v)) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(Some(v)) => reply.data(&v),
            Ok(None) => reply.error(Errno::from_i32(libc::ENODATA)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_listxattr(&self, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.with("listxattr", |db, st| {
            let mut out = Vec::new();
            for (n, _) in st.ws(db)?.xattrs(ino.0)? {
                out.extend_from_slice(&n);
                out.push(0);
            }
            Ok(out)
        });
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn on_removexattr(&self, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !name.as_bytes().starts_with(b"user.") {
            let e = if self.readonly {
                libc::EROFS
            } else {
                XATTR_UNSUPPORTED
            };
            return reply.error(Errno::from_i32(e));
        }
        let r = self.check_writable().and_then(|_| {
            self.with("removexattr", |db, st| {
                st.ws(db)?.remove_xattr(ino.0, name.as_bytes())
            })
        });
        match r {
            Ok(true) => reply.ok(),
            Ok(false) => reply.error(Errno::from_i32(libc::ENODATA)),
            Err(e) => reply.error(erofs::<()>(Err(e), self.readonly).unwrap_err()),
        }
    }
}
