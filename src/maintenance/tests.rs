use rusqlite::{Connection, params};

use super::stats::count;
use super::*;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::audit;
use crate::store::objects::{self, CHUNK_SIZE, Hash, Kind};
fn put_content(db: &rusqlite::Connection, data: &[u8]) -> Result<Hash> {
    Ok(crate::store::content::write_bytes(db, data)?.0)
}
use crate::workspace::{Inode, NewNode, ROOT_INO, Workspace, create_workspace};

fn vault() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("v.avfs")).unwrap();
    (dir, store)
}

fn put_file(ws: &Workspace, parent: &Inode, name: &[u8], data: &[u8]) -> Result<Inode> {
    let h = put_content(ws.db, data)?;
    ws.create(
        parent,
        name,
        NewNode {
            content: Some((h, data.len() as u64)),
            ..NewNode::new(Kind::File, 0o644)
        },
    )
}

fn root(ws: &Workspace) -> Inode {
    ws.get(ROOT_INO).unwrap()
}

fn has_chunk(db: &Connection, h: &Hash) -> bool {
    db.query_row(
        "SELECT COUNT(*) FROM chunk WHERE hash = ?1",
        [&h.0[..]],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}
fn has_content(db: &Connection, h: &Hash) -> bool {
    db.query_row(
        "SELECT COUNT(*) FROM content WHERE hash = ?1",
        [&h.0[..]],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}
fn has_tree(db: &Connection, h: &Hash) -> bool {
    db.query_row(
        "SELECT COUNT(*) FROM tree WHERE hash = ?1",
        [&h.0[..]],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        == 1
}

/// A multi-chunk payload whose chunks are unlike any other test data.
/// Bytes that do not compress (an xorshift stream), so they are stored as they are and the
/// byte counts below are exact.
fn big(seed: u8, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (seed as u64 + 1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn kinds(r: &VerifyReport) -> Vec<&str> {
    r.problems.iter().map(|p| p.kind.as_str()).collect()
}

#[test]
fn gc_removes_exactly_the_unreferenced() -> Result<()> {
    let (_dir, mut store) = vault();
    let big_b = big(1, 3 * CHUNK_SIZE + 5);
    store.write(|db| {
        let info = create_workspace(db, "main", None, None)?;
        let empty_root = info.base_root;
        let mut ws = Workspace::open(db, "main")?;

        // cp1: x.txt and big.bin; both disappear from everything but cp1.
        put_file(&ws, &root(&ws), b"x.txt", b"only in cp1")?;
        put_file(&ws, &root(&ws), b"big.bin", &big_b)?;
        let r1 = ws.checkpoint(Some("cp1"), None, "test")?.checkpoint.root;
        ws.unlink(&root(&ws), b"x.txt")?;
        ws.unlink(&root(&ws), b"big.bin")?;

        // cp2: y.txt in a subdirectory; the fork keeps it after cp2 is deleted.
        let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
        put_file(&ws, &d, b"y.txt", b"kept by the fork")?;
        let r2 = ws.checkpoint(Some("cp2"), None, "test")?.checkpoint.root;
        let fork = ws.fork("f", None)?;
        assert_eq!(fork.base_root, r2);

        // keep: k.txt only in checkpoint "keep".
        ws.remove_tree(&root(&ws), b"d")?;
        put_file(&ws, &root(&ws), b"k.txt", b"kept by a checkpoint")?;
        let rk = ws.checkpoint(Some("keep"), None, "test")?.checkpoint.root;
        ws.unlink(&root(&ws), b"k.txt")?;

        // z.txt only in the live layer (never flushed).
        put_file(&ws, &root(&ws), b"z.txt", b"only live")?;
        // A big file only in the live layer.
        let big_live = big(2, CHUNK_SIZE + 1);
        put_file(&ws, &root(&ws), b"live.bin", &big_live)?;
        // An orphan nobody references.
        let orphan = put_content(db, b"orphan bytes")?;

        ws.delete_checkpoint("cp1")?;
        ws.delete_checkpoint("cp2")?;

        let before = verify(db)?;
        assert!(before.ok, "{:?}", before.problems);

        let report = gc(db)?;
        // x.txt + 4 chunks of big.bin + the orphan.
        assert_eq!(report.chunks_removed, 6, "{report:?}");
        assert_eq!(report.contents_removed, 1, "{report:?}");
        // The empty root of the new workspace and cp1's root.
        assert_eq!(report.trees_removed, 2, "{report:?}");
        assert_eq!(
            report.bytes_freed,
            (b"only in cp1".len() + big_b.len() + b"orphan bytes".len()) as u64
        );

        assert!(!has_chunk(db, &Hash::of(b"only in cp1")));
        assert!(!has_content(
            db,
            &crate::store::content::hash_of(&crate::store::content::Extents {
                size: big_b.len() as u64,
                list: big_b
                    .chunks(CHUNK_SIZE)
                    .enumerate()
                    .map(|(i, c)| (i as u64, Hash::of(c)))
                    .collect(),
            })
        ));
        for c in big_b.chunks(CHUNK_SIZE) {
            assert!(!has_chunk(db, &Hash::of(c)));
        }
        assert!(!has_chunk(db, &orphan));
        assert!(!has_tree(db, &r1));
        assert!(!has_tree(db, &empty_root));

        assert!(has_tree(db, &r2) && has_tree(db, &rk));
        assert!(has_chunk(db, &Hash::of(b"kept by the fork")));
        assert!(has_chunk(db, &Hash::of(b"kept by a checkpoint")));
        assert!(has_chunk(db, &Hash::of(b"only live")));
        for c in big_live.chunks(CHUNK_SIZE) {
            assert!(has_chunk(db, &Hash::of(c)));
        }

        let after = verify(db)?;
        assert!(after.ok, "{:?}", after.problems);

        // Everything still reads back.
        let f = Workspace::open(db, "f")?;
        let fd = f.lookup(&root(&f), b"d")?.unwrap();
        let y = f.lookup(&fd, b"y.txt")?.unwrap();
        assert_eq!(f.read(&y, 0, 100)?, b"kept by the fork");
        let z = ws.lookup(&root(&ws), b"z.txt")?.unwrap();
        assert_eq!(ws.read(&z, 0, 100)?, b"only live");
        let lb = ws.lookup(&root(&ws), b"live.bin")?.unwrap();
        assert_eq!(ws.read(&lb, 0, big_live.len())?, big_live);
        let keep = ws.find_checkpoint("keep")?;
        ws.restore(&keep)?;
        let k = ws.lookup(&root(&ws), b"k.txt")?.unwrap();
        assert_eq!(ws.read(&k, 0, 100)?, b"kept by a checkpoint");

        // The restore replaced the live layer (gc purges its rows): z.txt and live.bin
        // become garbage.
        let again = gc(db)?;
        assert_eq!(
            (
                again.chunks_removed,
                again.contents_removed,
                again.trees_removed,
                again.layers_purged
            ),
            (3, 1, 0, 1),
            "{again:?}"
        );
        let third = gc(db)?;
        assert_eq!(
            third,
            GcReport {
                objects_kept: third.objects_kept,
                ..Default::default()
            }
        );
        assert!(verify(db)?.ok);
        Ok(())
    })
}

#[test]
fn gc_keeps_shared_subtrees_and_dirty_state() -> Result<()> {
    let (_dir, mut store) = vault();
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        let mut dir = root(&ws);
        for level in 0..20 {
            dir = ws.create(
                &dir,
                format!("l{level}").as_bytes(),
                NewNode::new(Kind::Dir, 0o755),
            )?;
            put_file(&ws, &dir, b"f", format!("file at {level}").as_bytes())?;
        }
        ws.checkpoint(Some("base"), None, "test")?;
        for i in 0..5 {
            ws.fork(&format!("fork{i}"), None)?;
        }
        // A change in one fork, left dirty (not flushed).
        let mut f = Workspace::open(db, "fork3")?;
        let l0 = f.lookup(&root(&f), b"l0")?.unwrap();
        let old = f.lookup(&l0, b"f")?.unwrap();
        let h = put_content(db, b"changed in fork3")?;
        f.set_content(old.ino, h, 16)?;
        ws.delete_checkpoint("base")?;

        let r = gc(db)?;
        assert_eq!(r.chunks_removed + r.contents_removed, 0, "{r:?}");
        // 20 directories + root, plus 20 file chunks, plus the fork's new chunk.
        assert!(r.objects_kept >= 42, "{r:?}");
        assert!(verify(db)?.ok);
        let l0 = f.lookup(&root(&f), b"l0")?.unwrap();
        let file = f.lookup(&l0, b"f")?.unwrap();
        assert_eq!(f.read(&file, 0, 100)?, b"changed in fork3");
        f.flush()?;
        assert!(verify(db)?.ok);
        // The old l0 file is still in the other forks.
        let other = Workspace::open(db, "fork1")?;
        let l0 = other.lookup(&root(&other), b"l0")?.unwrap();
        let file = other.lookup(&l0, b"f")?.unwrap();
        assert_eq!(other.read(&file, 0, 100)?, b"file at 0");
        Ok(())
    })
}

#[test]
fn gc_purges_dead_layers_and_refuses_a_damaged_graph() -> Result<()> {
    let (_dir, mut store) = vault();
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
        put_file(&ws, &d, b"a", b"aaa")?;
        let cp = ws.checkpoint(Some("one"), None, "test")?.checkpoint;
        put_file(&ws, &root(&ws), b"later", b"later")?;
        // A dead layer left behind (restore purges its own; simulate an interrupted one).
        db.execute("INSERT INTO layer (workspace, dead) VALUES (?1, 1)", [ws.info.id])?;
        let dead = db.last_insert_rowid();
        db.execute(
            "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
             VALUES (?1, 1, 1, 420, 0, 0, 5, 0, 0, 1, ?2)",
            params![dead, &Hash::of(b"in a dead layer").0[..]],
        )?;
        let r = gc(db)?;
        assert_eq!(r.layers_purged, 1);
        assert_eq!(db.query_row("SELECT COUNT(*) FROM inode WHERE layer = ?1", [dead], |r| r.get::<_, i64>(0))?, 0);

        // Damage: the subtree of "d" goes missing. gc must refuse and delete nothing.
        let tree = objects::get_tree(db, &cp.root)?;
        let sub = tree.entries.iter().find(|e| e.name == b"d").unwrap().hash.unwrap();
        db.execute("DELETE FROM tree WHERE hash = ?1", [&sub.0[..]])?;
        crate::store::content::write_bytes(db, b"garbage")?;
        let chunks_before = count(db, "SELECT COUNT(*) FROM chunk")?;
        let err = gc(db).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(&sub.to_hex()), "{err}");
        assert_eq!(count(db, "SELECT COUNT(*) FROM chunk")?, chunks_before);
        Ok(())
    })
}

