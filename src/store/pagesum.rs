//! Page checksums: every page of a vault file ends with an 8-byte checksum of the rest of
//! the page, written with the page and checked each time SQLite reads the page from the
//! file. A flipped byte anywhere in a page (a key, a root hash, a page header) then fails
//! the read as `SQLITE_IOERR_DATA`, which avfs reports as `corrupt_vault`.
//!
//! The on-disk format is that of SQLite's checksum VFS (`ext/misc/cksumvfs.c`): the file's
//! header says 8 reserved bytes per page (byte 20), and those bytes hold two 32-bit
//! running sums over the page's little-endian 32-bit words. A file with any other reserve
//! is read and written unchecked (vaults made before page checksums: `avfs vault
//! upgrade` gives them checksums).
//!
//! Why a shim of our own instead of compiling `cksumvfs.c`: rusqlite's bundled SQLite does
//! not carry it, and the copy a registry carries (SQLite 3.35.4) fails with the SQLite
//! this links (3.54.1), measured: it checks the sum of partial page reads (SQLite reads
//! overflow pages in part since 3.48, so reading a 64 KiB blob failed as "disk I/O
//! error"), and it writes sums into WAL frames after SQLite has checksummed the frame
//! (two committed transactions were lost when the process exited without a checkpoint).
//! Upstream since changed both the way this module does: only the main file is
//! checksummed (WAL frames carry SQLite's own frame checksums, and are checked on
//! recovery), and partial reads are turned off for checksummed files.
//!
//! The shim is registered once per process as SQLite's default VFS, before the first
//! connection opens ([`register`]), on top of the VFS that was the default (`unix`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::Once;

use rusqlite::ffi;

/// Bytes reserved at the end of every page for its checksum.
pub const RESERVE_BYTES: u8 = 8;

/// Offset of the "reserved bytes per page" byte in the database header.
const HEADER_RESERVE_OFFSET: usize = 20;

const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The checksum of `page` without its last 8 bytes: what those 8 bytes must hold.
/// (cksumvfs's `cksmCompute`: Fletcher-style sums over little-endian 32-bit words.)
pub fn page_sum(page: &[u8]) -> [u8; 8] {
    let body = &page[..page.len() - RESERVE_BYTES as usize];
    let (mut s1, mut s2) = (0u32, 0u32);
    for pair in body.chunks_exact(8) {
        let a = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]);
        let b = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
        s1 = s1.wrapping_add(a).wrapping_add(s2);
        s2 = s2.wrapping_add(b).wrapping_add(s1);
    }
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&s1.to_le_bytes());
    out[4..].copy_from_slice(&s2.to_le_bytes());
    out
}

/// Whether `page` (a whole page of a checksummed file) holds its own checksum.
pub fn page_ok(page: &[u8]) -> bool {
    page.len() > RESERVE_BYTES as usize
        && page[page.len() - RESERVE_BYTES as usize..] == page_sum(page)
}

/// Does a database header (the first 100 bytes of the file) say page checksums?
pub fn header_has_checksums(header: &[u8]) -> bool {
    header.len() > HEADER_RESERVE_OFFSET
        && header[..16] == MAGIC[..]
        && header[HEADER_RESERVE_OFFSET] == RESERVE_BYTES
}

/// A whole page: checksums are only computed and checked for reads and writes of whole
/// pages (SQLite's page sizes are powers of two from 512 to 65536).
fn whole_page(amt: c_int) -> bool {
    (512..=65536).contains(&amt) && (amt & (amt - 1)) == 0
}

/// An open main database file: our state, followed in memory by the file of the VFS below.
#[repr(C)]
struct CkFile {
    base: ffi::sqlite3_file,
    /// The header says 8 reserved bytes: sums are written with every page.
    compute: bool,
    /// Sums are checked on read (`PRAGMA checksum_verification=OFF` turns it off, for
    /// forensics on a damaged file).
    verify: bool,
}

/// The file of the VFS below, which SQLite allocated right after ours (`szOsFile`).
unsafe fn below(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: the caller passes a file opened by `ck_open`, whose allocation is
    // `szOsFile` = ours + the lower VFS's.
    unsafe { (f as *mut CkFile).add(1) as *mut ffi::sqlite3_file }
}

unsafe fn methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an open lower file has its methods set, and they live as long as the VFS.
    unsafe { &*(*f).pMethods }
}

fn set_flags(ck: &mut CkFile, header: &[u8]) {
    if header[..16] == MAGIC[..] {
        let on = header[HEADER_RESERVE_OFFSET] == RESERVE_BYTES;
        if on != ck.compute {
            ck.compute = on;
            ck.verify = on;
        }
    }
}

