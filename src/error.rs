//! Typed errors for the library, mapped once to exit codes, JSON error kinds and errno.

use std::path::PathBuf;

/// Documented exit codes (see docs/cli.md), shared by the CLI and `avfs mcp` (which must
/// not import the CLI).
pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: not an avfs vault ({reason}); nothing was changed")]
    NotAVault { path: PathBuf, reason: String },
    #[error(
        "{}vault is corrupt ({reason}); nothing was written to it. `avfs vault verify` lists the damage; `avfs vault recover` copies what is intact into a new vault",
        path_prefix(.path)
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{path}: vault format {found} is newer than this avfs understands ({supported}); upgrade avfs"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("no such vault or workspace: {0} (see `avfs vault list`)")]
    NoSuchVault(String),
    /// A read-only command on a fresh home: no vault was ever created.
    #[error(
        "no vault yet: nothing to read. Create one with `avfs vault create NAME`, or write a first file (`avfs write /notes.txt hello`), which creates the vault `default`"
    )]
    NoVaultYet,
    #[error("a vault or workspace named {0:?} already exists")]
    VaultExists(String),
    /// `vault fork --remote` again, into a workspace that is not the fork asked for.
    #[error("a workspace named {name:?} already exists in this vault file: {detail}")]
    ForkDiffers { name: String, detail: String },
    #[error("no such checkpoint: {0} (see `avfs checkpoint list`)")]
    NoSuchCheckpoint(String),
    #[error("a checkpoint named {0:?} already exists in this workspace")]
    CheckpointExists(String),
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: already exists")]
    Exists(String),
    /// `avfs output`: no kept output for that exec id (unknown, nothing ran, or dropped).
    #[error("{0}")]
    NoSuchOutput(String),
    #[error("{0}: not a directory")]
    NotADirectory(String),
    #[error("{0}: is a directory")]
    IsADirectory(String),
    #[error("{0}: directory not empty (use -r to remove it and its contents)")]
    NotEmpty(String),
    #[error("{0}: name too long (at most 255 bytes per component)")]
    NameTooLong(String),
    #[error("{0}: invalid name")]
    InvalidName(String),
    #[error("{0}: invalid argument: {1}")]
    InvalidArgument(String, String),
    #[error("file too large: {0}")]
    TooBig(String),
    #[error(
        "{0}: no room for more extended attributes (a file's attributes fit in 4 KiB, as on ext4); remove some first"
    )]
    XattrsFull(String),
    #[error("{0}: too many levels of symbolic links")]
    SymlinkLoop(String),
    #[error("{0}")]
    Refused(String),
    #[error("{what}: {message}")]
    Host { what: String, message: String },
    #[error("vault is busy (another process holds the write lock); try again")]
    Busy,
    /// Another run holds the workspace (`avfs exec` runs one command at a time per workspace).
    #[error("busy: {0}")]
    RunBusy(String),
    #[error(
        "no space left on the disk that holds the vault; nothing was changed (free some space, or run `avfs gc`)"
    )]
    NoSpace,
    #[error("quota exceeded: {0}")]
    Quota(String),
    #[error("sandbox unavailable: {0}")]
    SandboxUnavailable(String),
    #[error(
        "no such remote: {0} (see `avfs remote list`; add one with `avfs remote add NAME URL`)"
    )]
    NoSuchRemote(String),
    #[error("remote {remote}: {message}")]
    Remote { remote: String, message: String },
    #[error(
        "push rejected: {remote}'s {workspace} moved since this vault last saw it (someone else pushed); run `avfs pull {remote}` first, then push again"
    )]
    PushRejected { remote: String, workspace: String },
    #[error(
        "remote {remote} cannot be trusted to move refs: {missing}, so two machines pushing at once could both be told they succeeded and one update would be lost; nothing was changed on it. Use a store that refuses such writes (AWS S3, MinIO, Cloudflare R2, ...), or, if only one machine ever pushes to it, declare it single-writer: `avfs remote add {remote} URL --single-writer` (the same URL again), or `single_writer = true` in its bucket's section of $AVFS_HOME/remotes.toml"
    )]
    RemoteUnsafe { remote: String, missing: String },
    #[error(
        "remote {remote}: {what} fails its hash or does not decode ({reason}); it was refused and nothing was stored"
    )]
    RemoteCorrupt {
        remote: String,
        what: String,
        reason: String,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// `PATH: `, or nothing when the path is not known (yet).
fn path_prefix(p: &std::path::Path) -> String {
    if p.as_os_str().is_empty() {
        String::new()
    } else {
        format!("{}: ", p.display())
    }
}

impl Error {
    /// Stable machine-readable kind, used in JSON errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NotAVault { .. } => "not_a_vault",
            Error::Corrupt { .. } => "corrupt_vault",
            Error::TooNew { .. } => "vault_too_new",
            Error::NoSuchVault(_) | Error::NoVaultYet => "no_such_vault",
            Error::VaultExists(_) | Error::ForkDiffers { .. } => "vault_exists",
            Error::NoSuchCheckpoint(_) => "no_such_checkpoint",
            Error::CheckpointExists(_) => "checkpoint_exists",
            Error::NotFound(_) => "not_found",
            Error::Exists(_) => "already_exists",
            Error::NoSuchOutput(_) => "no_such_output",
            Error::NotADirectory(_) => "not_a_directory",
            Error::IsADirectory(_) => "is_a_directory",
            Error::NotEmpty(_) => "directory_not_empty",
            Error::NameTooLong(_) => "name_too_long",
            Error::InvalidName(_) => "invalid_name",
            Error::InvalidArgument(..) => "invalid_argument",
            Error::TooBig(_) => "file_too_large",
            Error::XattrsFull(_) => "xattrs_full",
            Error::SymlinkLoop(_) => "symlink_loop",
            Error::Refused(_) => "refused",
            Error::Host { .. } => "host_io",
            Error::Busy | Error::RunBusy(_) => "busy",
            Error::NoSpace => "no_space",
            Error::Quota(_) => "quota_exceeded",
            Error::SandboxUnavailable(_) => "sandbox_unavailable",
            Error::NoSuchRemote(_) => "no_such_remote",
            Error::Remote { .. } => "remote",
            Error::PushRejected { .. } => "push_rejected",
            Error::RemoteUnsafe { .. } => "remote_unsafe",
            Error::RemoteCorrupt { .. } => "remote_corrupt",
            Error::Internal(_) => "internal",
        }
    }

    /// The errno a filesystem call would return for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_)
            | Error::NoSuchOutput(_)
            | Error::NoSuchCheckpoint(_)
            | Error::NoSuchVault(_)
            | Error::NoVaultYet => libc::ENOENT,
            Error::Exists(_)
            | Error::VaultExists(_)
            | Error::ForkDiffers { .. }
            | Error::CheckpointExists(_) => libc::EEXIST,
            Error::NotADirectory(_) => libc::ENOTDIR,
            Error::IsADirectory(_) => libc::EISDIR,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::InvalidName(_) | Error::InvalidArgument(..) => libc::EINVAL,
            Error::SymlinkLoop(_) => libc::ELOOP,
            Error::TooBig(_) => libc::EFBIG,
            Error::XattrsFull(_) => libc::ENOSPC,
            Error::Refused(_) => libc::EPERM,
            Error::Busy | Error::RunBusy(_) => libc::EBUSY,
            Error::NoSpace => libc::ENOSPC,
            Error::Quota(_) => libc::EDQUOT,
            _ => libc::EIO,
        }
    }

    pub fn host(what: impl std::fmt::Display, e: std::io::Error) -> Error {
        Error::Host {
            what: what.to_string(),
            message: e.to_string(),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        // Damage SQLite finds in its pages, and values of a type the schema rules out
        // (a text where an integer belongs, a name that is no longer UTF-8), are a
        // corrupt vault, not a bug of avfs.
        // The path is filled in by the store that ran the statement.
        let corrupt = |reason: String| Error::Corrupt {
            path: PathBuf::new(),
            reason,
        };
        match &e {
            // A page that fails its checksum (`store::pagesum`).
            rusqlite::Error::SqliteFailure(f, _)
                if f.extended_code == rusqlite::ffi::SQLITE_IOERR_DATA =>
            {
                return corrupt(take_page_fault());
            }
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                return corrupt(e.to_string());
            }
            rusqlite::Error::SqliteFailure(_, Some(msg)) if msg.contains("malformed") => {
                return corrupt(msg.clone());
            }
            rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::Utf8Error(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => {
                return corrupt(format!("a stored value has the wrong type: {e}"));
            }
            _ => {}
        }
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && f.code == rusqlite::ErrorCode::DiskFull
        {
            return Error::NoSpace;
        }
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        {
            return Error::Busy;
        }
        Error::Internal(format!("sqlite: {e}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            return Error::NoSpace;
        }
        Error::Host {
            what: "io".into(),
            message: e.to_string(),
        }
    }
}

thread_local! {
    /// The last page whose checksum failed on this thread (file offset, page size), for
    /// the error message: SQLite's error carries only the code. The store's checksum
    /// shim (`store::pagesum`) notes it; the conversion from SQLite's error reads it here,
    /// so errors do not depend on the store.
    static LAST_PAGE_FAULT: std::cell::Cell<Option<(i64, i64)>> = const { std::cell::Cell::new(None) };
}

/// Notes a page that failed its checksum on this thread (file offset, page size).
pub fn note_page_fault(offset: i64, page_size: i64) {
    LAST_PAGE_FAULT.with(|c| c.set(Some((offset, page_size))));
}

/// What to say about a page that failed its checksum on this thread: "page N (at byte
/// offset O)", taken once; a generic phrase when nothing was noted.
pub fn take_page_fault() -> String {
    match LAST_PAGE_FAULT.with(|c| c.take()) {
        Some((ofs, size)) if size > 0 => format!(
            "page {} (at byte {ofs}) does not match its checksum",
            ofs / size + 1
        ),
        _ => "a page does not match its checksum".into(),
    }
}