#[test]
fn gc_after_deleting_a_fork_keeps_what_others_share() -> Result<()> {
    let (_dir, mut store) = vault();
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        put_file(&ws, &root(&ws), b"shared", b"shared by both")?;
        ws.checkpoint(Some("base"), None, "test")?;
        ws.fork("f", None)?;
        let mut f = Workspace::open(db, "f")?;
        put_file(&f, &root(&f), b"mine", b"only in the fork")?;
        f.checkpoint(Some("fork-cp"), None, "test")?;
        put_file(&f, &root(&f), b"live", b"only in the fork's live layer")?;
        crate::workspace::delete_workspace(db, "f")?;

        let r = gc(db)?;
        assert_eq!(r.chunks_removed, 2, "{r:?}");
        assert!(!has_chunk(db, &Hash::of(b"only in the fork")));
        assert!(!has_chunk(db, &Hash::of(b"only in the fork's live layer")));
        assert!(has_chunk(db, &Hash::of(b"shared by both")));
        assert!(verify(db)?.ok);
        Ok(())
    })
}

/// A small vault with a file, a big file, a subdirectory, a checkpoint and a fork.
fn populated(store: &mut Store) -> Result<(Hash, Hash, Hash)> {
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        put_file(&ws, &root(&ws), b"small", b"small file")?;
        put_file(&ws, &root(&ws), b"big", &big(3, 2 * CHUNK_SIZE + 10))?;
        let d = ws.create(&root(&ws), b"sub", NewNode::new(Kind::Dir, 0o755))?;
        put_file(&ws, &d, b"inner", b"inner file")?;
        let cp = ws.checkpoint(Some("one"), None, "test")?.checkpoint;
        ws.fork("f", None)?;
        audit::append(
            db,
            Some("main"),
            "test",
            "populate",
            &serde_json::json!({"n": 1}),
        )?;
        let tree = objects::get_tree(db, &cp.root)?;
        let sub = tree
            .entries
            .iter()
            .find(|e| e.name == b"sub")
            .unwrap()
            .hash
            .unwrap();
        let bigc = tree
            .entries
            .iter()
            .find(|e| e.name == b"big")
            .unwrap()
            .hash
            .unwrap();
        Ok((cp.root, sub, bigc))
    })
}

