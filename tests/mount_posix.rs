//! POSIX conformance of a mounted workspace, with the exact errno the kernel's own
//! filesystems return: most checks run the same operation on a native directory (ext4,
//! tmpfs, whatever holds the temp dir) and on the mount and compare the results.
//!
//! Needs /dev/fuse; skips with a message without it, fails with `AVFS_REQUIRE_FUSE=1`.
#![allow(clippy::macro_metavars_in_unsafe)]

mod common;
#[macro_use]
#[path = "common/fuse.rs"]
mod fuse;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fuse::*;
use libc::{
    O_APPEND, O_CREAT, O_DIRECTORY, O_EXCL, O_NOFOLLOW, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY,
};

macro_rules! mount {
    ($name:expr) => {
        match Mount::new($name) {
            Some(m) => m,
            None => return,
        }
    };
    ($name:expr, $($arg:expr),+) => {
        match Mount::with_args($name, &[$($arg),+]) {
            Some(m) => m,
            None => return,
        }
    };
}

fn put(p: &Path, data: &[u8]) {
    std::fs::write(p, data).unwrap();
}

fn get(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

// ------------------------------------------------------------------ regular files

#[test]
fn open_flags_excl_trunc_append() {
    let m = mount!("open_flags_excl_trunc_append");
    m.same("open", |d| {
        let f = d.join("f");
        let mut out = vec![];
        // O_CREAT|O_EXCL: creates, then EEXIST.
        let fd = open(&f, O_CREAT | O_EXCL | O_WRONLY, 0o644);
        out.push(format!("{:?}", fd.as_ref().map(|_| ())));
        let fd = fd.unwrap();
        fd.write(b"hello world").unwrap();
        fd.close().unwrap();
        out.push(format!(
            "{:?}",
            open(&f, O_CREAT | O_EXCL | O_WRONLY, 0o644).map(|_| ())
        ));
        // O_EXCL on a dangling symlink: EEXIST (not followed).
        std::os::unix::fs::symlink("nowhere", d.join("dl")).unwrap();
        out.push(format!(
            "{:?}",
            open(&d.join("dl"), O_CREAT | O_EXCL | O_WRONLY, 0o644).map(|_| ())
        ));
        // O_CREAT without O_EXCL through a dangling symlink creates its target.
        let fd = open(&d.join("dl"), O_CREAT | O_WRONLY, 0o600).unwrap();
        fd.write(b"via link").unwrap();
        fd.close().unwrap();
        out.push(format!(
            "{:?}",
            std::fs::read(d.join("nowhere")).map_err(|e| e.raw_os_error())
        ));
        // O_TRUNC empties the file.
        let fd = open(&f, O_WRONLY | O_TRUNC, 0).unwrap();
        out.push(format!(
            "size after O_TRUNC {}",
            fd.fstat().unwrap().st_size
        ));
        fd.write(b"abc").unwrap();
        fd.close().unwrap();
        out.push(format!("{:?}", get(&f)));
        // O_APPEND writes at the end whatever the offset.
        let fd = open(&f, O_WRONLY | O_APPEND, 0).unwrap();
        fd.lseek(0, libc::SEEK_SET).unwrap();
        fd.write(b"def").unwrap();
        out.push(format!(
            "pos after append {}",
            fd.lseek(0, libc::SEEK_CUR).unwrap()
        ));
        // pwrite on O_APPEND: Linux appends too.
        fd.pwrite(b"ghi", 0).unwrap();
        fd.close().unwrap();
        out.push(format!("{:?}", String::from_utf8_lossy(&get(&f))));
        // Two appenders interleave without overwriting each other.
        let a = open(&f, O_WRONLY | O_APPEND, 0).unwrap();
        let b = open(&f, O_WRONLY | O_APPEND, 0).unwrap();
        a.write(b"1").unwrap();
        b.write(b"2").unwrap();
        a.write(b"3").unwrap();
        a.close().unwrap();
        b.close().unwrap();
        out.push(format!("{:?}", String::from_utf8_lossy(&get(&f))));
        // Errors.
        out.push(format!(
            "{:?}",
            open(&d.join("missing"), O_RDONLY, 0).map(|_| ())
        ));
        out.push(format!(
            "{:?}",
            open(&d.join("nodir/f"), O_CREAT | O_WRONLY, 0o644).map(|_| ())
        ));
        out.push(format!("{:?}", open(&f.join("x"), O_RDONLY, 0).map(|_| ())));
        out.push(format!(
            "{:?}",
            open(&f.join("x"), O_CREAT | O_WRONLY, 0o644).map(|_| ())
        ));
        out.push(format!(
            "{:?}",
            open(&f, O_RDONLY | O_DIRECTORY, 0).map(|_| ())
        ));
        out.push(format!("{:?}", open(d, O_WRONLY, 0).map(|_| ())));
        out.push(format!(
            "{:?}",
            open(d, O_RDWR | O_CREAT, 0o644).map(|_| ())
        ));
        out.push(format!(
            "{:?}",
            open(&d.join("dl"), O_RDONLY | O_NOFOLLOW, 0).map(|_| ())
        ));
        // O_CREAT on an existing file keeps its mode; new files get mode & ~umask.
        out.push(format!("{:o}", st(&d.join("nowhere")).unwrap().perm));
        let fd = open(&f, O_CREAT | O_RDWR, 0o600).unwrap();
        drop(fd);
        out.push(format!("{:o}", st(&f).unwrap().perm));
        out
    });
}

#[test]
fn pread_pwrite_at_offsets_and_sparse_files() {
    let m = mount!("pread_pwrite_at_offsets_and_sparse_files");
    m.same("rw", |d| {
        let mut out = vec![];
        let f = d.join("f");
        let fd = open(&f, O_CREAT | O_RDWR, 0o644).unwrap();
        let mut rng = Rng::new(7);
        // Writes straddling 64 KiB chunk boundaries, overlapping, out of order.
        for &(off, len) in &[
            (0i64, 100usize),
            (65_530, 20),
            (131_072, 65_536),
            (10, 5),
            (200_000, 1),
            (65_536 * 3 - 1, 2),
            (1_000_000, 70_000),
        ] {
            let data = rng.bytes(len);
            assert_eq!(fd.pwrite(&data, off).unwrap(), len);
        }
        out.push(fd.fstat().unwrap().st_size);
        // Reads at assorted offsets, including past EOF.
        let all = fd.read_all().unwrap();
        out.push(all.len() as i64);
        let sum: u64 = all.iter().map(|b| *b as u64).sum();
        out.push(sum as i64);
        for &(off, len) in &[
            (65_520i64, 40usize),
            (1_069_990, 100),
            (5_000_000, 10),
            (0, 0),
        ] {
            let b = fd.pread(len, off).unwrap();
            out.push(b.len() as i64);
            out.push(b.iter().map(|x| *x as i64).sum());
        }
        // Holes read as zeros: a file of one byte at 10 MiB.
        let s = d.join("sparse");
        let sfd = open(&s, O_CREAT | O_RDWR, 0o644).unwrap();
        sfd.pwrite(b"Z", 10 << 20).unwrap();
        out.push(sfd.fstat().unwrap().st_size);
        let hole = sfd.pread(1 << 20, 5 << 20).unwrap();
        out.push(hole.len() as i64);
        out.push(hole.iter().filter(|b| **b != 0).count() as i64);
        sfd.close().unwrap();
        let data = get(&s);
        out.push(data.len() as i64);
        out.push(data.iter().filter(|b| **b != 0).count() as i64);
        // A gap after a partial last block: the bytes between old end and write are zero.
        let g = d.join("gap");
        put(&g, &[0xAA; 1000]);
        let gfd = open(&g, O_RDWR, 0).unwrap();
        gfd.pwrite(b"B", 3000).unwrap();
        gfd.close().unwrap();
        let data = get(&g);
        out.push(data[1000..3000].iter().filter(|b| **b != 0).count() as i64);
        out.push(data.len() as i64);
        // read(2) with the file offset.
        let fd2 = open(&f, O_RDONLY, 0).unwrap();
        fd2.lseek(65_530, libc::SEEK_SET).unwrap();
        out.push(fd2.read(10).unwrap().len() as i64);
        out.push(fd2.lseek(0, libc::SEEK_CUR).unwrap());
        out.push(fd2.lseek(0, libc::SEEK_END).unwrap());
        // Writing to a read-only fd: EBADF; reading a write-only fd: EBADF.
        out.push(
            fd2.write(b"x")
                .map(|n| n as i64)
                .unwrap_or_else(|e| -(e as i64)),
        );
        let w = open(&f, O_WRONLY, 0).unwrap();
        out.push(
            w.read(1)
                .map(|v| v.len() as i64)
                .unwrap_or_else(|e| -(e as i64)),
        );
        fd.close().unwrap();
        out
    });
}

#[test]
fn content_survives_remount() {
    let mut m = mount!("content_survives_remount");
    let mut rng = Rng::new(3);
    let big = rng.bytes(3 * 65_536 + 123);
    put(&m.p("big"), &big);
    let fd = open(&m.p("sparse"), O_CREAT | O_RDWR, 0o640).unwrap();
    fd.pwrite(b"tail", 5 << 20).unwrap();
    fd.pwrite(b"head", 0).unwrap();
    fd.close().unwrap();
    m.remount();
    assert_eq!(get(&m.p("big")), big);
    let s = get(&m.p("sparse"));
    assert_eq!(s.len(), (5 << 20) + 4);
    assert_eq!(&s[..4], b"head");
    assert_eq!(&s[s.len() - 4..], b"tail");
    assert!(s[4..s.len() - 4].iter().all(|b| *b == 0));
    assert_eq!(st(&m.p("sparse")).unwrap().perm, 0o640);
}

#[test]
fn truncate_and_ftruncate_both_ways() {
    let m = mount!("truncate_and_ftruncate_both_ways");
    m.same("trunc", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        let mut rng = Rng::new(11);
        let data = rng.bytes(200_000);
        put(&f, &data);
        // Path truncate down and up: the regrown part reads as zeros.
        let c = cs(&f);
        sc!(libc::truncate(c.as_ptr(), 70_000)).unwrap();
        out.push(format!("{}", file_size(&f)));
        sc!(libc::truncate(c.as_ptr(), 150_000)).unwrap();
        let got = get(&f);
        out.push(format!(
            "{} {} {}",
            got.len(),
            got[..70_000] == data[..70_000],
            got[70_000..].iter().all(|b| *b == 0)
        ));
        // ftruncate on an fd with unflushed writes.
        let fd = open(&f, O_RDWR, 0).unwrap();
        fd.pwrite(&[7u8; 10_000], 140_000).unwrap();
        fd.ftruncate(145_000).unwrap();
        out.push(format!("{}", fd.fstat().unwrap().st_size));
        fd.ftruncate(300_000).unwrap();
        let all = fd.read_all().unwrap();
        out.push(format!(
            "{} {} {}",
            all.len(),
            all[140_000..145_000].iter().all(|b| *b == 7),
            all[145_000..].iter().all(|b| *b == 0)
        ));
        fd.ftruncate(0).unwrap();
        out.push(format!("{:?}", fd.read_all().unwrap().len()));
        fd.pwrite(b"x", 5).unwrap();
        out.push(format!("{:?}", fd.read_all().unwrap()));
        fd.close().unwrap();
        out.push(format!("{:?}", get(&f)));
        // Truncate within one block and regrow.
        put(&f, b"0123456789");
        sc!(libc::truncate(c.as_ptr(), 3)).unwrap();
        sc!(libc::truncate(c.as_ptr(), 6)).unwrap();
        out.push(format!("{:?}", get(&f)));
        // Errors.
        let dc = cs(d);
        out.push(format!("{:?}", sc!(libc::truncate(dc.as_ptr(), 0))));
        out.push(format!("{:?}", sc!(libc::truncate(c.as_ptr(), -1))));
        let mc = cs(&d.join("missing"));
        out.push(format!("{:?}", sc!(libc::truncate(mc.as_ptr(), 0))));
        let ro = open(&f, O_RDONLY, 0).unwrap();
        out.push(format!("{:?}", ro.ftruncate(1)));
        // truncate changes mtime and ctime.
        let before = lstat(&f).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        sc!(libc::truncate(c.as_ptr(), 1)).unwrap();
        let after = lstat(&f).unwrap();
        out.push(format!(
            "{}",
            (after.st_mtime, after.st_mtime_nsec) > (before.st_mtime, before.st_mtime_nsec)
                && (after.st_ctime, after.st_ctime_nsec) > (before.st_ctime, before.st_ctime_nsec)
        ));
        out
    });
}