unsafe extern "C" fn ck_close(f: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xClose.unwrap()(sub)
    }
}

unsafe extern "C" fn ck_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    ofs: ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let sub = below(f);
        let rc = methods(sub).xRead.unwrap()(sub, buf, amt, ofs);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let ck = &mut *(f as *mut CkFile);
        if ofs == 0 && amt >= 100 {
            set_flags(ck, std::slice::from_raw_parts(buf as *const u8, 100));
        }
        if ck.verify && whole_page(amt) {
            let page = std::slice::from_raw_parts(buf as *const u8, amt as usize);
            if !page_ok(page) {
                crate::error::note_page_fault(ofs, amt as i64);
                return ffi::SQLITE_IOERR_DATA;
            }
        }
        rc
    }
}

unsafe extern "C" fn ck_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    ofs: ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let ck = &mut *(f as *mut CkFile);
        if ofs == 0 && amt >= 100 {
            set_flags(ck, std::slice::from_raw_parts(buf as *const u8, 100));
        }
        if ck.compute && whole_page(amt) {
            // As cksumvfs does: the sum goes into the page buffer itself, in the reserved
            // bytes SQLite leaves alone (the pager's copy then holds it too).
            let page = std::slice::from_raw_parts_mut(buf as *mut u8, amt as usize);
            let sum = page_sum(page);
            page[amt as usize - RESERVE_BYTES as usize..].copy_from_slice(&sum);
        }
        let sub = below(f);
        methods(sub).xWrite.unwrap()(sub, buf, amt, ofs)
    }
}

unsafe extern "C" fn ck_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xTruncate.unwrap()(sub, size)
    }
}

unsafe extern "C" fn ck_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xSync.unwrap()(sub, flags)
    }
}

unsafe extern "C" fn ck_file_size(
    f: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xFileSize.unwrap()(sub, size)
    }
}

unsafe extern "C" fn ck_lock(f: *mut ffi::sqlite3_file, lock: c_int) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xLock.unwrap()(sub, lock)
    }
}

unsafe extern "C" fn ck_unlock(f: *mut ffi::sqlite3_file, lock: c_int) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xUnlock.unwrap()(sub, lock)
    }
}

unsafe extern "C" fn ck_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xCheckReservedLock.unwrap()(sub, out)
    }
}

/// Answers `PRAGMA checksum_verification[=ON|OFF]` (as cksumvfs does); refuses a page
/// size change on a checksummed file; passes everything else down.
unsafe extern "C" fn ck_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    unsafe {
        let ck = &mut *(f as *mut CkFile);
        if op == ffi::SQLITE_FCNTL_PRAGMA {
            let args = arg as *mut *mut c_char;
            let name = std::ffi::CStr::from_ptr(*args.add(1)).to_bytes();
            let value = *args.add(2);
            if name.eq_ignore_ascii_case(b"checksum_verification") {
                if !value.is_null() {
                    let v = std::ffi::CStr::from_ptr(value)
                        .to_bytes()
                        .to_ascii_lowercase();
                    let on = matches!(v.first(), Some(b'1'..=b'9'))
                        || v.starts_with(b"enable")
                        || v == b"yes"
                        || v == b"on";
                    ck.verify = on && ck.compute;
                }
                let answer: &[u8] = if ck.verify { b"1\0" } else { b"0\0" };
                let out = ffi::sqlite3_malloc(2) as *mut u8;
                if !out.is_null() {
                    std::ptr::copy_nonoverlapping(answer.as_ptr(), out, 2);
                }
                *args = out as *mut c_char;
                return ffi::SQLITE_OK;
            }
            if ck.compute && !value.is_null() && name.eq_ignore_ascii_case(b"page_size") {
                // Handled, as a no-op: the sums are laid out for this page size.
                return ffi::SQLITE_OK;
            }
        }
        let sub = below(f);
        methods(sub).xFileControl.unwrap()(sub, op, arg)
    }
}

unsafe extern "C" fn ck_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xSectorSize.unwrap()(sub)
    }
}

/// Never lets SQLite read part of a page of a checksummed file: a partial read cannot be
/// checked. (SQLite asks before each direct read of an overflow page, so a file without
/// checksums keeps those reads: measured, they halve the CPU time of a 64 MiB `cat`.)
unsafe extern "C" fn ck_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    unsafe {
        let ck = &*(f as *mut CkFile);
        let sub = below(f);
        let caps = methods(sub).xDeviceCharacteristics.unwrap()(sub);
        if ck.compute {
            caps & !ffi::SQLITE_IOCAP_SUBPAGE_READ
        } else {
            caps
        }
    }
}

