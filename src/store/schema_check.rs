//! Is the vault's schema the one its format defines? A flipped byte in `sqlite_schema`
//! can leave a file SQLite still opens but whose tables lack a column (`no such column:
//! ctime_ns` on the first query) or hold one under another name. The schema a format
//! defines is rebuilt once per process by running its migrations on an in-memory
//! database, and the file's `sqlite_schema` is compared with it row by row.
//!
//! Rebuilding costs ~7 ms (parsing every migration's DDL), paid by every process that
//! opens a vault: a third of an `avfs exec -- true`. So the file's schema is first
//! compared by digest with `CURRENT_DIGEST`, the digest of the current format's schema;
//! only a file of an older format, or one that differs, pays for the rebuild (which also
//! names the differences).
//!
//! Some tables are made on first use (`OPTIONAL`: the search index): a file has such a
//! group whole, exactly as its DDL makes it, or not at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use rusqlite::Connection;

use super::schema::{FORMAT_VERSION, MIGRATIONS, SEARCH_TABLES};
use crate::error::Result;

/// `(type, name) -> (table, sql)` of every schema object.
type Schema = BTreeMap<(String, String), (String, Option<String>)>;

fn read_schema(conn: &Connection) -> rusqlite::Result<Schema> {
    let mut stmt = conn.prepare("SELECT type, name, tbl_name, sql FROM main.sqlite_schema")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            (r.get::<_, String>(0)?, r.get::<_, String>(1)?),
            (r.get::<_, String>(2)?, r.get::<_, Option<String>>(3)?),
        ))
    })?;
    let mut out = Schema::new();
    for row in rows {
        let (key, val) = row?;
        // Statistics and sequences are SQLite's own, made on demand.
        if key.1.starts_with("sqlite_stat") || key.1 == "sqlite_sequence" {
            continue;
        }
        out.insert(key, val);
    }
    Ok(out)
}

/// Groups of tables made on first use: a table whose presence says the group is there,
/// and the group's DDL.
const OPTIONAL: &[(&str, &str)] = &[("search_state", SEARCH_TABLES)];

/// The digests of the current format's schema without and with the optional groups
/// (`digest(&with_optional(expected(FORMAT_VERSION), ..))`), checked by a test: a new
/// migration changes them (until the constants follow, opens are only slower, never wrong).
const CURRENT_DIGESTS: [&str; 2] = [
    "db7d70f8c5bf7fa9bf0d45a1396cfd9fc5528a4eef762a1ef15d30fa769b1b6b",
    "b3e41138c740ff2a051bd57352374da607e16d454091242f4a7a70f433749205",
];

/// A digest of every row of `schema`, in order.
fn digest(schema: &Schema) -> String {
    let mut h = blake3::Hasher::new();
    for ((kind, name), (table, sql)) in schema {
        for part in [kind.as_str(), name.as_str(), table.as_str()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        match sql {
            Some(sql) => {
                h.update(&[1]);
                h.update(&(sql.len() as u64).to_le_bytes());
                h.update(sql.as_bytes());
            }
            None => {
                h.update(&[0]);
            }
        }
    }
    h.finalize().to_hex().to_string()
}

/// The schema format `version` defines.
fn expected(version: i64) -> Result<Schema> {
    let steps = MIGRATIONS.iter().take(version.max(0) as usize).copied();
    built(&steps.collect::<Vec<_>>())
}

/// The rows an optional group's DDL makes.
fn group(ddl: &str) -> Result<Schema> {
    built(&[ddl])
}

/// The schema that running `ddl` on an empty database makes, built once per process.
fn built(ddl: &[&str]) -> Result<Schema> {
    static CACHE: OnceLock<Mutex<HashMap<String, Schema>>> = OnceLock::new();
    let key = ddl.concat();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(s.clone());
    }
    let mem = Connection::open_in_memory()?;
    for sql in ddl {
        mem.execute_batch(sql)?;
    }
    let s = read_schema(&mem)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, s.clone());
    Ok(s)
}

/// `want` with each optional group `has` says is there (by its marker table).
fn with_optional(mut want: Schema, has: &dyn Fn(&str) -> bool) -> Result<Schema> {
    for (marker, ddl) in OPTIONAL {
        if has(marker) {
            want.extend(group(ddl)?);
        }
    }
    Ok(want)
}

/// What differs between the file's schema and the one its format `version` defines; empty
/// when they agree. A schema SQLite cannot even read is one difference.
pub fn differences(conn: &Connection, version: i64) -> Result<Vec<String>> {
    let have = match read_schema(conn) {
        Ok(s) => s,
        Err(e) => return Ok(vec![format!("the schema cannot be read: {e}")]),
    };
    if version == FORMAT_VERSION && CURRENT_DIGESTS.contains(&digest(&have).as_str()) {
        return Ok(vec![]);
    }
    let has = |marker: &str| have.contains_key(&("table".to_string(), marker.to_string()));
    let want = with_optional(expected(version)?, &has)?;
    let mut out = Vec::new();
    for ((kind, name), (table, sql)) in &want {
        match have.get(&(kind.clone(), name.clone())) {
            None => out.push(format!("{kind} {name} is missing")),
            Some((t, s)) if t != table || s != sql => out.push(format!(
                "{kind} {name} is not as format {version} defines it"
            )),
            Some(_) => {}
        }
    }
    for (kind, name) in have.keys() {
        if !want.contains_key(&(kind.clone(), name.clone())) {
            out.push(format!("unexpected {kind} {name:?}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path of `differences` is only taken while the constants are right.
    #[test]
    fn current_digests_are_the_current_formats() {
        let bare = expected(FORMAT_VERSION).unwrap();
        let full = with_optional(bare.clone(), &|_| true).unwrap();
        assert_eq!(
            [digest(&bare), digest(&full)],
            CURRENT_DIGESTS,
            "update CURRENT_DIGESTS in src/store/schema_check.rs"
        );
    }

    /// A file with an optional group agrees with its format; one with part of a group, or
    /// a group's table unlike its DDL, does not.
    #[test]
    fn optional_groups_are_whole_or_absent() {
        let db = Connection::open_in_memory().unwrap();
        for sql in MIGRATIONS {
            db.execute_batch(sql).unwrap();
        }
        assert_eq!(
            differences(&db, FORMAT_VERSION).unwrap(),
            Vec::<String>::new()
        );
        db.execute_batch(SEARCH_TABLES).unwrap();
        assert_eq!(
            differences(&db, FORMAT_VERSION).unwrap(),
            Vec::<String>::new()
        );
        db.execute_batch("DROP TABLE search_doc").unwrap();
        assert_eq!(
            differences(&db, FORMAT_VERSION).unwrap(),
            vec![
                "index search_doc_by_text is missing".to_string(),
                "table search_doc is missing".to_string()
            ]
        );
    }

    /// A schema that differs from the current one in any row is not taken for it.
    #[test]
    fn digest_sees_every_field() {
        let want = expected(FORMAT_VERSION).unwrap();
        let base = digest(&want);
        let ((kind, name), (table, sql)) = want
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap();
        let mut other = want.clone();
        other.insert(
            (kind.clone(), name.clone()),
            (format!("{table}x"), sql.clone()),
        );
        assert_ne!(digest(&other), base);
        let mut other = want.clone();
        other.insert((kind.clone(), name.clone()), (table.clone(), None));
        assert_ne!(digest(&other), base);
        let mut other = want.clone();
        other.remove(&(kind, name));
        assert_ne!(digest(&other), base);
    }
}
