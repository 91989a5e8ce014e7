//! Full-text search over a workspace's text files (`avfs search`), with SQLite FTS5.
//!
//! Text is indexed once per distinct content hash (`search_text` + the contentless
//! `search_fts`), shared by every path, version and fork that holds it. Each workspace
//! maps its paths to indexed contents (`search_doc`) and records the root tree the index
//! reflects (`search_state`); a vault's first search makes these tables (format 10).
//! Bringing the index up to date is a diff of that root and the current one, so it costs
//! O(changes); only content never seen before is read and tokenized. A workspace without an index (or whose indexed root `gc` removed) is
//! indexed by one walk of its tree, still reading only unseen content.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::diff::{DiffOptions, diff_roots_with};
use crate::error::{Error, Result};
use crate::store::objects::{Entry, Hash, Kind};
use crate::walk::{Next, is_binary, walk};
use crate::workspace::Workspace;
use crate::workspace::path::{display, join_bytes};

/// Files larger than this are not indexed.
pub const INDEX_LIMIT: u64 = 8 * 1024 * 1024;

/// What bringing the index up to date did.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct IndexUpdate {
    /// The root tree the index now reflects.
    pub root: String,
    /// True when the whole tree was walked (first search in this workspace, or its
    /// previous root was removed by gc); false for an incremental update.
    pub full: bool,
    /// Files (paths) this update added, re-indexed or dropped.
    pub files_updated: u64,
    /// Contents read and tokenized by this update (content seen before is not read again).
    pub contents_indexed: u64,
    /// Text files in the index of this workspace.
    pub documents: u64,
}

fn stored_root(db: &Connection, ws: i64) -> Result<Option<Hash>> {
    let r: Option<Vec<u8>> = db
        .prepare_cached("SELECT root FROM search_state WHERE workspace = ?1")?
        .query_row([ws], |r| r.get(0))
        .optional()?;
    r.map(|b| Hash::from_slice(&b)).transpose()
}

fn tree_exists(db: &Connection, h: &Hash) -> Result<bool> {
    Ok(db
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM tree WHERE hash = ?1)")?
        .query_row([&h.0[..]], |r| r.get(0))?)
}

struct Indexer<'a> {
    db: &'a Connection,
    ws: i64,
    stats: IndexUpdate,
    progress: &'a dyn Fn(u64),
}

impl Indexer<'_> {
    fn remove(&mut self, path: &[u8]) -> Result<()> {
        let text: Option<i64> = self
            .db
            .prepare_cached(
                "DELETE FROM search_doc WHERE workspace = ?1 AND path = ?2 RETURNING text",
            )?
            .query_row(params![self.ws, path], |r| r.get(0))
            .optional()?;
        if let Some(t) = text {
            drop_text_if_unused(self.db, t)?;
        }
        Ok(())
    }

    fn add(&mut self, path: &[u8], e: &Entry) -> Result<()> {
        let Some(hash) = e.hash else { return Ok(()) };
        let known: Option<i64> = self
            .db
            .prepare_cached("SELECT id FROM search_text WHERE hash = ?1")?
            .query_row([&hash.0[..]], |r| r.get(0))
            .optional()?;
        let id = match known {
            Some(id) => id,
            None => {
                let text = if e.size <= INDEX_LIMIT {
                    let data = crate::store::content::read_all(self.db, &hash, e.size)?;
                    (!is_binary(&data)).then(|| String::from_utf8_lossy(&data).into_owned())
                } else {
                    None
                };
                self.db
                    .prepare_cached(
                        "INSERT INTO search_text (hash, size, indexed) VALUES (?1, ?2, ?3)",
                    )?
                    .execute(params![&hash.0[..], e.size as i64, text.is_some()])?;
                let id = self.db.last_insert_rowid();
                if let Some(t) = text {
                    self.db
                        .prepare_cached("INSERT INTO search_fts (rowid, body) VALUES (?1, ?2)")?
                        .execute(params![id, t])?;
                    self.stats.contents_indexed += 1;
                }
                id
            }
        };
        self.db
            .prepare_cached(
                "INSERT OR REPLACE INTO search_doc (workspace, path, text) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![self.ws, path, id])?;
        Ok(())
    }

    /// Counts one file updated, for the report and the progress bar.
    fn counted(&mut self) {
        self.stats.files_updated += 1;
        if self.stats.files_updated.is_multiple_of(256) {
            (self.progress)(self.stats.files_updated);
        }
    }
}

