use super::*;
use crate::store::Store;
use crate::workspace::create_workspace;
use std::os::unix::fs::symlink;

fn set_mtime(p: &Path, secs: i64, nsec: i64) {
    set_mtime_nofollow(p, secs * 1_000_000_000 + nsec).unwrap();
}

fn mkfifo(p: &Path, mode: u32) {
    let c = cpath(p).unwrap();
    // SAFETY: valid path.
    check(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) }).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Gives every entry below `dir` (and `dir`) a distinct mtime with nanoseconds, post-order.
fn stamp(dir: &Path, k: &mut i64) {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            stamp(&p, k);
        } else {
            *k += 1;
            set_mtime(&p, 1_600_000_000 + *k, 123_456_789 + *k);
        }
    }
    *k += 1;
    set_mtime(dir, 1_600_000_000 + *k, 987_654_321 - *k);
}

fn odd_name() -> &'static OsStr {
    OsStr::from_bytes(b"bad\xff\xfe name.bin")
}

fn make_host(root: &Path) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/c.txt"), "hello\n").unwrap();
    fs::write(root.join("a/x.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("a/x.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::write(root.join("a/suid"), "s").unwrap();
    fs::set_permissions(root.join("a/suid"), fs::Permissions::from_mode(0o4755)).unwrap();
    symlink("../outside", root.join("a/rel")).unwrap();
    symlink("/nonexistent/dangling/target", root.join("abs")).unwrap();
    fs::create_dir(root.join("d1")).unwrap();
    fs::create_dir(root.join("d2")).unwrap();
    fs::write(root.join("d1/h1"), "linked content").unwrap();
    fs::hard_link(root.join("d1/h1"), root.join("d2/h2")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    fs::write(root.join(odd_name()), b"raw bytes").unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(root.join("big.bin"), &big).unwrap();
    fs::write(root.join("exact.bin"), vec![9u8; CHUNK_SIZE]).unwrap();
    fs::write(root.join("zero"), b"").unwrap();
    mkfifo(&root.join("fifo"), 0o640);
    fs::set_permissions(root.join("a"), fs::Permissions::from_mode(0o1755)).unwrap();
    let mut k = 0;
    stamp(root, &mut k);
}

/// Asserts that two host trees are equal: kinds, contents, targets, modes, owners, mtimes.
fn compare(a: &Path, b: &Path, top_attrs: bool) {
    let ma = fs::symlink_metadata(a).unwrap();
    let mb = fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{}: {e}", b.display()));
    assert_eq!(
        kind_of(&ma.file_type()),
        kind_of(&mb.file_type()),
        "{}",
        b.display()
    );
    if top_attrs {
        if !ma.file_type().is_symlink() {
            assert_eq!(
                ma.mode() & 0o7777,
                mb.mode() & 0o7777,
                "mode of {}",
                b.display()
            );
        }
        assert_eq!(
            (ma.uid(), ma.gid()),
            (mb.uid(), mb.gid()),
            "owner of {}",
            b.display()
        );
        assert_eq!(
            mtime_ns_of(&ma),
            mtime_ns_of(&mb),
            "mtime of {}",
            b.display()
        );
    }
    let ft = ma.file_type();
    if ft.is_file() {
        assert_eq!(
            fs::read(a).unwrap(),
            fs::read(b).unwrap(),
            "content of {}",
            b.display()
        );
    } else if ft.is_symlink() {
        assert_eq!(
            fs::read_link(a).unwrap(),
            fs::read_link(b).unwrap(),
            "target of {}",
            b.display()
        );
    } else if ft.is_dir() {
        let names = |d: &Path| {
            let mut v: Vec<_> = fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        let (na, nb) = (names(a), names(b));
        assert_eq!(na, nb, "entries of {}", b.display());
        for n in na {
            compare(&a.join(&n), &b.join(&n), true);
        }
    }
}

fn assert_linked(out: &Path) {
    let m1 = fs::symlink_metadata(out.join("d1/h1")).unwrap();
    let m2 = fs::symlink_metadata(out.join("d2/h2")).unwrap();
    assert_eq!(m1.ino(), m2.ino(), "hard-linked pair was split");
    assert_eq!(m1.nlink(), 2);
}

fn new_vault(dir: &Path) -> Store {
    let mut store = Store::create(&dir.join("v.avfs")).unwrap();
    store
        .write(|db| {
            create_workspace(db, "main", None, None)?;
            Ok(())
        })
        .unwrap();
    store
}

fn comps(p: &str) -> Vec<Vec<u8>> {
    path::components(p.as_bytes()).unwrap()
}

#[test]
fn round_trip_into_root() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    make_host(&host);
    let mut store = new_vault(tmp.path());
    let calls = std::cell::Cell::new(0);
    let stats = store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            let st = import(&ws, &host, &[], true, &|_| calls.set(calls.get() + 1))?;
            ws.checkpoint(Some("c1"), None, "test")?;
            Ok(st)
        })
        .unwrap();
    assert!(calls.get() >= 1);
    // a, a/b, d1, d2, empty
    assert_eq!(stats.dirs, 5);
    // c.txt x.sh suid h1 odd big exact zero
    assert_eq!(stats.files, 8);
    assert_eq!(stats.symlinks, 2);
    assert_eq!(stats.hardlinks, 1);
    assert!(stats.skipped.is_empty(), "{:?}", stats.skipped);

    // From the live layer the import built.
    let out = tmp.path().join("out");
    let st = store
        .write(|db| {
            export(
                &Workspace::open(db, "main")?,
                &[],
                &out,
                (false, true),
                None,
                &|_| {},
            )
        })
        .unwrap();
    assert_eq!(st.hardlinks, 1);
    assert_eq!(st.symlinks, 2);
    compare(&host, &out, false);
    assert_linked(&out);

    // From the stored trees alone: a fresh live layer on the checkpoint.
    let out2 = tmp.path().join("out2");
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            let cp = ws.find_checkpoint("c1")?;
            ws.restore(&cp)?;
            export(&ws, &[], &out2, (false, true), None, &|_| {})
        })
        .unwrap();
    compare(&host, &out2, false);
    assert_linked(&out2);
}