unsafe extern "C" fn ck_shm_map(
    f: *mut ffi::sqlite3_file,
    pg: c_int,
    pgsz: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xShmMap.unwrap()(sub, pg, pgsz, extend, pp)
    }
}

unsafe extern "C" fn ck_shm_lock(
    f: *mut ffi::sqlite3_file,
    ofs: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xShmLock.unwrap()(sub, ofs, n, flags)
    }
}

unsafe extern "C" fn ck_shm_barrier(f: *mut ffi::sqlite3_file) {
    unsafe {
        let sub = below(f);
        methods(sub).xShmBarrier.unwrap()(sub)
    }
}

unsafe extern "C" fn ck_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    unsafe {
        let sub = below(f);
        methods(sub).xShmUnmap.unwrap()(sub, delete)
    }
}

/// No memory-mapped pages for a checksummed file: a mapped page is not read through
/// `ck_read`, so it would not be checked.
unsafe extern "C" fn ck_fetch(
    f: *mut ffi::sqlite3_file,
    ofs: ffi::sqlite3_int64,
    amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    unsafe {
        let ck = &*(f as *mut CkFile);
        *pp = std::ptr::null_mut();
        if ck.compute {
            return ffi::SQLITE_OK;
        }
        let sub = below(f);
        match methods(sub).xFetch {
            Some(fetch) if methods(sub).iVersion > 2 => fetch(sub, ofs, amt, pp),
            _ => ffi::SQLITE_OK,
        }
    }
}

unsafe extern "C" fn ck_unfetch(
    f: *mut ffi::sqlite3_file,
    ofs: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    unsafe {
        let sub = below(f);
        match methods(sub).xUnfetch {
            Some(unfetch) if methods(sub).iVersion > 2 => unfetch(sub, ofs, p),
            _ => ffi::SQLITE_OK,
        }
    }
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(ck_close),
    xRead: Some(ck_read),
    xWrite: Some(ck_write),
    xTruncate: Some(ck_truncate),
    xSync: Some(ck_sync),
    xFileSize: Some(ck_file_size),
    xLock: Some(ck_lock),
    xUnlock: Some(ck_unlock),
    xCheckReservedLock: Some(ck_check_reserved_lock),
    xFileControl: Some(ck_file_control),
    xSectorSize: Some(ck_sector_size),
    xDeviceCharacteristics: Some(ck_device_characteristics),
    xShmMap: Some(ck_shm_map),
    xShmLock: Some(ck_shm_lock),
    xShmBarrier: Some(ck_shm_barrier),
    xShmUnmap: Some(ck_shm_unmap),
    xFetch: Some(ck_fetch),
    xUnfetch: Some(ck_unfetch),
};

/// Opens a file: a main database file gets our methods in front of the lower VFS's;
/// every other file (WAL, journals, temp files) is the lower VFS's own.
unsafe extern "C" fn ck_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    f: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    unsafe {
        let lower = (*vfs).pAppData as *mut ffi::sqlite3_vfs;
        let open = (*lower).xOpen.unwrap();
        if flags & ffi::SQLITE_OPEN_MAIN_DB == 0 {
            return open(lower, name, f, flags, out_flags);
        }
        std::ptr::write(
            f as *mut CkFile,
            CkFile {
                base: ffi::sqlite3_file {
                    pMethods: &IO_METHODS,
                },
                compute: false,
                verify: false,
            },
        );
        let rc = open(lower, name, below(f), flags, out_flags);
        if rc != ffi::SQLITE_OK {
            (*f).pMethods = std::ptr::null();
        }
        rc
    }
}

static REGISTER: Once = Once::new();