#[test]
fn verify_passes_on_a_healthy_vault() -> Result<()> {
    let (_dir, mut store) = vault();
    populated(&mut store)?;
    let r = store.read(verify)?;
    assert!(r.ok, "{:?}", r.problems);
    assert!(
        r.checked.chunks >= 5 && r.checked.contents == 1 && r.checked.trees >= 3,
        "{:?}",
        r.checked
    );
    assert_eq!(
        (
            r.checked.workspaces,
            r.checked.checkpoints,
            r.checked.audit_rows
        ),
        (2, 1, 1)
    );
    assert!(r.checked.inodes >= 2 && r.checked.dentries >= 1);
    Ok(())
}

#[test]
fn verify_detects_a_modified_chunk() -> Result<()> {
    let (_dir, mut store) = vault();
    populated(&mut store)?;
    let h = Hash::of(b"small file");
    store.write(|db| {
        db.execute(
            "UPDATE chunk SET data = ?2 WHERE hash = ?1",
            params![&h.0[..], b"SMALL FILE"],
        )?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    assert_eq!(kinds(&r), ["chunk_hash_mismatch"], "{:?}", r.problems);
    assert_eq!(r.problems[0].object, format!("chunk {}", h.to_hex()));
    Ok(())
}

/// A compressed chunk whose stored bytes no longer decompress, or decompress to other
/// bytes, is a problem `verify` names and a read refuses, never a panic or wrong bytes.
#[test]
fn verify_and_reads_catch_a_damaged_compressed_chunk() -> Result<()> {
    let (_dir, mut store) = vault();
    let text = b"a line of text that repeats\n".repeat(400);
    let other = b"another line, also repeated\n".repeat(400);
    let (h, _) = store.write(|db| crate::store::content::write_bytes(db, &text))?;
    let (o, _) = store.write(|db| crate::store::content::write_bytes(db, &other))?;
    let codec = |store: &mut Store, h: &Hash| -> Result<(i64, i64)> {
        store.read(|db| {
            Ok(db.query_row(
                "SELECT codec, length(data) FROM chunk WHERE hash = ?1",
                [&h.0[..]],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?)
        })
    };
    let (c, len) = codec(&mut store, &h)?;
    assert_eq!(c, 1, "repeated text is stored compressed");
    assert!(
        len * 20 < text.len() as i64,
        "{len} stored bytes for {}",
        text.len()
    );
    store.write(|db| {
        // One chunk's bytes replaced by a valid frame of the other's; that one cut short.
        db.execute(
            "UPDATE chunk SET data = (SELECT data FROM chunk WHERE hash = ?2) WHERE hash = ?1",
            params![&o.0[..], &h.0[..]],
        )?;
        db.execute(
            "UPDATE chunk SET data = substr(data, 1, 6) WHERE hash = ?1",
            [&h.0[..]],
        )?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    let k = kinds(&r);
    assert!(k.contains(&"chunk_malformed"), "{:?}", r.problems);
    assert!(k.contains(&"chunk_hash_mismatch"), "{:?}", r.problems);
    let e = store
        .read(|db| crate::store::content::read_all(db, &h, text.len() as u64))
        .unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    Ok(())
}

#[test]
fn verify_detects_a_missing_tree() -> Result<()> {
    let (_dir, mut store) = vault();
    let (root_hash, sub, _) = populated(&mut store)?;
    store.write(|db| {
        db.execute("DELETE FROM tree WHERE hash = ?1", [&sub.0[..]])?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    let missing: Vec<&Problem> = r
        .problems
        .iter()
        .filter(|p| p.kind == "missing_tree")
        .collect();
    assert!(!missing.is_empty(), "{:?}", r.problems);
    assert!(
        missing.iter().all(|p| p.message.contains(&sub.to_hex())),
        "{:?}",
        r.problems
    );
    assert!(
        missing
            .iter()
            .any(|p| p.object == format!("tree {}", root_hash.to_hex()))
    );

    // The root itself gone: every workspace and checkpoint that names it is reported.
    store.write(|db| {
        db.execute("DELETE FROM tree WHERE hash = ?1", [&root_hash.0[..]])?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    let objs: Vec<&str> = r
        .problems
        .iter()
        .filter(|p| p.kind == "missing_tree")
        .map(|p| p.object.as_str())
        .collect();
    assert!(
        objs.contains(&"workspace main") && objs.contains(&"workspace f"),
        "{objs:?}"
    );
    assert!(objs.contains(&"checkpoint main/one"), "{objs:?}");
    Ok(())
}

#[test]
fn verify_detects_dangling_dentries() -> Result<()> {
    let (_dir, mut store) = vault();
    populated(&mut store)?;
    store.write(|db| {
        let layer: i64 =
            db.query_row("SELECT layer FROM workspace WHERE name = 'main'", [], |r| {
                r.get(0)
            })?;
        db.execute(
            "INSERT INTO dentry (layer, parent, name, ino) VALUES (?1, 1, x'67686f7374', 99999)",
            [layer],
        )?;
        // A dentry whose parent is a file.
        let small: i64 = db.query_row(
            "SELECT ino FROM dentry WHERE layer = ?1 AND name = x'736d616c6c'",
            [layer],
            |r| r.get(0),
        )?;
        db.execute(
            "INSERT INTO dentry (layer, parent, name, ino) VALUES (?1, ?2, x'78', 1)",
            params![layer, small],
        )?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    let mut k = kinds(&r);
    k.sort();
    assert_eq!(k, ["dangling_dentry", "dentry_parent"], "{:?}", r.problems);
    assert!(r.problems.iter().any(|p| p.message.contains("99999")));
    Ok(())
}

#[test]
fn verify_reports_malformed_rows_without_panicking() -> Result<()> {
    let (_dir, mut store) = vault();
    let (_, sub, bigc) = populated(&mut store)?;
    store.write(|db| {
        // A chunk hash of the wrong length and a data column of the wrong type.
        db.execute("UPDATE chunk SET hash = x'0102' WHERE hash = ?1", [&Hash::of(b"inner file").0[..]])?;
        db.execute("UPDATE chunk SET data = 'text' WHERE hash = ?1", [&Hash::of(b"small file").0[..]])?;
        // A chunk list that is not a multiple of 32 bytes.
        db.execute("UPDATE content SET chunks = x'010203' WHERE hash = ?1", [&bigc.0[..]])?;
        // A tree whose bytes are garbage.
        db.execute("UPDATE tree SET data = x'ffffffff' WHERE hash = ?1", [&sub.0[..]])?;
        // A workspace whose layer is gone, an inode with a bad hash and unknown kind.
        db.execute("UPDATE workspace SET layer = 4242 WHERE name = 'f'", [])?;
        db.execute(
            "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
             VALUES ((SELECT layer FROM workspace WHERE name = 'main'), 777, 9, 0, 0, 0, 0, 0, 0, 1, x'00')",
            [],
        )?;
        db.execute(
            "INSERT INTO inode (layer, ino, kind, mode, uid, gid, size, mtime_ns, ctime_ns, nlink, hash)
             VALUES ((SELECT layer FROM workspace WHERE name = 'main'), 778, 1, 0, 0, 0, 3, 0, 0, 1, x'00')",
            [],
        )?;
        // An edited audit row.
        db.execute("UPDATE audit SET detail = '{}'", [])?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    let k = kinds(&r);
    for want in [
        "bad_hash",
        "chunk_malformed",
        "content_malformed",
        "tree_hash_mismatch",
        "tree_undecodable",
        "missing_layer",
        "inode_malformed",
        "missing_chunk",
        "audit",
    ] {
        assert!(k.contains(&want), "{want} not in {:?}", r.problems);
    }
    assert!(!k.contains(&"check_failed"), "{:?}", r.problems);
    Ok(())
}

#[test]
fn verify_turns_a_broken_schema_into_problems() -> Result<()> {
    let (_dir, mut store) = vault();
    populated(&mut store)?;
    store.write(|db| {
        db.execute_batch("DROP TABLE dentry")?;
        Ok(())
    })?;
    let r = store.read(verify)?;
    assert!(!r.ok);
    assert!(
        r.problems
            .iter()
            .any(|p| p.kind == "check_failed" && p.object == "dentries"),
        "{:?}",
        r.problems
    );
    assert!(r.checked.chunks > 0 && r.checked.trees > 0);
    Ok(())
}

#[test]
fn stats_count_what_is_there() -> Result<()> {
    let (_dir, mut store) = vault();
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        let a = put_file(&ws, &root(&ws), b"a", b"12345")?;
        let d = ws.create(&root(&ws), b"d", NewNode::new(Kind::Dir, 0o755))?;
        let e = ws.create(&d, b"e", NewNode::new(Kind::Dir, 0o755))?;
        put_file(&ws, &e, b"b", &big(4, CHUNK_SIZE + 100))?;
        put_file(&ws, &d, b"same", b"12345")?;
        ws.link(a.ino, &d, b"a-link")?;
        ws.create(
            &root(&ws),
            b"l",
            NewNode {
                target: Some(b"a".to_vec()),
                ..NewNode::new(Kind::Symlink, 0o777)
            },
        )?;
        ws.create(&root(&ws), b"p", NewNode::new(Kind::Fifo, 0o644))?;
        ws.checkpoint(Some("c1"), None, "test")?;
        ws.fork("f", None)?;
        put_file(&ws, &root(&ws), b"unflushed", b"xyz")?;

        let s = stats(db, Some("main"))?;
        let w = s.workspace.clone().unwrap();
        assert_eq!(
            (w.files, w.dirs, w.symlinks, w.other, w.hard_links),
            (5, 2, 1, 1, 1),
            "{w:?}"
        );
        assert_eq!(
            w.logical_bytes,
            5 + (CHUNK_SIZE as u64 + 100) + 5 + 3,
            "{w:?}"
        );
        assert_eq!(w.checkpoints, 1);
        assert_eq!(w.head.as_deref(), Some("c1"));
        assert_eq!(
            w.root,
            Workspace::open(db, "main")?.info.base_root.to_hex(),
            "stats flushed"
        );

        let v = &s.vault;
        assert_eq!((v.workspaces, v.forks, v.checkpoints), (2, 1, 1), "{v:?}");
        // Chunks: "12345" (stored once for two files), the 2 chunks of b, "xyz".
        assert_eq!(v.chunks, 4);
        assert_eq!(v.chunks, count(db, "SELECT COUNT(*) FROM chunk")?);
        assert_eq!(v.contents, 1);
        assert_eq!(v.stored_bytes, 5 + (CHUNK_SIZE as u64 + 100) + 3);
        // Two extents of 40 bytes (block + chunk).
        assert_eq!(v.chunk_list_bytes, 80);
        assert_eq!(v.trees, count(db, "SELECT COUNT(*) FROM tree")?);

        let f = stats(db, Some("f"))?.workspace.unwrap();
        assert_eq!(
            (f.files, f.logical_bytes, f.parent.as_deref(), f.checkpoints),
            (4, 5 + CHUNK_SIZE as u64 + 100 + 5, Some("main"), 0)
        );
        assert!(stats(db, None)?.workspace.is_none());
        assert!(matches!(
            stats(db, Some("nope")),
            Err(Error::NoSuchVault(_))
        ));
        Ok(())
    })
}

/// `cargo test --release --lib maintenance::tests::large -- --ignored --nocapture`
#[test]
#[ignore = "timing probe on a 100 000-object vault; speed is measured by scripts/bench.sh, not asserted in tests"]
fn large_vault_timings() -> Result<()> {
    let (_dir, mut store) = vault();
    let t = std::time::Instant::now();
    store.write(|db| {
        create_workspace(db, "main", None, None)?;
        let mut ws = Workspace::open(db, "main")?;
        for d in 0..1000 {
            let dir = ws.create(
                &root(&ws),
                format!("d{d}").as_bytes(),
                NewNode::new(Kind::Dir, 0o755),
            )?;
            for f in 0..100 {
                put_file(
                    &ws,
                    &dir,
                    format!("f{f}").as_bytes(),
                    format!("{d}/{f}").as_bytes(),
                )?;
            }
        }
        ws.checkpoint(Some("one"), None, "test")?;
        for i in 0..10 {
            ws.fork(&format!("fork{i}"), None)?;
        }
        for d in 0..1000 {
            crate::store::content::write_bytes(db, format!("garbage {d}").as_bytes())?;
        }
        Ok(())
    })?;
    eprintln!("build: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let r = store.write(gc)?;
    eprintln!("gc: {:?} {r:?}", t.elapsed());
    assert_eq!(r.chunks_removed, 1000);
    let t = std::time::Instant::now();
    let v = store.read(verify)?;
    eprintln!("verify: {:?} {:?}", t.elapsed(), v.checked);
    assert!(v.ok);
    let t = std::time::Instant::now();
    let s = store.write(|db| stats(db, Some("fork3")))?;
    eprintln!("stats: {:?} {:?}", t.elapsed(), s.workspace);
    Ok(())
}