#[test]
fn round_trip_into_new_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    make_host(&host);
    let mut store = new_vault(tmp.path());
    let out = tmp.path().join("deep/out");
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            import(&ws, &host, &comps("/sub/dir"), true, &|_| {})?;
            ws.checkpoint(Some("c1"), None, "test")?;
            let cp = ws.find_checkpoint("c1")?;
            ws.restore(&cp)?;
            export(&ws, &comps("/sub/dir"), &out, (false, true), None, &|_| {})
        })
        .unwrap();
    // The import root took the host directory's own attributes.
    compare(&host, &out, true);
    assert_linked(&out);

    // A single file, into a file path and into an existing empty directory.
    let one = tmp.path().join("one.sh");
    let into = tmp.path().join("into");
    fs::create_dir(&into).unwrap();
    store
        .write(|db| {
            let ws = Workspace::open(db, "main")?;
            export(
                &ws,
                &comps("/sub/dir/a/x.sh"),
                &one,
                (false, true),
                None,
                &|_| {},
            )?;
            export(
                &ws,
                &comps("/sub/dir/a/x.sh"),
                &into,
                (false, true),
                None,
                &|_| {},
            )
        })
        .unwrap();
    compare(&host.join("a/x.sh"), &one, true);
    compare(&host.join("a/x.sh"), &into.join("x.sh"), true);
}

#[test]
fn hard_link_change_reaches_both_names() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    make_host(&host);
    let mut store = new_vault(tmp.path());
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            import(&ws, &host, &[], true, &|_| {})?;
            ws.checkpoint(Some("c1"), None, "test")?;
            Ok(())
        })
        .unwrap();
    let out = tmp.path().join("out");
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            let ino = ws.resolve_existing(&comps("/d1/h1"), false)?.ino;
            assert_eq!(ws.resolve_existing(&comps("/d2/h2"), false)?.ino, ino);
            ws.set_content(ino, crate::store::content::write_bytes(db, b"new")?.0, 3)?;
            ws.checkpoint(Some("c2"), None, "test")?;
            let cp = ws.find_checkpoint("c2")?;
            ws.restore(&cp)?;
            export(&ws, &[], &out, (false, true), None, &|_| {})
        })
        .unwrap();
    assert_eq!(fs::read(out.join("d1/h1")).unwrap(), b"new");
    assert_eq!(fs::read(out.join("d2/h2")).unwrap(), b"new");
    assert_linked(&out);
}