/// Makes the checksum shim SQLite's default VFS. Runs once per process; every connection
/// opened afterwards (vaults, the registry) goes through it. Must run before the first
/// connection to a vault opens: `Store` and the registry call it.
pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: SQLite's documented VFS registration; the VFS struct is leaked, so it
        // lives as long as the process, as SQLite requires. The lower VFS (`unix`)
        // ignores its VFS argument in every method but xOpen, so those are its own.
        unsafe {
            ffi::sqlite3_initialize();
            let lower = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!lower.is_null(), "SQLite has no default VFS");
            let l = &*lower;
            let vfs = Box::new(ffi::sqlite3_vfs {
                iVersion: l.iVersion,
                szOsFile: l.szOsFile + std::mem::size_of::<CkFile>() as c_int,
                mxPathname: l.mxPathname,
                pNext: std::ptr::null_mut(),
                zName: c"avfs-pagesum".as_ptr(),
                pAppData: lower as *mut c_void,
                xOpen: Some(ck_open),
                xDelete: l.xDelete,
                xAccess: l.xAccess,
                xFullPathname: l.xFullPathname,
                xDlOpen: l.xDlOpen,
                xDlError: l.xDlError,
                xDlSym: l.xDlSym,
                xDlClose: l.xDlClose,
                xRandomness: l.xRandomness,
                xSleep: l.xSleep,
                xCurrentTime: l.xCurrentTime,
                xGetLastError: l.xGetLastError,
                xCurrentTimeInt64: l.xCurrentTimeInt64,
                xSetSystemCall: l.xSetSystemCall,
                xGetSystemCall: l.xGetSystemCall,
                xNextSystemCall: l.xNextSystemCall,
            });
            let rc = ffi::sqlite3_vfs_register(Box::leak(vfs), 1);
            assert_eq!(rc, ffi::SQLITE_OK, "registering the page checksum VFS");
        }
    });
}

/// Turns the checking of page checksums on reads on or off for `conn`'s main file (as
/// `PRAGMA checksum_verification`); sums are still written either way.
pub fn verification(conn: &rusqlite::Connection, on: bool) {
    let sql = if on {
        "PRAGMA checksum_verification = ON"
    } else {
        "PRAGMA checksum_verification = OFF"
    };
    let _ = conn.query_row(sql, [], |_| Ok(()));
}

/// Asks SQLite to keep 8 reserved bytes per page in the file `conn` has open as `main`:
/// effective when set before the first page is written, or before a VACUUM (INTO).
pub fn reserve_bytes(conn: &rusqlite::Connection) {
    let mut n: c_int = RESERVE_BYTES as c_int;
    // SAFETY: a valid connection handle, the schema name "main", and an int argument,
    // as SQLITE_FCNTL_RESERVE_BYTES requires. A file whose page size is already fixed
    // answers SQLITE_READONLY but still records the wish for a VACUUM.
    unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_RESERVE_BYTES,
            (&mut n as *mut c_int).cast(),
        );
    }
}

/// What a direct read of a vault file finds about its page checksums (for `vault verify`,
/// which reports every bad page, not only the first one a query reaches).
pub struct FileScan {
    /// The file keeps page checksums (its header says 8 reserved bytes per page).
    pub checksums: bool,
    /// Whole pages read.
    pub pages: u64,
    /// Numbers (from 1) of the pages whose checksum does not match.
    pub bad: Vec<u64>,
}

/// Reads every whole page of the file at `path` and checks its sum; a file without page
/// checksums is only looked at for its header. Pages that a `-wal` holds newer copies of
/// are checked as the file has them (each was whole when it was written there).
pub fn scan_file(path: &std::path::Path) -> std::io::Result<FileScan> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut header = [0u8; 100];
    f.read_exact(&mut header)?;
    let mut scan = FileScan {
        checksums: header_has_checksums(&header),
        pages: 0,
        bad: Vec::new(),
    };
    if !scan.checksums {
        return Ok(scan);
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536usize,
        n => n as usize,
    };
    if !whole_page(page_size as c_int) {
        return Ok(scan);
    }
    let mut f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut page = vec![0u8; page_size];
    loop {
        match f.read_exact(&mut page) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        scan.pages += 1;
        if !page_ok(&page) {
            scan.bad.push(scan.pages);
        }
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_of_a_page_is_what_cksumvfs_writes() {
        // cksumvfs over a zeroed page: both sums stay 0; one word changes both.
        let mut page = vec![0u8; 4096];
        assert_eq!(page_sum(&page), [0; 8]);
        page[0] = 1;
        // s1 = 1, s2 = 0 + 1 after the first pair, then each pair adds s2 to s1 and s1
        // to s2: the sums of a single 1 in word 0 over 511 pairs.
        let (mut s1, mut s2) = (0u32, 0u32);
        for i in 0..511 {
            let a = if i == 0 { 1 } else { 0 };
            s1 = s1.wrapping_add(a).wrapping_add(s2);
            s2 = s2.wrapping_add(s1);
        }
        let mut want = [0u8; 8];
        want[..4].copy_from_slice(&s1.to_le_bytes());
        want[4..].copy_from_slice(&s2.to_le_bytes());
        assert_eq!(page_sum(&page), want);
        let sum = page_sum(&page);
        page[4088..].copy_from_slice(&sum);
        assert!(page_ok(&page));
        page[100] ^= 0xff;
        assert!(!page_ok(&page));
    }
}
