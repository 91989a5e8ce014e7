//! The vault file's schema and its migrations.
//!
//! `PRAGMA user_version` holds the format version; `PRAGMA application_id` marks the
//! file as an avfs vault so a foreign SQLite file is recognised before anything is written.

/// "avfs" in ASCII, stored in the SQLite header so foreign files are refused early.
pub const APPLICATION_ID: u32 = 0x6176_6673;

/// The newest vault format this build reads and writes.
pub const FORMAT_VERSION: i64 = 10;

/// Migration `i` upgrades a file from format `i` to `i + 1` (index 0 creates format 1).
pub const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10];

const V1: &str = r#"
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;

-- Immutable, content-addressed objects.
CREATE TABLE chunk (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE content (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, size INTEGER NOT NULL, chunks BLOB NOT NULL);
CREATE TABLE tree (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, data BLOB NOT NULL);

-- Named, mutable views: a base root plus the current live layer.
CREATE TABLE workspace (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  base_root BLOB NOT NULL,
  layer INTEGER NOT NULL,
  next_ino INTEGER NOT NULL,
  head INTEGER,
  parent_id INTEGER,
  parent_name TEXT,
  parent_checkpoint TEXT,
  created_at_ns INTEGER NOT NULL
);
CREATE TABLE layer (
  id INTEGER PRIMARY KEY,
  workspace INTEGER NOT NULL,
  links_closed INTEGER NOT NULL DEFAULT 0,
  dead INTEGER NOT NULL DEFAULT 0
);

-- The live layer: exactly the part of the tree that was looked at or changed.
CREATE TABLE inode (
  layer INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  mode INTEGER NOT NULL,
  uid INTEGER NOT NULL,
  gid INTEGER NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL,
  nlink INTEGER NOT NULL,
  rdev INTEGER NOT NULL DEFAULT 0,
  link_group INTEGER NOT NULL DEFAULT 0,
  hash BLOB,
  target BLOB,
  materialized INTEGER NOT NULL DEFAULT 0,
  dirty INTEGER NOT NULL DEFAULT 0,
  has_links INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (layer, ino)
) WITHOUT ROWID;
CREATE TABLE dentry (
  layer INTEGER NOT NULL,
  parent INTEGER NOT NULL,
  name BLOB NOT NULL,
  ino INTEGER NOT NULL,
  PRIMARY KEY (layer, parent, name)
) WITHOUT ROWID;
CREATE INDEX dentry_by_ino ON dentry (layer, ino);
CREATE TABLE xattr (
  layer INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  name BLOB NOT NULL,
  value BLOB NOT NULL,
  PRIMARY KEY (layer, ino, name)
) WITHOUT ROWID;
CREATE TABLE linkgroup (
  layer INTEGER NOT NULL,
  grp INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  PRIMARY KEY (layer, grp)
) WITHOUT ROWID;

CREATE TABLE checkpoint (
  id INTEGER PRIMARY KEY,
  workspace INTEGER NOT NULL,
  name TEXT NOT NULL,
  root BLOB NOT NULL,
  parent INTEGER,
  created_at_ns INTEGER NOT NULL,
  origin TEXT NOT NULL,
  message TEXT,
  UNIQUE (workspace, name)
);

-- Append-only, hash-chained.
CREATE TABLE audit (
  id INTEGER PRIMARY KEY,
  ts_ns INTEGER NOT NULL,
  workspace TEXT,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  detail TEXT NOT NULL,
  prev_hash BLOB NOT NULL,
  hash BLOB NOT NULL
);
"#;

/// Format 2: pending and decided approvals of `avfs exec`.
const V2: &str = r#"
CREATE TABLE approval (
  id TEXT PRIMARY KEY,
  created_at_ns INTEGER NOT NULL,
  expires_at_ns INTEGER NOT NULL,
  workspace TEXT NOT NULL,
  request TEXT NOT NULL,
  decision TEXT NOT NULL,
  state TEXT NOT NULL,
  decided_at_ns INTEGER,
  used_at_ns INTEGER
);
"#;

/// Format 3: quotas, and per-tree totals (files and bytes below a directory) so a
/// workspace's usage is known from its root without walking it. Trees written by older
/// formats have NULL totals, computed on first use.
const V3: &str = r#"
ALTER TABLE tree ADD COLUMN files INTEGER;
ALTER TABLE tree ADD COLUMN bytes INTEGER;
CREATE TABLE quota (
  scope TEXT PRIMARY KEY,
  max_bytes INTEGER,
  max_files INTEGER,
  max_file_size INTEGER
);
"#;

/// The full-text index of `avfs search` (SQLite FTS5). Text is indexed once per
/// distinct content (`search_text`, whose id is the FTS rowid); each workspace maps its
/// paths to indexed contents (`search_doc`) and remembers the root tree the index
/// reflects (`search_state`), so bringing it up to date is a diff of two roots:
/// O(changes). The FTS table is contentless: snippets are cut from the stored files, so
/// the text is not stored twice. Everything here is derived data, rebuilt when missing.
///
/// Format 4 made these tables with the vault; since format 10 the first search of a vault
/// makes them (`search::update`), and a vault never searched does without their nine
/// pages (144 KiB). A file of formats 4-9 keeps the ones it has; `schema_check` takes the
/// group as optional, whole or absent.
pub const SEARCH_TABLES: &str = r#"
-- indexed = 0: binary or too large, known so it is not read again.
CREATE TABLE search_text (
  id INTEGER PRIMARY KEY,
  hash BLOB NOT NULL UNIQUE,
  size INTEGER NOT NULL,
  indexed INTEGER NOT NULL
);
CREATE VIRTUAL TABLE search_fts USING fts5(
  body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE search_doc (
  workspace INTEGER NOT NULL,
  path BLOB NOT NULL,
  text INTEGER NOT NULL,
  PRIMARY KEY (workspace, path)
) WITHOUT ROWID;
CREATE INDEX search_doc_by_text ON search_doc (text);
CREATE TABLE search_state (workspace INTEGER PRIMARY KEY, root BLOB NOT NULL);
"#;

/// Format 4 made `SEARCH_TABLES`; they are made on first use now (format 10), so the
/// step to format 4 makes nothing.
const V4: &str = "";

/// Format 5: file content as extents, and access times.
/// * `content.format`: 0 = the dense chunk list of formats 1-4 (one 32-byte hash per 64 KiB
///   block, zeros for a hole), 1 = an extent list (block, chunk) with holes left out, so a
///   sparse file costs what it holds (see `store::content`). Old rows stay as they are.
/// * `inode.atime_ns`: the access time a program set (utimensat, `touch -a`); NULL reads
///   as the modification time. Reads never change it (the mount is `noatime`).
/// * `reclaim_young`: objects stored before the last space reclaim that only the live
///   state references, so the next one looks at them again (see `reclaim`); `tbl` is 0
///   for chunk, 1 for content, 2 for tree.
const V5: &str = r#"
ALTER TABLE content ADD COLUMN format INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inode ADD COLUMN atime_ns INTEGER;
CREATE TABLE reclaim_young (tbl INTEGER NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (tbl, id)) WITHOUT ROWID;
"#;

/// Format 6: each workspace row and checkpoint records the audit row it was written after
/// (`audit_head`, the id of the newest audit row then), so cutting rows off the end of
/// the audit log is caught by `audit verify` even when `meta.audit_head` is set to match.
/// NULL where unknown (rows written by older formats).
const V6: &str = r#"
ALTER TABLE workspace ADD COLUMN audit_head INTEGER;
ALTER TABLE checkpoint ADD COLUMN audit_head INTEGER;
"#;

/// Format 7: remotes (`avfs remote`, `push`, `fetch`, `clone`). `remote` names object
/// stores by URL only: credentials never enter the vault. `remote_pack` and
/// `remote_object` cache the remote's pack indexes (which object lies where), so a push
/// sends only what the remote lacks and a lazy clone fetches a missing object by range;
/// an object listed there but absent from `chunk`/`content`/`tree` is *promised*: not
/// fetched yet, not missing. `checkpoint_object` gives checkpoints their identity across
/// machines: an immutable, content-addressed record (root, parents, name, time, origin,
/// message); `checkpoint` is the local checkpoint it stands for, if any (a trigger clears
/// it when that checkpoint is deleted, so a reused id never inherits it). `remote_ref`
/// is what each remote's workspaces pointed at when last fetched or pushed.
const V7: &str = r#"
CREATE TABLE remote (
  name TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  created_at_ns INTEGER NOT NULL
);
CREATE TABLE remote_pack (
  id INTEGER PRIMARY KEY,
  remote TEXT NOT NULL,
  index_name TEXT NOT NULL,
  pack_name TEXT NOT NULL,
  UNIQUE (remote, index_name)
);
CREATE TABLE remote_object (
  hash BLOB NOT NULL,
  pack INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  offset INTEGER NOT NULL,
  length INTEGER NOT NULL,
  PRIMARY KEY (hash, pack)
) WITHOUT ROWID;
CREATE INDEX remote_object_by_pack ON remote_object (pack, offset);
CREATE TABLE remote_ref (
  remote TEXT NOT NULL,
  name TEXT NOT NULL,
  head BLOB NOT NULL,
  updated_at_ns INTEGER NOT NULL,
  PRIMARY KEY (remote, name)
) WITHOUT ROWID;
CREATE TABLE checkpoint_object (
  hash BLOB PRIMARY KEY,
  data BLOB NOT NULL,
  checkpoint INTEGER UNIQUE
);
CREATE TRIGGER checkpoint_object_forget AFTER DELETE ON checkpoint BEGIN
  UPDATE checkpoint_object SET checkpoint = NULL WHERE checkpoint = old.id;
END;
"#;

/// Format 8: each remote pack's index is kept whole, as one blob in its `remote_pack` row
/// (`entries`: fixed-width records sorted by hash, see `remote::catalog`), instead of a
/// `remote_object` row per object: a lazy clone of 100 000 files spent 76 % of its CPU
/// inserting those rows. New packs leave `remote_object` empty; rows older builds wrote
/// are still read for packs whose `entries` is NULL.
const V8: &str = r#"
ALTER TABLE remote_pack ADD COLUMN entries BLOB;
"#;

/// How `chunk.data` holds the chunk's bytes: 0 as they are, 1 LZ4-compressed, 2
/// zstd-compressed (`store::objects::compress_chunk`). Older rows stay 0; the hash is always of the bytes.
const V9: &str = r#"
ALTER TABLE chunk ADD COLUMN codec INTEGER NOT NULL DEFAULT 0;
"#;

/// Format 10: the search index's tables (`SEARCH_TABLES`) are made by the first search,
/// not with the vault. Nothing changes in a file upgraded to it; an older avfs, which
/// expects them, refuses a format 10 file (`vault_too_new`).
const V10: &str = "";