#[test]
fn export_refuses_non_empty_target() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    make_host(&host);
    let mut store = new_vault(tmp.path());
    store
        .write(|db| import(&Workspace::open(db, "main")?, &host, &[], true, &|_| {}))
        .unwrap();

    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("keep"), "mine").unwrap();
    fs::write(out.join("zero"), "will be replaced").unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, "a file").unwrap();
    for target in [&out, &file] {
        let err = store
            .write(|db| {
                export(
                    &Workspace::open(db, "main")?,
                    &[],
                    target,
                    (false, true),
                    None,
                    &|_| {},
                )
            })
            .unwrap_err();
        assert!(
            matches!(err, Error::Refused(ref m) if m.contains("--force")),
            "{err}"
        );
    }
    let mut names: Vec<_> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["keep", "zero"]);
    assert_eq!(fs::read(out.join("zero")).unwrap(), b"will be replaced");
    assert_eq!(fs::read(&file).unwrap(), b"a file");

    // With force: same-named entries replaced, unrelated ones kept; a symlink in the
    // way is replaced, never written through.
    let victim = tmp.path().join("victim");
    fs::create_dir(&victim).unwrap();
    symlink(&victim, out.join("a")).unwrap();
    store
        .write(|db| {
            export(
                &Workspace::open(db, "main")?,
                &[],
                &out,
                (true, true),
                None,
                &|_| {},
            )
        })
        .unwrap();
    assert_eq!(fs::read(out.join("keep")).unwrap(), b"mine");
    assert_eq!(fs::read(out.join("zero")).unwrap(), b"");
    assert!(fs::symlink_metadata(out.join("a")).unwrap().is_dir());
    assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
    fs::remove_file(out.join("keep")).unwrap();
    compare(&host, &out, false);
}

#[test]
fn import_merges_into_existing_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    make_host(&host);
    let mut store = new_vault(tmp.path());
    store
        .write(|db| {
            let ws = Workspace::open(db, "main")?;
            let root = ws.get(ROOT_INO)?;
            let m = ws.create(&root, b"m", NewNode::new(Kind::Dir, 0o755))?;
            // `a` is a file here and a directory on the host: replaced.
            ws.create(&m, b"a", NewNode::new(Kind::File, 0o644))?;
            let m = ws.get(m.ino)?;
            let d1 = ws.create(&m, b"d1", NewNode::new(Kind::Dir, 0o700))?;
            ws.create(&d1, b"old", NewNode::new(Kind::File, 0o644))?;
            import(&ws, &host, &comps("/m"), true, &|_| {})?;
            // Importing twice replaces everything with equal content.
            import(&ws, &host, &comps("/m"), true, &|_| {})?;
            Ok(())
        })
        .unwrap();
    let out = tmp.path().join("out");
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            ws.checkpoint(Some("c1"), None, "test")?;
            let cp = ws.find_checkpoint("c1")?;
            ws.restore(&cp)?;
            export(&ws, &comps("/m"), &out, (false, true), None, &|_| {})
        })
        .unwrap();
    // The merged d1 keeps its extra file and takes the host's attributes.
    fs::remove_file(out.join("d1/old")).unwrap();
    set_mtime(&out.join("d1"), 0, 0);
    set_mtime(&host.join("d1"), 0, 0);
    compare(&host, &out, false);
    assert_linked(&out);
}

#[test]
fn import_errors_name_the_host_path() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = new_vault(tmp.path());
    let missing = tmp.path().join("missing");
    let err = store
        .write(|db| import(&Workspace::open(db, "main")?, &missing, &[], true, &|_| {}))
        .unwrap_err();
    assert!(
        matches!(err, Error::Host { ref what, .. } if what.contains("missing")),
        "{err}"
    );
    // Importing a directory that holds the vault leaves the vault out.
    fs::write(tmp.path().join("f"), "x").unwrap();
    let st = store
        .write(|db| {
            import(
                &Workspace::open(db, "main")?,
                tmp.path(),
                &comps("/t"),
                true,
                &|_| {},
            )
        })
        .unwrap();
    assert_eq!(st.files, 1);
    assert!(
        st.skipped.iter().any(|s| s.contains("v.avfs")),
        "{:?}",
        st.skipped
    );
}

