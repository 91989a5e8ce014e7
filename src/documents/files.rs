//! Documents about files: `ls`, `stat`, `cat`, `write`, `log`.

use schemars::JsonSchema;
use serde::Serialize;

use super::ErrorBody;

/// One path's attributes (`stat`, and each entry of `ls`). Fields are in the order of
/// their JSON keys, sorted, as every document prints them: `ls` streams this struct
/// without going through a sorted map.
#[derive(Serialize, JsonSchema, Debug)]
pub struct StatDoc {
    /// BLAKE3 hash (hex) of the content; only for regular files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Change time, nanoseconds since the Unix epoch.
    pub ctime_ns: i64,
    pub gid: u32,
    /// Inode number in the live state (not stable across restores); null for an entry the
    /// live layer has not loaded yet.
    pub ino: Option<u64>,
    /// Permission bits, 4 octal digits (`0644`).
    pub mode: String,
    /// Modification time, RFC 3339 UTC.
    pub mtime: String,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Last path component (`/` for the root).
    pub name: String,
    /// Number of names (hard links).
    pub nlink: u32,
    /// Workspace path.
    pub path: String,
    /// Bytes (0 for a directory, the target's length for a symlink).
    pub size: u64,
    /// The link target as stored; only for symlinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// file, dir, symlink, fifo, socket, char_device or block_device.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub uid: u32,
}

/// `ls --json`: a directory's entries (printed as a stream, entry by entry).
#[derive(Serialize, JsonSchema, Debug)]
pub struct Listing {
    /// The entries, sorted by name bytes (one entry describing `path` when it is not a
    /// directory): at most `--limit` (default 100 with `--json`) from `--cursor` on.
    pub entries: Vec<ListEntry>,
    /// Only when an error came after entries were printed: the listing stops there and
    /// `avfs` exits 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Pass as `--cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// The path listed.
    pub path: String,
    /// How many entries the directory has in all (with `-a`, dot names included).
    pub total: usize,
}

/// One entry of `ls --json`: every attribute, or with `--brief` the few a reader of a
/// listing needs (what the MCP tool `list_dir` returns).
#[derive(Serialize, JsonSchema, Debug)]
#[serde(untagged)]
pub enum ListEntry {
    Full(StatDoc),
    Brief(BriefEntry),
}

/// `ls --brief --json`: an entry's name, type and size. Fields in sorted order: `ls`
/// streams it.
#[derive(Serialize, JsonSchema, Debug)]
pub struct BriefEntry {
    /// Last path component.
    pub name: String,
    /// Bytes (0 for a directory, the target's length for a symlink).
    pub size: u64,
    /// The link target as stored; only for symlinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// file, dir, symlink, fifo, socket, char_device or block_device.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// `cat --json`: a file's content.
#[derive(Serialize, JsonSchema, Debug)]
pub struct FileContent {
    /// The content (utf-8), or two lowercase hex digits per byte (hex).
    pub content: String,
    /// `utf-8` when the content is valid UTF-8, otherwise `hex`.
    pub encoding: &'static str,
    /// The path read.
    pub path: String,
    /// Bytes of content.
    pub size: usize,
}

impl FileContent {
    pub fn of(path: String, data: &[u8]) -> FileContent {
        let (encoding, content) = match std::str::from_utf8(data) {
            Ok(s) => ("utf-8", s.to_string()),
            Err(_) => ("hex", data.iter().map(|b| format!("{b:02x}")).collect()),
        };
        FileContent {
            content,
            encoding,
            path,
            size: data.len(),
        }
    }
}

/// `write --json`: the file written.
#[derive(Serialize, JsonSchema, Debug)]
pub struct FileWritten {
    /// The file written.
    pub path: String,
    /// The file's size afterwards (with `--append`, old plus appended bytes).
    pub size: usize,
}

/// `log --json`: the versions of one path across checkpoints and the live state.
#[derive(Serialize, JsonSchema, Debug)]
pub struct FileLog {
    /// Pass as `--cursor` for the page of older versions; null on the last page.
    pub next_cursor: Option<String>,
    /// The path.
    pub path: String,
    /// How many versions there are in all.
    pub total: usize,
    /// Oldest first; only where the path changed (every one with `--all`): the newest
    /// `--limit` (default 100 with `--json`) before `--cursor`.
    pub versions: Vec<Version>,
}

/// The path in one checkpoint (or live). Fields in sorted order, as `json!` printed them.
#[derive(Serialize, JsonSchema, Debug)]
pub struct Version {
    /// Checkpoint name, or `live`.
    pub at: String,
    /// It differs from the previous version listed (true for the first).
    pub changed: bool,
    /// A file's content hash, a directory's tree hash (BLAKE3, hex); null otherwise.
    pub content_hash: Option<String>,
    /// When the checkpoint was saved, RFC 3339; null for `live`.
    pub created_at: Option<String>,
    /// The path exists there.
    pub exists: bool,
    /// Its permission bits, 4 octal digits; null where it does not exist.
    pub mode: Option<String>,
    /// Its size in bytes; null where it does not exist.
    pub size: Option<u64>,
    /// Its file type; null where it does not exist.
    #[serde(rename = "type")]
    pub kind: Option<&'static str>,
}

/// `output --json`: one page of an exec's kept stdout or stderr.
#[derive(Serialize, JsonSchema, Debug)]
pub struct ExecOutput {
    /// Bytes in `content` (before encoding).
    pub bytes: u64,
    /// The page (utf-8), or two lowercase hex digits per byte (hex).
    pub content: String,
    /// `utf-8` when the page is valid UTF-8, otherwise `hex`. A page given a `--limit`
    /// never ends inside a UTF-8 character: it ends before it, and the next starts there.
    pub encoding: &'static str,
    /// The exec's id (the envelope's `id`).
    pub exec: String,
    /// The run was over when this was read (else its output may still grow).
    pub finished: bool,
    /// Where the next page starts (`--offset`); null at the end of what is kept.
    pub next_offset: Option<u64>,
    /// Where this page starts in the stream.
    pub offset: u64,
    /// Bytes of the stream kept on disk.
    pub size: u64,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// Bytes the stream carried, kept or not (the envelope's `stdout_bytes`).
    pub total_bytes: u64,
    /// The stream was cut on disk: it carried more than a stream keeps (16 MiB by
    /// default); `size` bytes from its start are kept.
    pub truncated: bool,
}

impl ExecOutput {
    /// `data` as `content` and `encoding` (as `cat` has them).
    pub fn encode(data: &[u8]) -> (&'static str, String) {
        match std::str::from_utf8(data) {
            Ok(s) => ("utf-8", s.to_string()),
            Err(_) => ("hex", data.iter().map(|b| format!("{b:02x}")).collect()),
        }
    }
}