#[test]
fn fallocate_modes() {
    let m = mount!("fallocate_modes");
    m.same("falloc", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        put(&f, &[1u8; 100_000]);
        let fd = open(&f, O_RDWR, 0).unwrap();
        // Mode 0 grows the file, zero-filled.
        out.push(format!(
            "{:?}",
            sc!(libc::fallocate(fd.0, 0, 50_000, 200_000))
        ));
        out.push(format!("{}", fd.fstat().unwrap().st_size));
        // KEEP_SIZE leaves the size alone.
        out.push(format!(
            "{:?}",
            sc!(libc::fallocate(fd.0, libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20))
        ));
        out.push(format!("{}", fd.fstat().unwrap().st_size));
        // PUNCH_HOLE zeroes a range.
        out.push(format!(
            "{:?}",
            sc!(libc::fallocate(
                fd.0,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                10_000,
                70_000
            ))
        ));
        let all = fd.read_all().unwrap();
        out.push(format!(
            "{} {} {} {}",
            all.len(),
            all[..10_000].iter().all(|b| *b == 1),
            all[10_000..80_000].iter().all(|b| *b == 0),
            all[80_000..100_000].iter().all(|b| *b == 1)
        ));
        // Bad arguments.
        out.push(format!("{:?}", sc!(libc::fallocate(fd.0, 0, -1, 10))));
        out.push(format!("{:?}", sc!(libc::fallocate(fd.0, 0, 0, 0))));
        out.push(format!(
            "{:?}",
            sc!(libc::fallocate(fd.0, libc::FALLOC_FL_PUNCH_HOLE, 0, 10))
        ));
        let ro = open(&f, O_RDONLY, 0).unwrap();
        out.push(format!("{:?}", sc!(libc::fallocate(ro.0, 0, 0, 10))));
        fd.close().unwrap();
        out.push(format!("{}", file_size(&f)));
        // posix_fallocate (glibc) too.
        let g = d.join("g");
        let gfd = open(&g, O_CREAT | O_RDWR, 0o644).unwrap();
        out.push(format!("{}", unsafe {
            libc::posix_fallocate(gfd.0, 0, 12_345)
        }));
        gfd.close().unwrap();
        out.push(format!("{:?}", get(&g).len()));
        out
    });
}

#[test]
fn shared_writable_mmap() {
    let mut m = mount!("shared_writable_mmap");
    let len = 3 * 65_536 + 100;
    let f = m.p("mapped");
    put(&f, &vec![b'.'; len]);
    let fd = open(&f, O_RDWR, 0).unwrap();
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap: errno {}", last_errno());
        let s = std::slice::from_raw_parts_mut(p as *mut u8, len);
        assert!(s.iter().all(|b| *b == b'.'));
        s[0] = b'A';
        s[65_536] = b'B';
        s[len - 1] = b'C';
        assert_eq!(
            libc::msync(p, len, libc::MS_SYNC),
            0,
            "msync errno {}",
            last_errno()
        );
        assert_eq!(libc::munmap(p, len), 0);
    }
    // Seen through read() on the same fd and on a fresh one.
    let via_fd = fd.read_all().unwrap();
    assert_eq!(
        (via_fd[0], via_fd[65_536], via_fd[len - 1]),
        (b'A', b'B', b'C')
    );
    fd.close().unwrap();
    let again = get(&f);
    assert_eq!(again, via_fd);
    // Writes through a mapping without msync reach the file by close too.
    let fd = open(&f, O_RDWR, 0).unwrap();
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        *(p as *mut u8).add(10) = b'D';
        assert_eq!(libc::munmap(p, len), 0);
    }
    fd.fsync().unwrap();
    fd.close().unwrap();
    // And via the CLI (the vault) and after a remount.
    let cat = m.avfs_cat("/mapped");
    assert_eq!(cat[..11], *b"A.........D");
    assert_eq!(cat[65_536], b'B');
    m.remount();
    let after = get(&m.p("mapped"));
    assert_eq!(after.len(), len);
    assert_eq!(&after[..11], b"A.........D");
    assert_eq!((after[65_536], after[len - 1]), (b'B', b'C'));
    // Mapping past EOF of a file grown with ftruncate, then written through the map.
    let g = m.p("grown");
    let fd = open(&g, O_CREAT | O_RDWR, 0o644).unwrap();
    fd.ftruncate(8192).unwrap();
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(b"mapped!".as_ptr(), (p as *mut u8).add(4096), 7);
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
        libc::munmap(p, 8192);
    }
    fd.close().unwrap();
    m.remount();
    let g2 = get(&m.p("grown"));
    assert_eq!(g2.len(), 8192);
    assert_eq!(&g2[4096..4103], b"mapped!");
}

#[test]
fn fsync_fdatasync_copy_file_range_seek() {
    let m = mount!("fsync_fdatasync_copy_file_range_seek");
    m.same("sync", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        let fd = open(&f, O_CREAT | O_RDWR, 0o644).unwrap();
        fd.write(b"data").unwrap();
        out.push(format!("{:?} {:?}", fd.fsync(), fd.fdatasync()));
        let dfd = open(d, O_RDONLY | O_DIRECTORY, 0).unwrap();
        out.push(format!("{:?} {:?}", dfd.fsync(), dfd.fdatasync()));
        // sync_file_range and syncfs accept FUSE files too.
        out.push(format!("{:?}", sc!(libc::syncfs(fd.0))));
        drop(fd);
        // copy_file_range (in-kernel or fallback) copies the right bytes.
        let mut rng = Rng::new(5);
        let src = rng.bytes(300_000);
        put(&d.join("src"), &src);
        let a = open(&d.join("src"), O_RDONLY, 0).unwrap();
        let b = open(&d.join("dst"), O_CREAT | O_WRONLY, 0o644).unwrap();
        let mut off_in: i64 = 1000;
        let mut off_out: i64 = 10;
        let mut total = 0i64;
        while total < 250_000 {
            let n = sc!(libc::copy_file_range(
                a.0,
                &mut off_in,
                b.0,
                &mut off_out,
                (250_000 - total) as usize,
                0
            ))
            .unwrap();
            if n == 0 {
                break;
            }
            total += n;
        }
        b.close().unwrap();
        let dst = get(&d.join("dst"));
        out.push(format!(
            "{} {} {}",
            total,
            dst.len(),
            dst[10..] == src[1000..251_000] && dst[..10].iter().all(|x| *x == 0)
        ));
        // SEEK_DATA / SEEK_HOLE: data at an offset inside the file, ENXIO past the end,
        // a hole (possibly only the virtual one at EOF) at or after the offset.
        let s = d.join("sparse");
        let sfd = open(&s, O_CREAT | O_RDWR, 0o644).unwrap();
        sfd.pwrite(b"x", 0).unwrap();
        sfd.pwrite(b"y", 4 << 20).unwrap();
        sfd.fsync().unwrap();
        let size = (4 << 20) + 1;
        out.push(format!("{:?}", sfd.lseek(0, libc::SEEK_DATA)));
        let h = sfd.lseek(0, libc::SEEK_HOLE).unwrap();
        out.push(format!("hole in range {}", h > 0 && h <= size));
        let dpos = sfd.lseek(1 << 20, libc::SEEK_DATA).unwrap();
        out.push(format!(
            "data in range {}",
            ((1 << 20)..=4 << 20).contains(&dpos)
        ));
        out.push(format!("{:?}", sfd.lseek(size, libc::SEEK_DATA)));
        out.push(format!("{:?}", sfd.lseek(size + 10, libc::SEEK_HOLE)));
        out.push(format!("{:?}", sfd.lseek(size - 1, libc::SEEK_HOLE)));
        out.push(format!("{:?}", sfd.lseek(-1, libc::SEEK_SET)));
        out
    });
}

// ------------------------------------------------------------------ names and kinds

#[test]
fn directories() {
    let m = mount!("directories");
    m.same("dirs", |d| {
        let mut out: Vec<String> = vec![];
        let a = d.join("a");
        out.push(format!("{:?}", en(std::fs::create_dir(&a))));
        out.push(format!("{:?}", en(std::fs::create_dir(&a))));
        out.push(format!("{:?}", en(std::fs::create_dir(d.join("x/y")))));
        put(&a.join("f"), b"1");
        std::fs::create_dir(a.join("sub")).unwrap();
        out.push(format!("{:?}", names(&a)));
        out.push(format!("{:?}", en(std::fs::remove_dir(&a))));
        out.push(format!("{:?}", en(std::fs::remove_dir(a.join("f")))));
        out.push(format!("{:?}", en(std::fs::remove_file(a.join("sub")))));
        out.push(format!("{:?}", en(std::fs::create_dir(a.join("f/g")))));
        let dot = cs(&a.join("sub/."));
        out.push(format!("{:?}", sc!(libc::rmdir(dot.as_ptr()))));
        let dotdot = cs(&a.join("sub/.."));
        out.push(format!("{:?}", sc!(libc::rmdir(dotdot.as_ptr()))));
        out.push(format!("{:?}", en(std::fs::remove_dir(a.join("sub")))));
        out.push(format!("{:?}", en(std::fs::remove_dir(a.join("sub")))));
        // mkdir mode, and a setgid directory passes its group and the bit on.
        let c = cs(&d.join("m"));
        sc!(libc::mkdir(c.as_ptr(), 0o750)).unwrap();
        out.push(format!("{:o}", st(&d.join("m")).unwrap().perm));
        std::fs::set_permissions(d.join("m"), std::fs::Permissions::from_mode(0o2775)).unwrap();
        std::fs::create_dir(d.join("m/inner")).unwrap();
        out.push(format!(
            "{:o}",
            st(&d.join("m/inner")).unwrap().perm & 0o2000
        ));
        // Many entries and readdir with seeks (getdents in small batches).
        for i in 0..300 {
            put(&d.join(format!("many{i:03}")), b"");
        }
        let list = names(d).unwrap();
        out.push(format!("{}", list.len()));
        out.push(format!(
            "{:?}",
            list.iter().filter(|n| n.starts_with(b"many")).count()
        ));
        // Remove while listing: readdir stays sane.
        let mut seen = 0;
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_name().as_bytes().starts_with(b"many") {
                std::fs::remove_file(e.path()).unwrap();
                seen += 1;
            }
        }
        out.push(format!("{seen}"));
        out.push(format!("{:?}", names(d).unwrap()));
        // The directory's mtime moves when entries change.
        let before = lstat(d).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        put(&d.join("new"), b"");
        let after = lstat(d).unwrap();
        out.push(format!(
            "{}",
            (after.st_mtime, after.st_mtime_nsec) > (before.st_mtime, before.st_mtime_nsec)
        ));
        out
    });
    // "." and ".." in a real listing of the mount.
    let c = cs(&m.mp);
    unsafe {
        let dir = libc::opendir(c.as_ptr());
        assert!(!dir.is_null());
        let mut got = vec![];
        loop {
            let e = libc::readdir(dir);
            if e.is_null() {
                break;
            }
            got.push(
                std::ffi::CStr::from_ptr((*e).d_name.as_ptr())
                    .to_bytes()
                    .to_vec(),
            );
        }
        libc::closedir(dir);
        assert!(got.contains(&b".".to_vec()) && got.contains(&b"..".to_vec()));
    }
}