/// Deletes an indexed content once no document refers to it.
fn drop_text_if_unused(db: &Connection, text: i64) -> Result<()> {
    let used: bool = db
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM search_doc WHERE text = ?1)")?
        .query_row([text], |r| r.get(0))?;
    if !used {
        let indexed: bool = db
            .prepare_cached("DELETE FROM search_text WHERE id = ?1 RETURNING indexed")?
            .query_row([text], |r| r.get(0))?;
        if indexed {
            db.prepare_cached("DELETE FROM search_fts WHERE rowid = ?1")?
                .execute([text])?;
        }
    }
    Ok(())
}

/// Drops a workspace's index (the workspace is being deleted): the rows live in the
/// vault's schema, so the store removes them (`workspace::delete_workspace` calls it).
pub use crate::store::search_rows::forget_workspace;
use crate::store::search_rows::{ensure_tables, has_tables, purge_unused_texts};

/// Brings the workspace's index up to date with its live state (flushed first).
pub fn update(ws: &mut Workspace, progress: &dyn Fn(u64)) -> Result<IndexUpdate> {
    let db = ws.db;
    let id = ws.info.id;
    // A vault's first search makes the index's tables (format 10).
    ensure_tables(db)?;
    let current = ws.flush()?;
    // The changes since the indexed root; none (a full walk) when there is no index yet,
    // or when its root, or a tree below it, is gone (removed by gc).
    let changes = match stored_root(db, id)? {
        Some(r) if r == current => Some(vec![]),
        Some(r) if tree_exists(db, &r)? => {
            diff_roots_with(db, &r, &current, DiffOptions { xattrs: false }).ok()
        }
        _ => None,
    };
    let mut ix = Indexer {
        db,
        ws: id,
        stats: IndexUpdate {
            root: current.to_hex(),
            full: changes.is_none(),
            ..Default::default()
        },
        progress,
    };
    match changes {
        Some(changes) => {
            for c in changes {
                // The text is the same: nothing to re-index.
                if c.kind == crate::diff::ChangeKind::ModeChanged {
                    continue;
                }
                let path = join_bytes(&c.comps);
                let before = c.before.as_ref().filter(|e| e.kind == Kind::File);
                let after = c.after.as_ref().filter(|e| e.kind == Kind::File);
                if before.is_none() && after.is_none() {
                    continue;
                }
                if before.is_some() {
                    ix.remove(&path)?;
                }
                if let Some(e) = after {
                    ix.add(&path, e)?;
                }
                ix.counted();
            }
        }
        None => {
            db.execute("DELETE FROM search_doc WHERE workspace = ?1", [id])?;
            walk(db, &current, &[], None, &mut |comps, e, _| {
                if e.kind == Kind::File {
                    ix.add(&join_bytes(comps), e)?;
                    ix.counted();
                }
                Ok(Next::Descend)
            })?;
            purge_unused_texts(db)?;
        }
    }
    db.prepare_cached("INSERT OR REPLACE INTO search_state (workspace, root) VALUES (?1, ?2)")?
        .execute(params![id, &current.0[..]])?;
    ix.stats.documents = db
        .prepare_cached(
            "SELECT COUNT(*) FROM search_doc d JOIN search_text t ON t.id = d.text WHERE d.workspace = ?1 AND t.indexed = 1",
        )?
        .query_row([id], |r| r.get::<_, i64>(0))? as u64;
    Ok(ix.stats)
}

/// One search result.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Hit {
    pub path: String,
    /// Relevance (BM25): higher is better.
    pub score: f64,
    /// Line of the snippet, from 1; `null` when no line holds a query word as typed.
    pub line: Option<usize>,
    /// The best-matching line, cut to about 160 characters around the first match.
    pub snippet: String,
    #[serde(skip)]
    pub terms: Vec<String>,
}

/// Turns a plain query into FTS5 syntax: every word must occur; a word ending in `*`
/// matches as a prefix.
pub fn plain_query(q: &str) -> Result<String> {
    let mut parts = Vec::new();
    for w in q.split_whitespace() {
        let (w, prefix) = match w.strip_suffix('*') {
            Some(s) => (s, true),
            None => (w, false),
        };
        if w.is_empty() {
            continue;
        }
        let quoted = format!("\"{}\"", w.replace('"', "\"\""));
        parts.push(if prefix { format!("{quoted}*") } else { quoted });
    }
    if parts.is_empty() {
        return Err(Error::InvalidArgument(
            q.into(),
            "the query has no words to search for".into(),
        ));
    }
    Ok(parts.join(" "))
}

/// The words of a query, lower-cased, for finding the snippet line.
fn query_terms(q: &str) -> Vec<String> {
    let mut out: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "AND" | "OR" | "NOT" | "NEAR"))
        .map(|w| w.to_lowercase())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Runs an FTS5 `query` over the workspace's index (bring it up to date first), best
