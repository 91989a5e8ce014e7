//! Is the vault's schema the one its format defines? A flipped byte in `sqlite_schema`
//! can leave a file SQLite still opens but whose tables lack a column (`no such column:
//! ctime_ns` on the first query) or hold one under another name. The schema a format
//! defines is rebuilt once per process by running its migrations on an in-memory
//! database, and the file's `sqlite_schema` is compared with it row by row.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use rusqlite::Connection;

use super::schema::MIGRATIONS;
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

/// The schema format `version` defines.
fn expected(version: i64) -> Result<Schema> {
    static CACHE: OnceLock<Mutex<HashMap<i64, Schema>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&version)
    {
        return Ok(s.clone());
    }
    let mem = Connection::open_in_memory()?;
    for sql in MIGRATIONS.iter().take(version.max(0) as usize) {
        mem.execute_batch(sql)?;
    }
    let s = read_schema(&mem)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(version, s.clone());
    Ok(s)
}

/// What differs between the file's schema and the one its format `version` defines; empty
/// when they agree. A schema SQLite cannot even read is one difference.
pub fn differences(conn: &Connection, version: i64) -> Result<Vec<String>> {
    let want = expected(version)?;
    let have = match read_schema(conn) {
        Ok(s) => s,
        Err(e) => return Ok(vec![format!("the schema cannot be read: {e}")]),
    };
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