#[test]
fn merge_replacing_a_dir_with_links_keeps_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    fs::create_dir_all(host.join("x/d")).unwrap();
    fs::create_dir_all(host.join("y")).unwrap();
    fs::write(host.join("x/d/h1"), "l").unwrap();
    fs::hard_link(host.join("x/d/h1"), host.join("y/h2")).unwrap();
    let host2 = tmp.path().join("host2");
    fs::create_dir_all(&host2).unwrap();
    fs::write(host2.join("x"), "now a file").unwrap();
    let mut store = new_vault(tmp.path());
    store
        .write(|db| {
            let mut ws = Workspace::open(db, "main")?;
            import(&ws, &host, &[], true, &|_| {})?;
            ws.checkpoint(Some("c1"), None, "test")?;
            let cp = ws.find_checkpoint("c1")?;
            // A fresh live layer: /x is not materialized yet.
            ws.restore(&cp)?;
            import(&ws, &host2, &[], true, &|_| {})?;
            let h2 = ws.resolve_existing(&comps("/y/h2"), false)?;
            assert_eq!(h2.nlink, 1);
            assert_eq!(ws.resolve_existing(&comps("/x"), false)?.kind, Kind::File);
            let orphans: i64 = db.query_row(
                "SELECT COUNT(*) FROM dentry d WHERE d.parent != 1 AND NOT EXISTS
                 (SELECT 1 FROM inode i WHERE i.layer = d.layer AND i.ino = d.parent)",
                [],
                |r| r.get(0),
            )?;
            assert_eq!(orphans, 0);
            Ok(())
        })
        .unwrap();
}

/// User + system CPU time of this process (all threads), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `cargo test --release --lib hostio::tests::import_speed -- --ignored --nocapture`
/// (set TMPDIR to choose where the 100 000 files and the vault go).
#[test]
#[ignore = "timing probe: 100 000 files; speed is measured by scripts/bench.sh, not asserted in tests"]
fn import_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    for d in 0..100 {
        let dir = host.join(format!("dir{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..1000 {
            let body = format!("file {d} {f}\n").repeat(1 + f % 8);
            fs::write(dir.join(format!("file{f:04}.txt")), body).unwrap();
        }
    }
    let mut store = new_vault(tmp.path());
    let report = |what: &str, files: u64, t: std::time::Instant, cpu0: f64| {
        let el = t.elapsed();
        eprintln!(
            "{what} {files} files in {el:.2?} ({:.2}s CPU): {:.0} files/s",
            cpu_seconds() - cpu0,
            files as f64 / el.as_secs_f64()
        );
    };
    let (t, cpu0) = (std::time::Instant::now(), cpu_seconds());
    let dest = comps("/imported");
    let st = store
        .write(|db| import(&Workspace::open(db, "main")?, &host, &dest, true, &|_| {}))
        .unwrap();
    report("imported", st.files, t, cpu0);
    let out = tmp.path().join("out");
    let (t, cpu0) = (std::time::Instant::now(), cpu_seconds());
    let st = store
        .write(|db| {
            export(
                &Workspace::open(db, "main")?,
                &dest,
                &out,
                (false, true),
                None,
                &|_| {},
            )
        })
        .unwrap();
    report("exported", st.files, t, cpu0);
}

/// An import stores a tree once, so its text takes the smaller encoding (zstd) and random
/// bytes stay as they are; both export as they were.
#[test]
fn an_import_stores_text_with_zstd() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    std::fs::create_dir_all(host.join("src")).unwrap();
    let text: Vec<u8> = (0..6000)
        .flat_map(|i| format!("    let value_{i} = compute({i}, \"name {i}\");\n").into_bytes())
        .collect();
    std::fs::write(host.join("src/lib.rs"), &text).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..70_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(host.join("noise.bin"), &noise).unwrap();
    let mut store = new_vault(tmp.path());
    store
        .write(|db| import(&Workspace::open(db, "main")?, &host, &[], true, &|_| {}))
        .unwrap();
    let codecs: Vec<(i64, i64, i64)> = store
        .read(|db| {
            let mut q = db.prepare(
                "SELECT codec, COUNT(*), SUM(length(data)) FROM chunk GROUP BY codec ORDER BY codec",
            )?;
            let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .unwrap();
    // The noise: a full block and its tail, as they are; the text's blocks in zstd frames.
    assert_eq!(codecs[0], (0, 2, 70_000), "{codecs:?}");
    assert_eq!(codecs.len(), 2, "{codecs:?}");
    let (codec, n, stored) = codecs[1];
    assert_eq!(
        (codec, n),
        (
            crate::store::objects::CODEC_ZSTD,
            text.len().div_ceil(65536) as i64
        )
    );
    assert!(
        stored * 4 < text.len() as i64,
        "{stored} bytes for {}",
        text.len()
    );
    let out = tmp.path().join("out");
    store
        .write(|db| {
            export(
                &Workspace::open(db, "main")?,
                &[],
                &out,
                (false, true),
                None,
                &|_| {},
            )
        })
        .unwrap();
    assert!(std::fs::read(out.join("src/lib.rs")).unwrap() == text);
    assert!(std::fs::read(out.join("noise.bin")).unwrap() == noise);
}