/// results first, only under `under` (components of a path; empty for everything).
pub fn query(
    db: &Connection,
    ws: i64,
    fts_query: &str,
    shown_query: &str,
    under: &[Vec<u8>],
    limit: usize,
) -> Result<Vec<Hit>> {
    // No index yet (`update` was not run on this vault): nothing is found.
    if !has_tables(db)? {
        return Ok(vec![]);
    }
    let (lo, hi, exact) = if under.is_empty() {
        (vec![], vec![], vec![])
    } else {
        let p = join_bytes(under);
        let mut lo = p.clone();
        lo.push(b'/');
        let mut hi = p.clone();
        hi.push(b'/' + 1);
        (lo, hi, p)
    };
    let mut stmt = db.prepare_cached(
        "SELECT d.path, t.hash, t.size, bm25(search_fts) AS rank
         FROM search_fts JOIN search_doc d ON d.text = search_fts.rowid JOIN search_text t ON t.id = d.text
         WHERE search_fts MATCH ?1 AND d.workspace = ?2
           AND (d.path = ?3 OR (d.path >= ?4 AND d.path < ?5) OR ?6)
         ORDER BY rank, d.path LIMIT ?7",
    )?;
    let rows = stmt
        .query_map(
            params![fts_query, ws, exact, lo, hi, under.is_empty(), limit as i64],
            |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, f64>(3)?,
                ))
            },
        )
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| match &e {
            rusqlite::Error::SqliteFailure(_, Some(msg))
                if msg.contains("fts5") || msg.contains("syntax") =>
            {
                Error::InvalidArgument(shown_query.into(), format!("not a valid query: {msg}"))
            }
            _ => Error::from(e),
        })?;
    let terms = query_terms(shown_query);
    let mut out = Vec::with_capacity(rows.len());
    for (path, hash, size, rank) in rows {
        let hash = Hash::from_slice(&hash)?;
        let data = crate::store::content::read_all(db, &hash, size as u64)?;
        let text = String::from_utf8_lossy(&data);
        let (line, snippet) = snippet(&text, &terms);
        let comps: Vec<Vec<u8>> = path
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty())
            .map(|c| c.to_vec())
            .collect();
        out.push(Hit {
            path: display(&comps),
            score: -rank,
            line,
            snippet,
            terms: terms.clone(),
        });
    }
    Ok(out)
}

/// The line holding the most query words (the first such line), cut to about 160
/// characters around the first one.
fn snippet(text: &str, terms: &[String]) -> (Option<usize>, String) {
    let mut best: Option<(usize, usize, &str)> = None;
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        let hits = terms.iter().filter(|t| lower.contains(t.as_str())).count();
        if hits > 0 && best.is_none_or(|(b, _, _)| hits > b) {
            best = Some((hits, n, line));
            if hits == terms.len() {
                break;
            }
        }
    }
    let Some((_, n, line)) = best else {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return (None, cut(first.trim(), 0));
    };
    let line = line.trim();
    let lower = line.to_lowercase();
    // Byte offsets of the lower-cased line match the line's only for ASCII; map through
    // characters to stay on boundaries.
    let first_char = terms
        .iter()
        .filter_map(|t| lower.find(t.as_str()))
        .min()
        .map(|b| lower[..b].chars().count())
        .unwrap_or(0);
    (Some(n + 1), cut(line, first_char))
}

fn cut(line: &str, around: usize) -> String {
    const WIDTH: usize = 160;
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= WIDTH {
        return line.to_string();
    }
    let start = around.saturating_sub(40).min(chars.len() - WIDTH);
    let end = start + WIDTH;
    let mut s = String::new();
    if start > 0 {
        s.push('…');
    }
    s.extend(&chars[start..end]);
    if end < chars.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_queries_quote_every_word() {
        assert_eq!(plain_query("foo bar").unwrap(), "\"foo\" \"bar\"");
        assert_eq!(plain_query("pre* a\"b").unwrap(), "\"pre\"* \"a\"\"b\"");
        assert!(plain_query("  * ").is_err());
    }

    #[test]
    fn snippets_pick_the_line_with_most_words() {
        let t = "intro\nonly alpha here\nalpha and beta together\nbeta\n";
        let terms = query_terms("alpha beta");
        assert_eq!(
            snippet(t, &terms),
            (Some(3), "alpha and beta together".into())
        );
        assert_eq!(snippet("x\n\n", &terms), (None, "x".into()));
        let long = format!("{}needle{}", "a".repeat(300), "b".repeat(300));
        let (_, s) = snippet(&long, &query_terms("needle"));
        assert!(
            s.starts_with('…') && s.ends_with('…') && s.contains("needle"),
            "{s}"
        );
    }
}
