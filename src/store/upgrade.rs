//! `vault upgrade`: gives a vault made before page checksums (`pagesum`) its checksums.
//! SQLite sets a file's reserved bytes per page only when it writes the whole file, so the
//! vault is copied whole (`VACUUM INTO`, which keeps every row, setting and the audit
//! log) into a new file beside it, that copy is checked in full, and it replaces the old
//! file by an atomic rename while no avfs process has the file open.

use std::path::Path;

use serde::Serialize;

use super::{Store, creating, pagesum, stamp};
use crate::error::{Error, Result};

#[derive(Debug, Serialize)]
pub struct UpgradeReport {
    /// False when the vault already had page checksums (nothing was done).
    pub upgraded: bool,
    /// Pages of the vault file now, each with its checksum.
    pub pages: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .map_err(|e| Error::host(path.display(), e))?
        .len())
}

/// Writes every page's checksum into the copy (a closed file nobody else knows). SQLite
/// writes pages of a big copy before page 1 when its cache spills, and the shim starts
/// summing only once it has seen page 1 say 8 reserved bytes: those pages get theirs here.
fn seal(path: &Path) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let host = |e| Error::host(path.display(), e);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(host)?;
    let mut header = [0u8; 100];
    f.read_exact(&mut header).map_err(host)?;
    if !pagesum::header_has_checksums(&header) {
        return Err(Error::Internal(
            "the copy was not made with 8 reserved bytes per page".into(),
        ));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536u64,
        n => n as u64,
    };
    let pages = f.metadata().map_err(host)?.len() / page_size;
    let mut page = vec![0u8; page_size as usize];
    for i in 0..pages {
        f.seek(SeekFrom::Start(i * page_size)).map_err(host)?;
        f.read_exact(&mut page).map_err(host)?;
        if !pagesum::page_ok(&page) {
            let sum = pagesum::page_sum(&page);
            f.seek(SeekFrom::Start((i + 1) * page_size - 8))
                .map_err(host)?;
            f.write_all(&sum).map_err(host)?;
        }
    }
    f.sync_all().map_err(host)?;
    Ok(pages)
}

/// Gives the vault file at `path` page checksums (see the module documentation). The
/// file is left as it was on any error; `Busy` when another avfs process has it open or
/// writes it meanwhile.
pub fn add_page_checksums(path: &Path) -> Result<UpgradeReport> {
    let bytes_before = file_len(path)?;
    let mut header = [0u8; 100];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| Error::host(path.display(), e))?;
        f.read_exact(&mut header)
            .map_err(|e| Error::host(path.display(), e))?;
    }
    if pagesum::header_has_checksums(&header) {
        return Ok(UpgradeReport {
            upgraded: false,
            pages: pagesum::scan_file(path)
                .map_err(|e| Error::host(path.display(), e))?
                .pages,
            bytes_before,
            bytes_after: bytes_before,
        });
    }
    let tmp = creating::temp_name(path);
    creating::remove_stale(path);
    let result = copy_and_swap(path, &tmp);
    creating::remove(&tmp);
    let pages = result?;
    Ok(UpgradeReport {
        upgraded: true,
        pages,
        bytes_before,
        bytes_after: file_len(path)?,
    })
}

fn copy_and_swap(path: &Path, tmp: &Path) -> Result<u64> {
    // A writing open: the file is established sound first (its stamp, or a full check),
    // and closing it moves its -wal into it.
    let store = Store::open(path)?;
    pagesum::reserve_bytes(&store.conn);
    let tmp_text = tmp
        .to_str()
        .ok_or_else(|| Error::InvalidName(tmp.display().to_string()))?;
    store
        .conn
        .execute("VACUUM INTO ?1", [tmp_text])
        .map_err(|e| store.corrupt_if_sqlite(e.into()))?;
    drop(store);
    let left = stamp::of(path).map_err(|e| Error::host(path.display(), e))?;
    let pages = seal(tmp)?;
    let report = super::verify::verify_file(tmp)?;
    if !report.ok || !report.page_checksums {
        let first = report
            .problems
            .first()
            .map(|p| format!("{}: {}", p.object, p.message))
            .unwrap_or_else(|| "no page checksums".into());
        return Err(Error::Internal(format!(
            "the checksummed copy does not verify ({first}); the vault was not changed"
        )));
    }
    // Only when no avfs process has the file open, and none wrote it since the copy.
    let _alone = stamp::lock_alone(path)?;
    if stamp::of(path).map_err(|e| Error::host(path.display(), e))? != left {
        return Err(Error::Busy);
    }
    let wal = stamp::sidecar(path, "-wal");
    if std::fs::metadata(&wal)
        .map(|m| m.len() > 0)
        .unwrap_or(false)
    {
        return Err(Error::Busy);
    }
    std::fs::rename(tmp, path).map_err(|e| Error::host(path.display(), e))?;
    // The old file's (empty) -wal and its index belong to the file that is gone.
    let _ = std::fs::remove_file(&wal);
    let _ = std::fs::remove_file(stamp::sidecar(path, "-shm"));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    stamp::record(path);
    Ok(pages)
}