#[test]
fn removed_directory_that_is_open() {
    let mut m = mount!("removed_directory_that_is_open");
    m.same("rmd", |d| {
        let mut out: Vec<String> = vec![];
        std::fs::create_dir(d.join("gone")).unwrap();
        let fd = open(&d.join("gone"), O_RDONLY | O_DIRECTORY, 0).unwrap();
        std::fs::remove_dir(d.join("gone")).unwrap();
        let s = fd.fstat().unwrap();
        out.push(format!("{:o} {}", s.st_mode, s.st_nlink));
        // Nothing can be created in it; listing it gives nothing.
        let name = std::ffi::CString::new("new").unwrap();
        out.push(format!(
            "{:?}",
            sc!(libc::openat(fd.0, name.as_ptr(), O_CREAT | O_WRONLY, 0o644))
        ));
        out.push(format!(
            "{:?}",
            sc!(libc::mkdirat(fd.0, name.as_ptr(), 0o755))
        ));
        out.push(format!("{:?}", sc!(libc::fchmod(fd.0, 0o700))));
        // A directory replaced by rename while open.
        std::fs::create_dir(d.join("a")).unwrap();
        std::fs::create_dir(d.join("b")).unwrap();
        let fb = open(&d.join("b"), O_RDONLY | O_DIRECTORY, 0).unwrap();
        std::fs::rename(d.join("a"), d.join("b")).unwrap();
        out.push(format!("{:?}", fb.fstat().map(|s| s.st_nlink)));
        out.push(format!("{:?}", names(d)));
        out
    });
    // Nothing is left behind once closed.
    m.remount();
    assert_eq!(names(&m.p("rmd")).unwrap(), vec![b"b".to_vec()]);
    let v = m.avfs_json(&["vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}

#[test]
fn symlinks() {
    let m = mount!("symlinks");
    m.same("links", |d| {
        let mut out: Vec<String> = vec![];
        put(&d.join("target"), b"T");
        std::os::unix::fs::symlink("target", d.join("l")).unwrap();
        std::os::unix::fs::symlink("does/not/exist", d.join("dangling")).unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("abs")).unwrap();
        out.push(format!("{:?}", std::fs::read_link(d.join("l")).unwrap()));
        out.push(format!(
            "{:?}",
            std::fs::read_link(d.join("dangling")).unwrap()
        ));
        out.push(format!("{:?}", std::fs::read(d.join("l")).unwrap()));
        out.push(format!("{:?}", std::fs::read(d.join("abs")).unwrap()));
        out.push(format!("{:?}", en(std::fs::read(d.join("dangling")))));
        out.push(format!("{:?}", st(&d.join("dangling"))));
        out.push(format!("{:?}", stat(&d.join("dangling")).map(|_| ())));
        out.push(format!("{:?}", en(std::fs::read_link(d.join("target")))));
        out.push(format!(
            "{:?}",
            en(std::os::unix::fs::symlink("x", d.join("l")))
        ));
        // readlink with a small buffer truncates silently.
        let c = cs(&d.join("dangling"));
        let mut buf = [0u8; 4];
        let n = sc!(libc::readlink(c.as_ptr(), buf.as_mut_ptr().cast(), 4)).unwrap();
        out.push(format!("{n} {:?}", &buf[..n as usize]));
        // Loops: ELOOP.
        std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
        out.push(format!("{:?}", en(std::fs::read(d.join("loop1")))));
        // Symlink to a directory: traversal, and lstat of the link itself.
        std::fs::create_dir(d.join("realdir")).unwrap();
        put(&d.join("realdir/inside"), b"in");
        std::os::unix::fs::symlink("realdir", d.join("dirlink")).unwrap();
        out.push(format!(
            "{:?}",
            std::fs::read(d.join("dirlink/inside")).unwrap()
        ));
        out.push(format!("{:?}", en(std::fs::remove_dir(d.join("dirlink")))));
        out.push(format!("{:?}", en(std::fs::remove_file(d.join("dirlink")))));
        // A long target (4095 bytes is the limit; the name part is what matters).
        let long = "a/".repeat(1000) + "end";
        out.push(format!(
            "{:?}",
            en(std::os::unix::fs::symlink(&long, d.join("long")))
        ));
        out.push(format!(
            "{}",
            std::fs::read_link(d.join("long"))
                .unwrap()
                .as_os_str()
                .len()
        ));
        // Unlinking the target makes the link dangle; recreating it heals it.
        std::fs::remove_file(d.join("target")).unwrap();
        out.push(format!("{:?}", en(std::fs::read(d.join("l")))));
        put(&d.join("target"), b"again");
        out.push(format!("{:?}", std::fs::read(d.join("l")).unwrap()));
        let s = st(&d.join("l")).unwrap();
        out.push(format!("{:o} {}", s.fmt, s.size));
        out
    });
}

#[test]
fn hard_links_and_nlink() {
    let m = mount!("hard_links_and_nlink");
    m.same("hl", |d| {
        let mut out: Vec<String> = vec![];
        put(&d.join("a"), b"one");
        std::fs::hard_link(d.join("a"), d.join("b")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::hard_link(d.join("a"), d.join("sub/c")).unwrap();
        out.push(format!("{:?}", st(&d.join("a")).unwrap().nlink));
        let ia = lstat(&d.join("a")).unwrap().st_ino;
        out.push(format!("{}", ia == lstat(&d.join("sub/c")).unwrap().st_ino));
        // A write through one name shows through every name.
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("b"))
            .unwrap();
        let fd = open(&d.join("b"), O_WRONLY | O_APPEND, 0).unwrap();
        fd.write(b" two").unwrap();
        fd.close().unwrap();
        out.push(format!(
            "{:?}",
            String::from_utf8(get(&d.join("sub/c"))).unwrap()
        ));
        // chmod through one name shows through the others.
        std::fs::set_permissions(d.join("sub/c"), std::fs::Permissions::from_mode(0o600)).unwrap();
        out.push(format!("{:o}", st(&d.join("a")).unwrap().perm));
        std::fs::remove_file(d.join("a")).unwrap();
        out.push(format!("{:?}", st(&d.join("b")).unwrap().nlink));
        out.push(format!(
            "{:?}",
            en(std::fs::hard_link(d.join("b"), d.join("sub/c")))
        ));
        out.push(format!(
            "{:?}",
            en(std::fs::hard_link(d.join("sub"), d.join("dirlink")))
        ));
        out.push(format!(
            "{:?}",
            en(std::fs::hard_link(d.join("missing"), d.join("x")))
        ));
        // Hard link to a symlink links the symlink itself (linkat without FOLLOW).
        std::os::unix::fs::symlink("b", d.join("sl")).unwrap();
        let (a, b) = (cs(&d.join("sl")), cs(&d.join("sl2")));
        out.push(format!(
            "{:?}",
            sc!(libc::linkat(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                0
            ))
        ));
        out.push(format!("{:?}", st(&d.join("sl2"))));
        // rename of one link onto another link of the same inode: a no-op, both stay.
        out.push(format!(
            "{:?}",
            en(std::fs::rename(d.join("b"), d.join("sub/c")))
        ));
        out.push(format!("{:?}", names(d)));
        out.push(format!("{:?}", st(&d.join("b")).unwrap().nlink));
        std::fs::remove_file(d.join("b")).unwrap();
        out.push(format!("{:?}", st(&d.join("sub/c")).unwrap().nlink));
        out
    });
}

#[test]
fn hard_links_survive_checkpoint_and_remount() {
    let mut m = mount!("hard_links_survive_checkpoint_and_remount");
    std::fs::create_dir(m.p("d1")).unwrap();
    std::fs::create_dir(m.p("d2")).unwrap();
    put(&m.p("d1/f"), b"linked");
    std::fs::hard_link(m.p("d1/f"), m.p("d2/g")).unwrap();
    m.avfs(&["checkpoint", "save", "c1"]);
    m.remount();
    assert_eq!(lstat(&m.p("d2/g")).unwrap().st_nlink, 2);
    assert_eq!(
        lstat(&m.p("d1/f")).unwrap().st_ino,
        lstat(&m.p("d2/g")).unwrap().st_ino
    );
    let fd = open(&m.p("d2/g"), O_WRONLY | O_APPEND, 0).unwrap();
    fd.write(b"!").unwrap();
    fd.close().unwrap();
    assert_eq!(get(&m.p("d1/f")), b"linked!");
}

#[test]
fn fifos_sockets_and_devices() {
    let m = mount!("fifos_sockets_and_devices");
    m.same("special", |d| {
        let mut out: Vec<String> = vec![];
        let fifo = cs(&d.join("fifo"));
        out.push(format!("{:?}", sc!(libc::mkfifo(fifo.as_ptr(), 0o644))));
        out.push(format!("{:?}", sc!(libc::mkfifo(fifo.as_ptr(), 0o644))));
        out.push(format!("{:?}", st(&d.join("fifo"))));
        // The FIFO works (the kernel runs the pipe; we only keep the node).
        let path = d.join("fifo");
        let t = std::thread::spawn(move || std::fs::write(path, b"through the pipe").unwrap());
        out.push(format!("{:?}", String::from_utf8(get(&d.join("fifo")))));
        t.join().unwrap();
        let sock = cs(&d.join("sock"));
        out.push(format!(
            "{:?}",
            sc!(libc::mknod(sock.as_ptr(), libc::S_IFSOCK | 0o600, 0))
        ));
        out.push(format!("{:?}", st(&d.join("sock"))));
        // A real unix socket bound inside the directory.
        let bound = d.join("bound.sock");
        let l = std::os::unix::net::UnixListener::bind(&bound);
        out.push(format!(
            "{:?}",
            l.as_ref().map(|_| ()).map_err(|e| e.raw_os_error())
        ));
        if let Ok(l) = l {
            let p2 = bound.clone();
            let t = std::thread::spawn(move || {
                use std::io::Write;
                let mut s = std::os::unix::net::UnixStream::connect(p2).unwrap();
                s.write_all(b"hi").unwrap();
            });
            let (mut s, _) = l.accept().unwrap();
            let mut buf = String::new();
            use std::io::Read;
            s.read_to_string(&mut buf).unwrap();
            t.join().unwrap();
            out.push(buf);
        }
        out.push(format!("{:?}", st(&bound).map(|s| s.fmt)));
        let reg = cs(&d.join("regular"));
        out.push(format!(
            "{:?}",
            sc!(libc::mknod(reg.as_ptr(), libc::S_IFREG | 0o640, 0))
        ));
        out.push(format!("{:?}", st(&d.join("regular"))));
        // Devices as root: the node is kept with its rdev.
        let dev = cs(&d.join("null"));
        out.push(format!(
            "{:?}",
            sc!(libc::mknod(
                dev.as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 3)
            ))
        ));
        out.push(format!("{:?}", lstat(&d.join("null")).map(|s| s.st_rdev)));
        out.push(format!("{:?}", st(&d.join("null"))));
        out
    });
}

// ------------------------------------------------------------------ rename

#[test]
fn rename_semantics() {
    let m = mount!("rename_semantics");
    m.same("ren", |d| {
        let mut out: Vec<String> = vec![];
        let r =
            |a: &str, b: &str| format!("{a}->{b}: {:?}", en(std::fs::rename(d.join(a), d.join(b))));
        put(&d.join("f1"), b"1");
        put(&d.join("f2"), b"2");
        std::fs::create_dir(d.join("empty")).unwrap();
        std::fs::create_dir(d.join("full")).unwrap();
        put(&d.join("full/x"), b"x");
        std::fs::create_dir(d.join("d1")).unwrap();
        put(&d.join("d1/in"), b"in");
        std::fs::create_dir(d.join("d1/deep")).unwrap();
        // Over an existing file: replaced.
        out.push(r("f1", "f2"));
        out.push(format!("{:?} {:?}", names(d), get(&d.join("f2"))));
        // File over directory, directory over file.
        out.push(r("f2", "empty"));
        out.push(r("d1", "f2"));
        // Directory over an empty directory: replaced; over a non-empty one: ENOTEMPTY.
        std::fs::create_dir(d.join("e2")).unwrap();
        out.push(r("e2", "empty"));
        out.push(r("empty", "full"));
        // Into its own subdirectory: EINVAL; onto its own ancestor: ENOTEMPTY.
        out.push(r("d1", "d1/deep/moved"));
        out.push(r("d1", "d1/deep"));
        out.push(r("d1/deep", "d1"));
        // Missing source, missing target dir, same name.
        out.push(r("nope", "x"));
        out.push(r("f2", "nodir/x"));
        out.push(r("f2", "f2"));
        out.push(r("f2", "f2/x"));
        // Directory rename keeps contents; files inside are reachable at the new path.
        out.push(r("d1", "d1renamed"));
        out.push(format!("{:?}", get(&d.join("d1renamed/in"))));
        out.push(r("d1renamed", "full/d1"));
        out.push(format!("{:?}", get(&d.join("full/d1/in"))));
        out.push(format!("{:?}", names(&d.join("full"))));
        // An open file renamed stays readable and writable through its fd.
        let fd = open(&d.join("full/x"), O_RDWR, 0).unwrap();
        out.push(r("full/x", "moved-x"));
        fd.pwrite(b"y", 1).unwrap();
        fd.close().unwrap();
        out.push(format!("{:?}", get(&d.join("moved-x"))));
        // rename over an open file: the old one stays readable through its fd.
        put(&d.join("victim"), b"victim data");
        let vfd = open(&d.join("victim"), O_RDONLY, 0).unwrap();
        out.push(r("moved-x", "victim"));
        out.push(format!("{:?}", vfd.read_all().map(String::from_utf8)));
        out.push(format!("{:?}", vfd.fstat().map(|s| s.st_nlink)));
        drop(vfd);
        out.push(format!("{:?}", get(&d.join("victim"))));
        out.push(format!("{:?}", names(d)));
        out
    });
}

fn renameat2(a: &Path, b: &Path, flags: u32) -> Result<i64, i32> {
    let (a, b) = (cs(a), cs(b));
    sc!(libc::renameat2(
        libc::AT_FDCWD,
        a.as_ptr(),
        libc::AT_FDCWD,
        b.as_ptr(),
        flags
    ))
}

#[test]
fn rename_noreplace_and_exchange() {
    let m = mount!("rename_noreplace_and_exchange");
    m.same("ren2", |d| {
        let mut out: Vec<String> = vec![];
        put(&d.join("a"), b"A");
        put(&d.join("b"), b"B");
        std::fs::create_dir(d.join("dir")).unwrap();
        put(&d.join("dir/inner"), b"I");
        out.push(format!(
            "{:?}",
            renameat2(&d.join("a"), &d.join("b"), libc::RENAME_NOREPLACE)
        ));
        out.push(format!(
            "{:?}",
            renameat2(&d.join("a"), &d.join("c"), libc::RENAME_NOREPLACE)
        ));
        out.push(format!("{:?}", names(d)));
        out.push(format!(
            "{:?}",
            renameat2(&d.join("c"), &d.join("b"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!("{:?} {:?}", get(&d.join("b")), get(&d.join("c"))));
        // Exchange a file and a directory.
        out.push(format!(
            "{:?}",
            renameat2(&d.join("b"), &d.join("dir"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!(
            "{:?} {:?}",
            get(&d.join("dir")),
            get(&d.join("b/inner"))
        ));
        // Exchange with a missing name: ENOENT; both flags: EINVAL.
        out.push(format!(
            "{:?}",
            renameat2(&d.join("c"), &d.join("zz"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!(
            "{:?}",
            renameat2(
                &d.join("c"),
                &d.join("dir"),
                libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE
            )
        ));
        // Exchange across directories, and a directory with its own child: EINVAL.
        std::fs::create_dir(d.join("b/sub")).unwrap();
        out.push(format!(
            "{:?}",
            renameat2(&d.join("c"), &d.join("b/inner"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!(
            "{:?} {:?}",
            get(&d.join("c")),
            get(&d.join("b/inner"))
        ));
        out.push(format!(
            "{:?}",
            renameat2(&d.join("b"), &d.join("b/sub"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!(
            "{:?}",
            renameat2(&d.join("b/sub"), &d.join("b"), libc::RENAME_EXCHANGE)
        ));
        out.push(format!("{:?}", names(&d.join("b"))));
        out
    });
}

#[test]
fn unlinked_open_file_stays_readable_until_close() {
    let mut m = mount!("unlinked_open_file_stays_readable_until_close");
    m.same("ul", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        put(&f, &[9u8; 100_000]);
        let fd = open(&f, O_RDWR, 0).unwrap();
        let fd2 = open(&f, O_RDONLY, 0).unwrap();
        std::fs::remove_file(&f).unwrap();
        out.push(format!("{:?}", lstat(&f).map(|_| ())));
        out.push(format!("{:?}", names(d)));
        out.push(format!("{:?}", fd.fstat().map(|s| (s.st_nlink, s.st_size))));
        out.push(format!("{:?}", fd.read_all().map(|v| v.len())));
        fd.pwrite(b"more", 100_000).unwrap();
        fd.close().unwrap();
        out.push(format!(
            "{:?}",
            fd2.read_all().map(|v| (v.len(), v[100_000..].to_vec()))
        ));
        // A new file with the same name is a different file.
        put(&f, b"new");
        out.push(format!("{:?}", fd2.pread(3, 0)));
        drop(fd2);
        out.push(format!("{:?}", get(&f)));
        out
    });
    // An unlinked-open file never appears in the vault, and vanishes after close.
    let f = m.p("ghost");
    put(&f, b"boo");
    let fd = open(&f, O_RDONLY, 0).unwrap();
    std::fs::remove_file(&f).unwrap();
    let ls = m.avfs(&["ls", "/"]);
    assert!(!ls.contains("ghost"), "{ls}");
    assert_eq!(fd.read_all().unwrap(), b"boo");
    drop(fd);
    m.remount();
    assert_eq!(lstat(&m.p("ghost")).map(|_| ()), Err(libc::ENOENT));
    let v = m.avfs_json(&["vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}

// ------------------------------------------------------------------ attributes

fn utimens(p: &Path, a: (i64, i64), m: (i64, i64), flags: i32) -> Result<i64, i32> {
    let c = cs(p);
    let t = [
        libc::timespec {
            tv_sec: a.0,
            tv_nsec: a.1,
        },
        libc::timespec {
            tv_sec: m.0,
            tv_nsec: m.1,
        },
    ];
    sc!(libc::utimensat(
        libc::AT_FDCWD,
        c.as_ptr(),
        t.as_ptr(),
        flags
    ))
}

#[test]
fn chmod_chown_utimens() {
    let mut m = mount!("chmod_chown_utimens");
    m.same("attrs", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        put(&f, b"x");
        for mode in [0o000, 0o777, 0o4755, 0o2710, 0o1777, 0o644] {
            let c = cs(&f);
            sc!(libc::chmod(c.as_ptr(), mode)).unwrap();
            out.push(format!("{:o}", st(&f).unwrap().perm));
        }
        // chown (we are root).
        let c = cs(&f);
        out.push(format!("{:?}", sc!(libc::chown(c.as_ptr(), 1234, 5678))));
        out.push(format!("{:?}", st(&f).map(|s| (s.uid, s.gid))));
        out.push(format!("{:?}", sc!(libc::chown(c.as_ptr(), u32::MAX, 42))));
        out.push(format!("{:?}", st(&f).map(|s| (s.uid, s.gid))));
        // chown clears setuid/setgid on a file (root too, for an executable).
        sc!(libc::chmod(c.as_ptr(), 0o6755)).unwrap();
        sc!(libc::chown(c.as_ptr(), 1, 1)).unwrap();
        out.push(format!("{:o}", st(&f).unwrap().perm));
        // lchown on a symlink changes the link, not the target.
        std::os::unix::fs::symlink("f", d.join("l")).unwrap();
        let lc = cs(&d.join("l"));
        out.push(format!("{:?}", sc!(libc::lchown(lc.as_ptr(), 77, 88))));
        out.push(format!(
            "{:?} {:?}",
            st(&d.join("l")).map(|s| (s.uid, s.gid)),
            st(&f).map(|s| (s.uid, s.gid))
        ));
        // utimensat with nanoseconds.
        out.push(format!(
            "{:?}",
            utimens(
                &f,
                (1_000_000_000, 123_456_789),
                (1_500_000_000, 987_654_321),
                0
            )
        ));
        let s = lstat(&f).unwrap();
        out.push(format!("{} {}", s.st_mtime, s.st_mtime_nsec));
        // UTIME_OMIT leaves mtime; UTIME_NOW sets it to now.
        out.push(format!(
            "{:?}",
            utimens(&f, (0, libc::UTIME_NOW), (0, libc::UTIME_OMIT), 0)
        ));
        let s = lstat(&f).unwrap();
        out.push(format!("{} {}", s.st_mtime, s.st_mtime_nsec));
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        out.push(format!(
            "{:?}",
            utimens(&f, (0, libc::UTIME_OMIT), (0, libc::UTIME_NOW), 0)
        ));
        let s = lstat(&f).unwrap();
        // The kernel's clock for timestamps is coarse: it may lag a tick behind.
        out.push(format!(
            "now {}",
            s.st_mtime >= before - 1 && s.st_mtime <= before + 5
        ));
        // Times far in the past and before the epoch.
        out.push(format!(
            "{:?}",
            utimens(&f, (0, libc::UTIME_OMIT), (-1_000, 5), 0)
        ));
        let s = lstat(&f).unwrap();
        out.push(format!("{} {}", s.st_mtime, s.st_mtime_nsec));
        // Bad nanoseconds: EINVAL.
        out.push(format!("{:?}", utimens(&f, (0, 0), (0, 1_000_000_000), 0)));
        // Symlink times with AT_SYMLINK_NOFOLLOW.
        out.push(format!(
            "{:?}",
            utimens(&d.join("l"), (5, 0), (6, 7), libc::AT_SYMLINK_NOFOLLOW)
        ));
        let s = lstat(&d.join("l")).unwrap();
        out.push(format!("{} {}", s.st_mtime, s.st_mtime_nsec));
        // chmod on a missing file.
        let mc = cs(&d.join("missing"));
        out.push(format!("{:?}", sc!(libc::chmod(mc.as_ptr(), 0o600))));
        out
    });
    // ctime moves on chmod; nanosecond mtimes survive a remount and a checkpoint.
    let f = m.p("attrs/f");
    let c0 = lstat(&f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c1 = lstat(&f).unwrap();
    assert!((c1.st_ctime, c1.st_ctime_nsec) > (c0.st_ctime, c0.st_ctime_nsec));
    utimens(&f, (1, 0), (1_234_567_890, 123_456_789), 0).unwrap();
    m.remount();
    let s = lstat(&m.p("attrs/f")).unwrap();
    assert_eq!((s.st_mtime, s.st_mtime_nsec), (1_234_567_890, 123_456_789));
    assert_eq!(s.st_mode & 0o7777, 0o600);
}

/// tar, `cp -p` and `rsync -t` write a file and set its times before they close it: the
/// times they set are the file's, also once it is stored, not the time of the close.
#[test]
fn times_set_before_close_survive_it() {
    let mut m = mount!("times_set_before_close_survive_it");
    let f = m.p("archived");
    let fd = open(&f, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o644).unwrap();
    let data = b"from an archive\n";
    assert_eq!(
        sc!(libc::write(fd.0, data.as_ptr().cast(), data.len())),
        Ok(data.len() as i64)
    );
    let t = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 981_173_106,
            tv_nsec: 5,
        },
    ];
    sc!(libc::futimens(fd.0, t.as_ptr())).unwrap();
    drop(fd);
    // A write after the times were set makes the file modified now again.
    let g = m.p("touched-then-written");
    let fd = open(&g, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o644).unwrap();
    sc!(libc::futimens(fd.0, t.as_ptr())).unwrap();
    assert_eq!(
        sc!(libc::write(fd.0, data.as_ptr().cast(), data.len())),
        Ok(data.len() as i64)
    );
    drop(fd);
    let before = lstat(&f).unwrap();
    assert_eq!((before.st_mtime, before.st_mtime_nsec), (981_173_106, 5));
    m.remount();
    let s = lstat(&f).unwrap();
    assert_eq!(
        (s.st_mtime, s.st_mtime_nsec),
        (981_173_106, 5),
        "after a remount"
    );
    assert!(
        lstat(&g).unwrap().st_mtime > 1_700_000_000,
        "written after the times were set"
    );
    // The vault holds the same time (the CLI reads it, not the mount).
    let st = m.avfs_json(&["stat", "/archived"]);
    assert_eq!(st["mtime_ns"], 981_173_106_000_000_005i64, "{st}");
}

/// Copy the file and you copied everything: once `avfs unmount` returned, the .avfs file
/// alone (without its -wal) holds every change made through the mount.
#[test]
fn after_unmount_the_vault_file_alone_holds_everything() {
    let mut m = mount!("after_unmount_the_vault_file_alone_holds_everything");
    for i in 0..50 {
        put(&m.p(&format!("late-{i}")), format!("{i}\n").as_bytes());
    }
    // Where the file is, asked before the unmount: any command after it would close the
    // vault as its last user, which checkpoints the WAL, and hide what this test checks.
    let info = m.avfs_json(&["vault", "info"]);
    let vault = std::path::PathBuf::from(info["vault"]["path"].as_str().unwrap());
    m.unmount();
    let copy = m.env.path("copy.avfs");
    std::fs::copy(&vault, &copy).unwrap();
    let copy = copy.to_str().unwrap();
    let listing = m.env.json(&["--vault", copy, "ls", "/"]);
    let names = listing.to_string();
    for i in 0..50 {
        assert!(
            names.contains(&format!("\"late-{i}\"")),
            "late-{i} missing: {listing}"
        );
    }
    let cat = m.env.ok(&["--vault", copy, "cat", "/late-49"]);
    assert_eq!(cat.stdout, "49\n");
    let v = m.env.json(&["--vault", copy, "vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}

/// Runs `sh -c script` as uid/gid 65534 with no supplementary groups; its exit code.
fn as_nobody(script: &str) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn permission_checks_as_another_user() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED permission_checks_as_another_user: needs root to switch users");
        return;
    }
    let m = mount!("permission_checks_as_another_user", "--allow-other");
    // Let the other user reach the mountpoint.
    let mut p = m.mp.clone();
    while let Some(parent) = p.parent() {
        if parent == Path::new("/") || parent == Path::new("/tmp") {
            break;
        }
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o755)).unwrap();
        p = parent.to_path_buf();
    }
    std::fs::set_permissions(&m.mp, std::fs::Permissions::from_mode(0o755)).unwrap();
    put(&m.p("secret"), b"root only");
    std::fs::set_permissions(m.p("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    put(&m.p("public"), b"everyone");
    std::fs::set_permissions(m.p("public"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(m.p("closed")).unwrap();
    put(&m.p("closed/inner"), b"x");
    std::fs::set_permissions(m.p("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(m.p("open")).unwrap();
    std::fs::set_permissions(m.p("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mp = m.mp.display().to_string();
    // The errno each attempt gets, printed by python would be nicer; sh's messages suffice:
    // use a tiny C-like check via `cat`/`touch` exit codes plus the message text.
    let (code, err) = as_nobody(&format!("cat {mp}/public"));
    assert_eq!(code, 0, "{err}");
    let (code, err) = as_nobody(&format!("cat {mp}/secret"));
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    let (code, err) = as_nobody(&format!("echo x >> {mp}/public"));
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    let (code, err) = as_nobody(&format!("cat {mp}/closed/inner"));
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    let (code, err) = as_nobody(&format!("touch {mp}/newfile"));
    assert_ne!(code, 0);
    assert!(err.contains("Permission denied"), "{err}");
    let (code, err) = as_nobody(&format!("chmod 777 {mp}/public"));
    assert_ne!(code, 0);
    assert!(err.contains("Operation not permitted"), "{err}");
    // In a world-writable directory the other user creates files it owns.
    let (code, err) = as_nobody(&format!(
        "echo mine > {mp}/open/mine && chmod 600 {mp}/open/mine"
    ));
    assert_eq!(code, 0, "{err}");
    let s = lstat(&m.p("open/mine")).unwrap();
    assert_eq!(
        (s.st_uid, s.st_gid, s.st_mode & 0o777),
        (65534, 65534, 0o600)
    );
    // The exact errno, from a forked child that switches its fs uid.
    let secret = cs(&m.p("secret"));
    let r = in_child_as(65534, || unsafe {
        let fd = libc::open(secret.as_ptr(), libc::O_RDONLY);
        if fd >= 0 {
            0
        } else {
            *libc::__errno_location()
        }
    });
    assert_eq!(r, libc::EACCES);
    let public = cs(&m.p("public"));
    let r = in_child_as(65534, || unsafe {
        let fd = libc::open(public.as_ptr(), libc::O_RDONLY);
        if fd >= 0 {
            0
        } else {
            *libc::__errno_location()
        }
    });
    assert_eq!(r, 0);
    let r = in_child_as(65534, || unsafe {
        if libc::chmod(public.as_ptr(), 0o777) == 0 {
            0
        } else {
            *libc::__errno_location()
        }
    });
    assert_eq!(r, libc::EPERM);
}

/// Forks; the child sets its uid/gid to `id` and returns `f()` as its exit status.
fn in_child_as(id: u32, f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes raw syscalls before _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            libc::setgroups(0, std::ptr::null());
            if libc::setresgid(id, id, id) != 0 || libc::setresuid(id, id, id) != 0 {
                libc::_exit(200);
            }
            libc::_exit(f());
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }
}

fn setx(p: &Path, name: &str, val: &[u8], flags: i32) -> Result<i64, i32> {
    let (c, n) = (cs(p), std::ffi::CString::new(name).unwrap());
    sc!(libc::lsetxattr(
        c.as_ptr(),
        n.as_ptr(),
        val.as_ptr().cast(),
        val.len(),
        flags
    ))
}

fn getx(p: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let (c, n) = (cs(p), std::ffi::CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    let got = sc!(libc::lgetxattr(
        c.as_ptr(),
        n.as_ptr(),
        buf.as_mut_ptr().cast(),
        size
    ))?;
    if size == 0 {
        return Ok(format!("size {got}").into_bytes());
    }
    buf.truncate(got as usize);
    Ok(buf)
}

fn listx(p: &Path, size: usize) -> Result<Vec<u8>, i32> {
    let c = cs(p);
    let mut buf = vec![0u8; size];
    let got = sc!(libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), size))?;
    if size == 0 {
        return Ok(format!("size {got}").into_bytes());
    }
    buf.truncate(got as usize);
    // Only user.* names: other filesystems may add security.* ones.
    let mut names: Vec<&[u8]> = buf
        .split(|b| *b == 0)
        .filter(|n| n.starts_with(b"user."))
        .collect();
    names.sort();
    Ok(names.join(&b","[..]))
}

fn rmx(p: &Path, name: &str) -> Result<i64, i32> {
    let (c, n) = (cs(p), std::ffi::CString::new(name).unwrap());
    sc!(libc::lremovexattr(c.as_ptr(), n.as_ptr()))
}

#[test]
fn xattrs() {
    let mut m = mount!("xattrs");
    m.same("x", |d| {
        let mut out: Vec<String> = vec![];
        let f = d.join("f");
        put(&f, b"");
        out.push(format!("{:?}", getx(&f, "user.none", 100)));
        out.push(format!("{:?}", setx(&f, "user.a", b"alpha", 0)));
        out.push(format!("{:?}", setx(&f, "user.b", b"", 0)));
        out.push(format!("{:?}", setx(&f, "user.bin", &[0, 1, 2, 255], 0)));
        out.push(format!("{:?}", getx(&f, "user.a", 100)));
        out.push(format!("{:?}", getx(&f, "user.a", 0)));
        out.push(format!("{:?}", getx(&f, "user.a", 2)));
        out.push(format!("{:?}", getx(&f, "user.b", 10)));
        out.push(format!("{:?}", getx(&f, "user.bin", 10)));
        out.push(format!("{:?}", listx(&f, 1000).map(String::from_utf8)));
        out.push(format!("{:?}", listx(&f, 3)));
        out.push(format!(
            "{:?}",
            setx(&f, "user.a", b"x", libc::XATTR_CREATE)
        ));
        out.push(format!(
            "{:?}",
            setx(&f, "user.c", b"x", libc::XATTR_REPLACE)
        ));
        out.push(format!(
            "{:?}",
            setx(&f, "user.a", b"replaced", libc::XATTR_REPLACE)
        ));
        out.push(format!("{:?}", getx(&f, "user.a", 100)));
        out.push(format!(
            "{:?}",
            setx(&f, "user.c", b"created", libc::XATTR_CREATE)
        ));
        out.push(format!("{:?}", rmx(&f, "user.b")));
        out.push(format!("{:?}", rmx(&f, "user.b")));
        out.push(format!("{:?}", listx(&f, 1000).map(String::from_utf8)));
        // A large value.
        let big = vec![b'v'; 4000];
        out.push(format!("{:?}", setx(&f, "user.big", &big, 0)));
        out.push(format!("{:?}", getx(&f, "user.big", 4000).map(|v| v.len())));
        // Name rules: empty name part, too long, unknown namespace.
        out.push(format!(
            "{:?}",
            setx(&f, &format!("user.{}", "n".repeat(251)), b"x", 0)
        ));
        out.push(format!(
            "{:?}",
            setx(&f, &format!("user.{}", "n".repeat(300)), b"x", 0)
        ));
        out.push(format!("{:?}", setx(&f, "bogus.name", b"x", 0)));
        out.push(format!("{:?}", getx(&f, "bogus.name", 10)));
        // xattrs on a directory.
        out.push(format!("{:?}", setx(d, "user.dir", b"d", 0)));
        out.push(format!("{:?}", getx(d, "user.dir", 10)));
        // On a missing file: ENOENT.
        out.push(format!("{:?}", getx(&d.join("missing"), "user.a", 10)));
        // Hard links share xattrs.
        std::fs::hard_link(&f, d.join("g")).unwrap();
        out.push(format!("{:?}", getx(&d.join("g"), "user.c", 100)));
        out
    });
    // xattrs survive a remount and a checkpoint/restore.
    m.avfs(&["checkpoint", "save", "x1"]);
    m.remount();
    assert_eq!(getx(&m.p("x/f"), "user.a", 100).unwrap(), b"replaced");
    assert_eq!(getx(&m.p("x"), "user.dir", 100).unwrap(), b"d");
}

#[test]
fn statfs_reports_real_numbers() {
    let m = mount!("statfs_reports_real_numbers");
    let c = cs(&m.mp);
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    sc!(libc::statfs(c.as_ptr(), &mut s)).unwrap();
    assert!(
        s.f_bsize > 0 && s.f_blocks > 0 && s.f_bfree > 0 && s.f_bavail > 0,
        "{:?}",
        (s.f_bsize, s.f_blocks, s.f_bfree, s.f_bavail)
    );
    assert!(s.f_files > 0 && s.f_ffree > 0);
    assert_eq!(s.f_namelen, 255);
    assert_eq!(s.f_type, 0x6573_5546, "FUSE_SUPER_MAGIC");
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    sc!(libc::statvfs(c.as_ptr(), &mut v)).unwrap();
    assert!(v.f_frsize > 0 && v.f_blocks > 0);
    // df sees it too.
    let out = std::process::Command::new("df")
        .arg(&m.mp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Used inode count reflects files.
    for i in 0..20 {
        put(&m.p(&format!("f{i}")), b"x");
    }
    let mut s2: libc::statfs = unsafe { std::mem::zeroed() };
    sc!(libc::statfs(c.as_ptr(), &mut s2)).unwrap();
    assert!(
        s2.f_files - s2.f_ffree >= 20,
        "{} {}",
        s2.f_files,
        s2.f_ffree
    );
}

#[test]
fn name_lengths_and_bytes() {
    let mut m = mount!("name_lengths_and_bytes");
    m.same("names", |d| {
        use std::ffi::OsStr;
        let mut out: Vec<String> = vec![];
        let n255 = "a".repeat(255);
        let n256 = "a".repeat(256);
        out.push(format!("{:?}", en(std::fs::write(d.join(&n255), b"ok"))));
        out.push(format!("{:?}", en(std::fs::write(d.join(&n256), b"no"))));
        out.push(format!("{:?}", en(std::fs::create_dir(d.join(&n256)))));
        out.push(
            format!("{:?}", en(std::fs::metadata(d.join(&n256))))
                .replace(|c: char| c.is_ascii_digit(), ""),
        );
        out.push(format!(
            "{:?}",
            en(std::os::unix::fs::symlink("t", d.join(&n256)))
        ));
        out.push(format!(
            "{:?}",
            en(std::fs::rename(d.join(&n255), d.join(&n256)))
        ));
        out.push(format!(
            "{:?}",
            en(std::fs::hard_link(d.join(&n255), d.join(&n256)))
        ));
        // 255 bytes of multi-byte UTF-8 (85 × 3 bytes).
        let u = "€".repeat(85);
        out.push(format!("{:?}", en(std::fs::write(d.join(&u), b"euro"))));
        let u2 = "€".repeat(86);
        out.push(format!("{:?}", en(std::fs::write(d.join(&u2), b"euro"))));
        // Any bytes but '/' and NUL.
        let weird: Vec<Vec<u8>> = vec![
            b"\xff\xfe not utf8".to_vec(),
            b"new\nline".to_vec(),
            b"tab\there".to_vec(),
            b" leading space".to_vec(),
            b"trailing space ".to_vec(),
            b"\x01\x02\x7f".to_vec(),
            b"-dash".to_vec(),
            b"back\\slash".to_vec(),
            b"quote\"'".to_vec(),
            b"..dots".to_vec(),
            b"...".to_vec(),
            (1u8..=255).filter(|b| *b != b'/').collect(),
        ];
        for w in &weird {
            let p = d.join(OsStr::from_bytes(w));
            out.push(format!("{:?}", en(std::fs::write(&p, w))));
            out.push(format!("{:?}", en(std::fs::read(&p)).map(|v| v == *w)));
        }
        out.push(format!("{:?}", names(d).map(|v| v.len())));
        let listed = names(d).unwrap();
        for w in &weird {
            out.push(format!("{}", listed.contains(w)));
        }
        // Renames and directories with such names.
        let a = d.join(OsStr::from_bytes(b"\xc3\x28dir"));
        out.push(format!("{:?}", en(std::fs::create_dir(&a))));
        out.push(format!(
            "{:?}",
            en(std::fs::rename(
                d.join(OsStr::from_bytes(b"new\nline")),
                a.join(OsStr::from_bytes(b"\xff"))
            ))
        ));
        out.push(format!("{:?}", names(&a)));
        out
    });
    // They round-trip through the vault and a remount.
    m.remount();
    let listed = names(&m.p("names")).unwrap();
    assert!(listed.contains(&b"\xff\xfe not utf8".to_vec()));
    assert!(listed.contains(&"a".repeat(255).into_bytes()));
    let full: Vec<u8> = (1u8..=255).filter(|b| *b != b'/').collect();
    assert_eq!(
        std::fs::read(m.p("names").join(std::ffi::OsStr::from_bytes(&full))).unwrap(),
        full
    );
}

#[test]
fn readonly_mount_rejects_every_change() {
    let env_m = mount!("readonly_mount_rejects_every_change(setup)");
    // Prepare content through a writable mount, then mount read-only.
    put(&env_m.p("f"), b"content");
    std::fs::create_dir(env_m.p("d")).unwrap();
    put(&env_m.p("d/inner"), b"inner");
    std::os::unix::fs::symlink("f", env_m.p("l")).unwrap();
    setx(&env_m.p("f"), "user.k", b"v", 0).unwrap();
    let mut m = env_m;
    m.unmount();
    m.args = vec!["--readonly".into()];
    m.mount();
    let p = |s: &str| m.p(s);
    assert_eq!(get(&p("f")), b"content");
    assert_eq!(getx(&p("f"), "user.k", 10).unwrap(), b"v");
    let erofs = Err(libc::EROFS);
    assert_eq!(open(&p("f"), O_WRONLY, 0).map(|_| ()), erofs);
    assert_eq!(open(&p("f"), O_RDWR, 0).map(|_| ()), erofs);
    assert_eq!(open(&p("f"), O_RDONLY | O_TRUNC, 0).map(|_| ()), erofs);
    assert_eq!(
        open(&p("new"), O_CREAT | O_WRONLY, 0o644).map(|_| ()),
        erofs
    );
    assert_eq!(en(std::fs::create_dir(p("nd"))), erofs);
    assert_eq!(en(std::fs::remove_file(p("f"))), erofs);
    assert_eq!(en(std::fs::remove_dir(p("d"))), erofs);
    assert_eq!(en(std::fs::rename(p("f"), p("g"))), erofs);
    assert_eq!(en(std::fs::hard_link(p("f"), p("g"))), erofs);
    assert_eq!(en(std::os::unix::fs::symlink("x", p("s"))), erofs);
    assert_eq!(
        en(std::fs::set_permissions(
            p("f"),
            std::fs::Permissions::from_mode(0o600)
        )),
        erofs
    );
    let c = cs(&p("f"));
    assert_eq!(sc!(libc::chown(c.as_ptr(), 1, 1)).map(|_| ()), erofs);
    assert_eq!(sc!(libc::truncate(c.as_ptr(), 0)).map(|_| ()), erofs);
    assert_eq!(utimens(&p("f"), (1, 0), (1, 0), 0).map(|_| ()), erofs);
    assert_eq!(setx(&p("f"), "user.k", b"w", 0).map(|_| ()), erofs);
    assert_eq!(rmx(&p("f"), "user.k").map(|_| ()), erofs);
    let fifo = cs(&p("fifo"));
    assert_eq!(sc!(libc::mkfifo(fifo.as_ptr(), 0o644)).map(|_| ()), erofs);
    // Read-only fds still work, and mmap for writing fails.
    let fd = open(&p("f"), O_RDONLY, 0).unwrap();
    assert_eq!(fd.read_all().unwrap(), b"content");
    let mp = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            7,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    assert_eq!(mp, libc::MAP_FAILED);
    // Nothing changed in the vault.
    assert_eq!(m.avfs_cat("/f"), b"content");
}

// ------------------------------------------------------------------ consistency with the CLI

#[test]
fn closed_writes_are_visible_to_the_cli() {
    let m = mount!("closed_writes_are_visible_to_the_cli");
    m.avfs(&["checkpoint", "save", "empty"]);
    let fd = open(&m.p("a.txt"), O_CREAT | O_WRONLY, 0o644).unwrap();
    fd.write(b"written through the mount\n").unwrap();
    fd.close().unwrap();
    std::fs::create_dir(m.p("dir")).unwrap();
    put(&m.p("dir/b"), b"bee");
    assert_eq!(m.avfs_cat("/a.txt"), b"written through the mount\n");
    assert_eq!(m.avfs_cat("/dir/b"), b"bee");
    let ls = m.avfs(&["ls", "/"]);
    assert!(ls.contains("a.txt") && ls.contains("dir"), "{ls}");
    let diff = m.avfs_json(&["diff", "empty"]);
    let ch = common::changes(&diff);
    assert!(ch.iter().any(|(_, p)| p == "/a.txt"), "{diff}");
    assert!(ch.iter().any(|(_, p)| p == "/dir/b"), "{diff}");
    // Each small change right after close, many times over.
    for i in 0..30 {
        let f = m.p(&format!("seq{i}"));
        put(&f, format!("v{i}").as_bytes());
        assert_eq!(m.avfs_cat(&format!("/seq{i}")), format!("v{i}").as_bytes());
    }
    // Renames and deletes too.
    std::fs::rename(m.p("a.txt"), m.p("dir/a2")).unwrap();
    std::fs::remove_file(m.p("dir/b")).unwrap();
    let ls = m.avfs(&["ls", "/dir"]);
    assert!(ls.contains("a2") && !ls.contains('b'), "{ls}");
    // stat agrees on size and mode.
    let s = m.avfs_json(&["stat", "/dir/a2"]);
    assert_eq!(s["size"], 26);
}

/// A separate process holding a file open: writes what it is told, answers "ok".
/// (Our own fds would be flushed by every fork+exec of `avfs` closing their copies.)
struct Writer {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

const WRITER: &str = r#"
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
mm = None
for line in sys.stdin:
    cmd, _, arg = line.rstrip("\n").partition(" ")
    if cmd == "w":
        os.write(fd, arg.encode())
    elif cmd == "map":
        os.ftruncate(fd, int(arg))
        mm = mmap.mmap(fd, int(arg), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    elif cmd == "poke":
        off, text = arg.split(" ", 1)
        mm[int(off):int(off) + len(text)] = text.encode()
    elif cmd == "close":
        os.close(fd)
    print("ok", flush=True)
"#;

impl Writer {
    fn new(path: &Path) -> Writer {
        use std::process::{Command, Stdio};
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(WRITER)
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        Writer { child, out }
    }

    fn cmd(&mut self, line: &str) {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut ans = String::new();
        self.out.read_line(&mut ans).unwrap();
        assert_eq!(ans.trim(), "ok", "writer: {line}");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn checkpoint_includes_acknowledged_writes_of_open_files() {
    let m = mount!("checkpoint_includes_acknowledged_writes_of_open_files");
    let at = |cp: &str, path: &str| {
        m.env
            .cmd(["--vault", "t", "cat", path, "--at", cp])
            .output()
            .unwrap()
            .stdout
    };
    let mut w = Writer::new(&m.p("open.txt"));
    w.cmd("w first part;");
    // write() returned, the file is still open in another process: the checkpoint
    // must hold these bytes (they may still sit in the kernel's page cache).
    m.avfs(&["checkpoint", "save", "mid"]);
    assert_eq!(
        String::from_utf8_lossy(&at("mid", "/open.txt")),
        "first part;"
    );
    w.cmd("w second part");
    m.avfs(&["checkpoint", "save", "later"]);
    assert_eq!(
        String::from_utf8_lossy(&at("later", "/open.txt")),
        "first part;second part"
    );
    // diff and cat see them too, while the file stays open.
    w.cmd("w TAIL");
    let d = m.avfs_json(&["diff", "later"]);
    assert!(
        common::changes(&d).iter().any(|(_, p)| p == "/open.txt"),
        "{d}"
    );
    assert!(m.avfs_cat("/open.txt").ends_with(b"TAIL"));
    // A fork taken now starts from those bytes too.
    w.cmd("w +FORK");
    m.avfs(&["vault", "fork", "t", "t-fork"]);
    let out = m
        .env
        .cmd(["--vault", "t-fork", "cat", "/open.txt"])
        .output()
        .unwrap();
    assert!(
        out.stdout.ends_with(b"TAIL+FORK"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    w.cmd("close");
    drop(w);
    // Stores through a shared mapping that is still mapped count as acknowledged too.
    let mut w = Writer::new(&m.p("mapped.bin"));
    w.cmd("map 100000");
    w.cmd("poke 70000 through-the-map");
    m.avfs(&["checkpoint", "save", "mapped"]);
    let got = at("mapped", "/mapped.bin");
    assert_eq!(got.len(), 100_000);
    assert_eq!(&got[70_000..70_015], b"through-the-map");
    drop(w);
    // And with our own big, partly flushed buffer.
    let fd = open(&m.p("big"), O_CREAT | O_RDWR, 0o644).unwrap();
    let big = Rng::new(1).bytes(3_000_000);
    fd.pwrite(&big, 100).unwrap();
    m.avfs(&["checkpoint", "save", "big"]);
    let got = at("big", "/big");
    assert_eq!(got.len(), 3_000_100);
    assert!(got[100..] == big[..]);
    fd.close().unwrap();
}

#[test]
fn restore_while_mounted_shows_restored_files_at_once() {
    let m = mount!("restore_while_mounted_shows_restored_files_at_once");
    put(&m.p("keep"), b"version 1");
    std::fs::create_dir(m.p("dir")).unwrap();
    put(&m.p("dir/old"), b"old");
    m.avfs(&["checkpoint", "save", "v1"]);
    // Change everything; the kernel caches names, attributes and pages of all of it.
    put(&m.p("keep"), b"version two, longer");
    put(&m.p("added"), b"added later");
    std::fs::remove_file(m.p("dir/old")).unwrap();
    put(&m.p("dir/new"), b"new");
    assert_eq!(get(&m.p("keep")), b"version two, longer");
    assert_eq!(names(&m.p("dir")).unwrap(), vec![b"new".to_vec()]);
    let _ = lstat(&m.p("dir/old"));
    // Handles that stay open across the restore.
    let gone = open(&m.p("added"), O_RDWR, 0).unwrap();
    let kept = open(&m.p("keep"), O_RDONLY, 0).unwrap();
    m.avfs(&["checkpoint", "restore", "v1"]);
    // Seen at once, without waiting for any cache timeout.
    assert_eq!(get(&m.p("keep")), b"version 1");
    assert_eq!(file_size(&m.p("keep")), 9);
    assert_eq!(lstat(&m.p("added")).map(|_| ()), Err(libc::ENOENT));
    assert_eq!(names(&m.p("dir")).unwrap(), vec![b"old".to_vec()]);
    assert_eq!(get(&m.p("dir/old")), b"old");
    assert_eq!(lstat(&m.p("dir/new")).map(|_| ()), Err(libc::ENOENT));
    let root = names(&m.mp).unwrap();
    assert!(!root.contains(&b"added".to_vec()), "{root:?}");
    // An fd on a file that no longer exists fails cleanly, never shows other data.
    let clean = |r: &Result<Vec<u8>, i32>| {
        matches!(r, Err(libc::ESTALE) | Err(libc::EBADF) | Err(libc::EIO))
    };
    let r = gone.pread(100, 0);
    assert!(clean(&r), "read of a restored-away file gave {r:?}");
    let r = gone.fstat().map(|s| vec![s.st_size as u8]);
    assert!(clean(&r), "fstat of a restored-away file gave {r:?}");
    let r = gone.pwrite(b"zzz", 0).map(|n| vec![n as u8]);
    assert!(clean(&r), "write to a restored-away file gave {r:?}");
    // Inode numbers are not reused, so the restored "keep" is a new file to the kernel:
    // the old handle fails too rather than mixing versions.
    let r = kept.pread(100, 0);
    assert!(clean(&r) || r == Ok(b"version 1".to_vec()), "{r:?}");
    drop(gone);
    drop(kept);
    assert_eq!(m.avfs_cat("/keep"), b"version 1");
    assert!(m.env.run(&["--vault", "t", "cat", "/added"]).code != 0);
    // New writes after the restore work normally.
    put(&m.p("after"), b"after restore");
    assert_eq!(m.avfs_cat("/after"), b"after restore");
    let v = m.avfs_json(&["vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}

#[test]
fn cli_writes_show_in_the_mount_at_once() {
    let m = mount!("cli_writes_show_in_the_mount_at_once");
    put(&m.p("f"), b"from the mount");
    assert_eq!(get(&m.p("f")), b"from the mount");
    let _ = lstat(&m.p("new"));
    let fd = open(&m.p("f"), O_RDONLY, 0).unwrap();
    assert_eq!(fd.read_all().unwrap(), b"from the mount");
    m.avfs(&["write", "/f", "from the CLI, longer"]);
    m.avfs(&["write", "/new", "brand new"]);
    m.avfs(&["mkdir", "/cli-dir"]);
    assert_eq!(get(&m.p("f")), b"from the CLI, longer");
    assert_eq!(get(&m.p("new")), b"brand new");
    assert!(m.p("cli-dir").is_dir());
    m.avfs(&["rm", "/new"]);
    assert_eq!(lstat(&m.p("new")).map(|_| ()), Err(libc::ENOENT));
    m.avfs(&["mv", "/f", "/cli-dir/f"]);
    assert_eq!(get(&m.p("cli-dir/f")), b"from the CLI, longer");
    assert_eq!(lstat(&m.p("f")).map(|_| ()), Err(libc::ENOENT));
    m.avfs(&["chmod", "600", "/cli-dir/f"]);
    assert_eq!(st(&m.p("cli-dir/f")).unwrap().perm, 0o600);
    drop(fd);
    // A cached directory listing learns about CLI changes.
    std::fs::create_dir(m.p("listed")).unwrap();
    put(&m.p("listed/one"), b"1");
    assert_eq!(names(&m.p("listed")).unwrap(), vec![b"one".to_vec()]);
    assert_eq!(names(&m.p("listed")).unwrap(), vec![b"one".to_vec()]);
    m.avfs(&["write", "/listed/two", "2"]);
    assert_eq!(
        names(&m.p("listed")).unwrap(),
        vec![b"one".to_vec(), b"two".to_vec()]
    );
    m.avfs(&["rm", "/listed/one"]);
    assert_eq!(names(&m.p("listed")).unwrap(), vec![b"two".to_vec()]);
    // A file created in the mount and then rewritten by the CLI (pages cached by create).
    put(&m.p("created"), b"created in mount");
    assert_eq!(get(&m.p("created")), b"created in mount");
    m.avfs(&["write", "/created", "rewritten"]);
    assert_eq!(get(&m.p("created")), b"rewritten");
}

// ------------------------------------------------------------------ differential random ops

/// One random operation, applied identically to the native directory and the mount.
#[derive(Clone, Debug)]
enum Op {
    Open {
        path: String,
        flags: i32,
        mode: u32,
    },
    Close {
        slot: usize,
    },
    Write {
        slot: usize,
        len: usize,
        seed: u64,
    },
    Pwrite {
        slot: usize,
        off: i64,
        len: usize,
        seed: u64,
    },
    Pread {
        slot: usize,
        off: i64,
        len: usize,
    },
    Read {
        slot: usize,
        len: usize,
    },
    Seek {
        slot: usize,
        off: i64,
        whence: i32,
    },
    Ftruncate {
        slot: usize,
        len: i64,
    },
    Truncate {
        path: String,
        len: i64,
    },
    Fsync {
        slot: usize,
        data: bool,
    },
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink {
        path: String,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Rmdir {
        path: String,
    },
    Symlink {
        target: String,
        path: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    Mmap {
        slot: usize,
        page: usize,
        len: usize,
        seed: u64,
        sync: bool,
    },
    Fallocate {
        slot: usize,
        mode: i32,
        off: i64,
        len: i64,
    },
    Stat {
        path: String,
    },
    Fstat {
        slot: usize,
    },
    Readdir {
        path: String,
    },
    Readlink {
        path: String,
    },
}

const NAMES: &[&str] = &["a", "b", "c", "d0", "d1", "e"];

/// Paths that exist in the native tree, refreshed now and then, so most operations hit
/// something: (all entries, directories including the root "").
#[derive(Default)]
struct Known {
    entries: Vec<String>,
    dirs: Vec<String>,
}

thread_local! {
    static KNOWN: std::cell::RefCell<Known> = Default::default();
}

fn refresh_known(root: &Path) {
    let mut k = Known {
        entries: vec![],
        dirs: vec![String::new()],
    };
    for (rel, s, _) in snapshot_meta(root) {
        let rel = String::from_utf8(rel).unwrap();
        if s.fmt == libc::S_IFDIR {
            k.dirs.push(rel.clone());
        }
        k.entries.push(rel);
    }
    KNOWN.with(|c| *c.borrow_mut() = k);
}

/// Mostly an existing entry.
fn old_path(rng: &mut Rng) -> String {
    let p = KNOWN.with(|c| {
        let k = c.borrow();
        (!k.entries.is_empty() && rng.chance(85))
            .then(|| k.entries[rng.below(k.entries.len() as u64) as usize].clone())
    });
    p.unwrap_or_else(|| rand_path(rng))
}

/// Mostly a name in an existing directory.
fn new_path(rng: &mut Rng) -> String {
    let p = KNOWN.with(|c| {
        let k = c.borrow();
        rng.chance(85).then(|| {
            let d = &k.dirs[rng.below(k.dirs.len() as u64) as usize];
            let n = NAMES[rng.below(NAMES.len() as u64) as usize];
            if d.is_empty() {
                n.to_string()
            } else {
                format!("{d}/{n}")
            }
        })
    });
    p.filter(|p| p.matches('/').count() < 4)
        .unwrap_or_else(|| rand_path(rng))
}

fn rand_path(rng: &mut Rng) -> String {
    let pick = rng.below(100);
    let known = KNOWN.with(|c| {
        let k = c.borrow();
        if pick < 55 && !k.entries.is_empty() {
            Some(k.entries[rng.below(k.entries.len() as u64) as usize].clone())
        } else if pick < 85 {
            let d = &k.dirs[rng.below(k.dirs.len() as u64) as usize];
            let n = NAMES[rng.below(NAMES.len() as u64) as usize];
            Some(if d.is_empty() {
                n.to_string()
            } else {
                format!("{d}/{n}")
            })
        } else {
            None
        }
    });
    if let Some(p) = known
        && p.matches('/').count() < 4
    {
        return p;
    }
    let depth = 1 + rng.below(3) as usize;
    let mut comps = Vec::new();
    for i in 0..depth {
        // Inner components are mostly directory-ish names.
        let n = if i + 1 < depth && rng.chance(80) {
            ["d0", "d1"][rng.below(2) as usize]
        } else {
            NAMES[rng.below(NAMES.len() as u64) as usize]
        };
        comps.push(n);
    }
    comps.join("/")
}

fn rand_op(rng: &mut Rng, slots: &[usize]) -> Op {
    let slot = |rng: &mut Rng| slots[rng.below(slots.len() as u64) as usize];
    let small_len = |rng: &mut Rng| -> usize {
        match rng.below(10) {
            0 => rng.below(200_000) as usize,
            1..=3 => rng.below(70_000) as usize,
            _ => rng.below(5_000) as usize,
        }
    };
    let off = |rng: &mut Rng| -> i64 {
        match rng.below(4) {
            0 => rng.below(1 << 20) as i64,
            1 => (65_536 * rng.below(6)) as i64 + rng.below(3) as i64 - 1,
            _ => rng.below(140_000) as i64,
        }
        .max(0)
    };
    let k = rng.below(100);
    if slots.is_empty() || k < 14 {
        let flags = [
            libc::O_CREAT | libc::O_RDWR,
            libc::O_CREAT | libc::O_RDWR,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            libc::O_RDWR | libc::O_TRUNC,
            libc::O_RDONLY,
            libc::O_WRONLY | libc::O_APPEND,
            libc::O_CREAT | libc::O_APPEND | libc::O_RDWR,
            libc::O_RDWR,
        ][rng.below(8) as usize];
        return Op::Open {
            path: rand_path(rng),
            flags,
            mode: [0o644, 0o600, 0o755][rng.below(3) as usize],
        };
    }
    match k {
        14..=21 => Op::Close { slot: slot(rng) },
        22..=33 => Op::Write {
            slot: slot(rng),
            len: small_len(rng),
            seed: rng.next(),
        },
        34..=43 => Op::Pwrite {
            slot: slot(rng),
            off: off(rng),
            len: small_len(rng),
            seed: rng.next(),
        },
        44..=50 => Op::Pread {
            slot: slot(rng),
            off: off(rng),
            len: small_len(rng),
        },
        51..=53 => Op::Read {
            slot: slot(rng),
            len: small_len(rng),
        },
        54..=55 => Op::Seek {
            slot: slot(rng),
            off: off(rng),
            whence: [libc::SEEK_SET, libc::SEEK_CUR, libc::SEEK_END][rng.below(3) as usize],
        },
        56..=58 => Op::Ftruncate {
            slot: slot(rng),
            len: off(rng),
        },
        59..=60 => Op::Truncate {
            path: old_path(rng),
            len: off(rng),
        },
        61..=62 => Op::Fsync {
            slot: slot(rng),
            data: rng.chance(50),
        },
        63..=67 => Op::Rename {
            from: old_path(rng),
            to: if rng.chance(50) {
                new_path(rng)
            } else {
                old_path(rng)
            },
            flags: [0, 0, 0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][rng.below(5) as usize],
        },
        68..=70 => Op::Link {
            from: old_path(rng),
            to: new_path(rng),
        },
        71..=74 => Op::Unlink {
            path: old_path(rng),
        },
        75..=78 => Op::Mkdir {
            path: new_path(rng),
            mode: [0o755, 0o700][rng.below(2) as usize],
        },
        79..=80 => Op::Rmdir {
            path: old_path(rng),
        },
        81..=82 => Op::Symlink {
            target: ["a", "../a", "d0/b", "zz", "d1", "../d0/c"][rng.below(6) as usize].to_string(),
            path: new_path(rng),
        },
        83 => Op::Chmod {
            path: old_path(rng),
            mode: [0o644, 0o600, 0o755, 0o4755, 0o777][rng.below(5) as usize],
        },
        84..=86 => Op::Mmap {
            slot: slot(rng),
            page: rng.below(40) as usize,
            len: 1 + rng.below(10_000) as usize,
            seed: rng.next(),
            sync: rng.chance(50),
        },
        87..=88 => Op::Fallocate {
            slot: slot(rng),
            mode: [
                0,
                libc::FALLOC_FL_KEEP_SIZE,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            ][rng.below(3) as usize],
            off: off(rng),
            len: 1 + rng.below(100_000) as i64,
        },
        89..=92 => Op::Stat {
            path: rand_path(rng),
        },
        93..=95 => Op::Fstat { slot: slot(rng) },
        96..=97 => Op::Readdir {
            path: ["", "d0", "d1", "d0/d1", "d1/d0"][rng.below(5) as usize].to_string(),
        },
        _ => Op::Readlink {
            path: old_path(rng),
        },
    }
}

/// Applies `op` under `root` with this side's fd table; the result as text.
fn apply(
    root: &Path,
    fds: &mut std::collections::BTreeMap<usize, Fd>,
    next_slot: usize,
    op: &Op,
) -> String {
    let p = |s: &str| root.join(s);
    let fd = |fds: &std::collections::BTreeMap<usize, Fd>, s: &usize| fds[s].0;
    let res = |r: Result<i64, i32>| format!("{r:?}");
    match op {
        Op::Open { path, flags, mode } => match open(&p(path), *flags, *mode) {
            Ok(f) => {
                fds.insert(next_slot, f);
                "opened".into()
            }
            Err(e) => format!("Err({e})"),
        },
        Op::Close { slot } => format!("{:?}", fds.remove(slot).unwrap().close()),
        Op::Write { slot, len, seed } => {
            let data = Rng::new(*seed).bytes(*len);
            res(sc!(libc::write(
                fd(fds, slot),
                data.as_ptr().cast(),
                data.len()
            )))
        }
        Op::Pwrite {
            slot,
            off,
            len,
            seed,
        } => {
            let data = Rng::new(*seed).bytes(*len);
            res(sc!(libc::pwrite(
                fd(fds, slot),
                data.as_ptr().cast(),
                data.len(),
                *off
            )))
        }
        Op::Pread { slot, off, len } => {
            let mut buf = vec![0u8; *len];
            match sc!(libc::pread(
                fd(fds, slot),
                buf.as_mut_ptr().cast(),
                *len,
                *off
            )) {
                Ok(n) => format!("{n} {}", blake3::hash(&buf[..n as usize])),
                Err(e) => format!("Err({e})"),
            }
        }
        Op::Read { slot, len } => {
            let mut buf = vec![0u8; *len];
            match sc!(libc::read(fd(fds, slot), buf.as_mut_ptr().cast(), *len)) {
                Ok(n) => format!("{n} {}", blake3::hash(&buf[..n as usize])),
                Err(e) => format!("Err({e})"),
            }
        }
        Op::Seek { slot, off, whence } => {
            // Directory offsets are filesystem-specific cookies.
            if fds[slot]
                .fstat()
                .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
                .unwrap_or(false)
            {
                return "dir".into();
            }
            res(sc!(libc::lseek(fd(fds, slot), *off, *whence)))
        }
        Op::Ftruncate { slot, len } => res(sc!(libc::ftruncate(fd(fds, slot), *len))),
        Op::Truncate { path, len } => {
            let c = cs(&p(path));
            res(sc!(libc::truncate(c.as_ptr(), *len)))
        }
        Op::Fsync { slot, data } => {
            if *data {
                res(sc!(libc::fdatasync(fd(fds, slot))))
            } else {
                res(sc!(libc::fsync(fd(fds, slot))))
            }
        }
        Op::Rename { from, to, flags } => {
            let (a, b) = (cs(&p(from)), cs(&p(to)));
            res(sc!(libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                *flags
            )))
        }
        Op::Link { from, to } => {
            let (a, b) = (cs(&p(from)), cs(&p(to)));
            res(sc!(libc::link(a.as_ptr(), b.as_ptr())))
        }
        Op::Unlink { path } => {
            let c = cs(&p(path));
            res(sc!(libc::unlink(c.as_ptr())))
        }
        Op::Mkdir { path, mode } => {
            let c = cs(&p(path));
            res(sc!(libc::mkdir(c.as_ptr(), *mode)))
        }
        Op::Rmdir { path } => {
            let c = cs(&p(path));
            res(sc!(libc::rmdir(c.as_ptr())))
        }
        Op::Symlink { target, path } => {
            let (t, c) = (
                std::ffi::CString::new(target.as_str()).unwrap(),
                cs(&p(path)),
            );
            res(sc!(libc::symlink(t.as_ptr(), c.as_ptr())))
        }
        Op::Chmod { path, mode } => {
            let c = cs(&p(path));
            res(sc!(libc::chmod(c.as_ptr(), *mode)))
        }
        Op::Mmap {
            slot,
            page,
            len,
            seed,
            sync,
        } => {
            let f = fd(fds, slot);
            let size = match fds[slot].fstat() {
                Ok(s) if s.st_mode & libc::S_IFMT == libc::S_IFDIR => return "dir".into(),
                Ok(s) => s.st_size as usize,
                Err(e) => return format!("fstat Err({e})"),
            };
            let off = page * 4096;
            if off >= size {
                return format!("skip {size}");
            }
            let len = (*len).min(size - off);
            unsafe {
                let m = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    f,
                    off as i64,
                );
                if m == libc::MAP_FAILED {
                    return format!("mmap Err({})", last_errno());
                }
                let data = Rng::new(*seed).bytes(len);
                let old = blake3::hash(std::slice::from_raw_parts(m as *const u8, len));
                std::ptr::copy_nonoverlapping(data.as_ptr(), m as *mut u8, len);
                let r = if *sync {
                    libc::msync(m, len, libc::MS_SYNC)
                } else {
                    0
                };
                libc::munmap(m, len);
                format!("mapped {len} {old} {r}")
            }
        }
        Op::Fallocate {
            slot,
            mode,
            off,
            len,
        } => res(sc!(libc::fallocate(fd(fds, slot), *mode, *off, *len))),
        Op::Stat { path } => format!("{:?}", st(&p(path))),
        Op::Fstat { slot } => format!("{:?}", fds[slot].fstat().map(|s| st_of(&s))),
        Op::Readdir { path } => format!("{:?}", names(&p(path))),
        Op::Readlink { path } => format!("{:?}", en(std::fs::read_link(p(path)))),
    }
}

/// Every entry under `root` with its stat, without reading contents.
fn snapshot_meta(root: &Path) -> Vec<(Vec<u8>, St, ())> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for n in names(&d).unwrap_or_default() {
            let path = d.join(std::ffi::OsStr::from_bytes(&n));
            let Ok(s) = st(&path) else { continue };
            if s.fmt == libc::S_IFDIR {
                stack.push(path.clone());
            }
            out.push((
                path.strip_prefix(root)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
                s,
                (),
            ));
        }
    }
    out
}

/// Every entry under `root`: (path, St, content hash or link target), sorted.
fn snapshot(root: &Path) -> Vec<(Vec<u8>, St, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for n in names(&d).unwrap() {
            let path = d.join(std::ffi::OsStr::from_bytes(&n));
            let s = st(&path).unwrap();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let extra = match s.fmt {
                libc::S_IFDIR => {
                    stack.push(path.clone());
                    String::new()
                }
                libc::S_IFLNK => format!("{:?}", std::fs::read_link(&path).unwrap()),
                libc::S_IFREG => blake3::hash(&std::fs::read(&path).unwrap()).to_string(),
                _ => String::new(),
            };
            out.push((rel, s, extra));
        }
    }
    out.sort();
    out
}

fn compare_trees(m: &Mount, when: &str) {
    let (a, b) = (snapshot(&m.native.join("rnd")), snapshot(&m.p("rnd")));
    if a != b {
        let only_a: Vec<_> = a.iter().filter(|x| !b.contains(x)).collect();
        let only_b: Vec<_> = b.iter().filter(|x| !a.contains(x)).collect();
        panic!("{when}: trees differ\nnative only: {only_a:?}\nmount only: {only_b:?}");
    }
}

#[test]
fn differential_random_operations() {
    let mut m = mount!("differential_random_operations");
    let ops: usize = std::env::var("AVFS_DIFF_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seed: u64 = std::env::var("AVFS_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_240_601);
    let every: usize = 5_000;
    std::fs::create_dir(m.native.join("rnd")).unwrap();
    std::fs::create_dir(m.p("rnd")).unwrap();
    let (na, mo) = (m.native.join("rnd"), m.p("rnd"));
    let mut rng = Rng::new(seed);
    let mut fa = std::collections::BTreeMap::new();
    let mut fb = std::collections::BTreeMap::new();
    let mut next_slot = 0usize;
    let mut history: std::collections::VecDeque<String> = Default::default();
    let t0 = std::time::Instant::now();
    let mut mount_time = std::time::Duration::ZERO;
    let mut stats: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for i in 0..ops {
        if i % 50 == 0 {
            refresh_known(&na);
        }
        let slots: Vec<usize> = fa.keys().copied().collect();
        let mut op = rand_op(&mut rng, &slots);
        // Keep the number of open files bounded.
        if slots.len() >= 12 && matches!(op, Op::Open { .. }) {
            op = Op::Close {
                slot: slots[rng.below(slots.len() as u64) as usize],
            };
        }
        let want = apply(&na, &mut fa, next_slot, &op);
        let tm = std::time::Instant::now();
        let got = apply(&mo, &mut fb, next_slot, &op);
        mount_time += tm.elapsed();
        if matches!(op, Op::Open { .. }) {
            next_slot += 1;
        }
        let kind = format!("{op:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or("")
            .to_string();
        let e = stats.entry(kind).or_insert((0usize, 0usize));
        if want.contains("Err") {
            e.1 += 1;
        } else {
            e.0 += 1;
        }
        history.push_back(format!("#{i} {op:?} -> {want}"));
        if history.len() > 400 {
            history.pop_front();
        }
        if got != want {
            let h: Vec<String> = history.iter().cloned().collect();
            panic!(
                "op #{i} (seed {seed}) {op:?}\n  mount:  {got}\n  native: {want}\nrecent ops:\n{}",
                h.join("\n")
            );
        }
        if (i + 1) % every == 0 {
            compare_trees(&m, &format!("after op #{i} (seed {seed})"));
            for (s, f) in &fa {
                let (x, y) = (
                    f.fstat().map(|s| st_of(&s)),
                    fb[s].fstat().map(|s| st_of(&s)),
                );
                assert_eq!(y, x, "fstat of slot {s} after op #{i}");
            }
            if (i + 1) % (every * 4) == 0 {
                // The vault agrees: a checkpoint in the middle of it all works.
                m.avfs(&["checkpoint", "save"]);
            }
        }
    }
    let total = t0.elapsed();
    eprintln!(
        "differential: {ops} ops in {:.1?} ({:.0} ops/s on the mount side, {:.1?} in mount calls)",
        total,
        ops as f64 / mount_time.as_secs_f64(),
        mount_time
    );
    eprintln!("differential: (succeeded, failed) per operation: {stats:?}");
    for (_, f) in std::mem::take(&mut fa) {
        let _ = f.close();
    }
    for (_, f) in std::mem::take(&mut fb) {
        let _ = f.close();
    }
    compare_trees(&m, "at the end");
    m.remount();
    compare_trees(&m, "after a remount");
    let v = m.avfs_json(&["vault", "verify"]);
    assert!(v["report"]["ok"].as_bool().unwrap_or(false), "{v}");
}
