#!/usr/bin/env python3
"""SQLite's own cost of what an ingest stores (docs/benchmarks.md, "Big-file ingest").

  sqlite-floor.py big MIB PAGE_SIZE JOURNAL_MODE   # MIB of 64 KiB chunks in one transaction
  sqlite-floor.py small PAGE_SIZE TRANSACTIONS     # small transactions on a 200 000-row table

Tables shaped like the vault's (`chunk (id, hash UNIQUE, data)`); the database goes in
$FLOOR_DIR (default /dev/shm). Prints wall and CPU (user + sys) time of each phase.
"""
import os
import resource
import sqlite3
import sys
import time


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fresh(page_size, journal):
    path = os.path.join(os.environ.get("FLOOR_DIR", "/dev/shm"), "sqlite-floor.db")
    for s in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + s)
        except FileNotFoundError:
            pass
    db = sqlite3.connect(path, isolation_level=None)
    # First of all: set after auto_vacuum (or anything else), it is ignored.
    db.execute(f"pragma page_size={page_size}")
    db.execute(f"pragma journal_mode={journal}")
    db.execute("pragma synchronous=NORMAL")
    db.execute("pragma cache_size=-32768")
    return db, path


def big(mib, page_size, journal):
    db, path = fresh(page_size, journal)
    db.execute("CREATE TABLE chunk (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, data BLOB NOT NULL)")
    data = bytearray(os.urandom(1 << 20))
    chunk = 65536
    t0, c0 = time.perf_counter(), cpu()
    db.execute("BEGIN")
    for i in range(mib * (1 << 20) // chunk):
        o = (i * chunk) % (1 << 20)
        data[o:o + 8] = i.to_bytes(8, "little")
        db.execute("INSERT OR IGNORE INTO chunk (hash, data) VALUES (?, ?)",
                    (os.urandom(32), bytes(data[o:o + chunk])))
    t1, c1 = time.perf_counter(), cpu()
    db.execute("COMMIT")  # in WAL mode this runs the automatic checkpoint too
    t2, c2 = time.perf_counter(), cpu()
    if journal == "wal":
        db.execute("pragma wal_checkpoint(TRUNCATE)")
    t3, c3 = time.perf_counter(), cpu()
    print(f"{mib} MiB page_size={page_size} {journal}: inserts {t1 - t0:.2f} s (cpu {c1 - c0:.2f}), "
          f"commit {t2 - t1:.2f} s (cpu {c2 - c1:.2f}), checkpoint {t3 - t2:.2f} s (cpu {c3 - c2:.2f}), "
          f"total {t3 - t0:.2f} s, cpu {c3 - c0:.2f} s")
    db.close()
    os.unlink(path)


def small(page_size, ntx):
    db, path = fresh(page_size, "wal")
    db.execute("pragma journal_size_limit=1048576")
    db.execute("CREATE TABLE tree (id INTEGER PRIMARY KEY, hash BLOB UNIQUE, data BLOB)")
    db.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, ws TEXT, detail TEXT)")
    db.execute("CREATE TABLE ws (name TEXT PRIMARY KEY, root BLOB)")
    db.execute("BEGIN")
    for _ in range(200000):
        db.execute("INSERT INTO tree (hash, data) VALUES (?, ?)", (os.urandom(32), os.urandom(200)))
    db.execute("INSERT INTO ws VALUES ('main', x'00')")
    db.execute("COMMIT")
    db.execute("pragma wal_checkpoint(TRUNCATE)")
    t0, c0 = time.perf_counter(), cpu()
    for _ in range(ntx):
        db.execute("BEGIN IMMEDIATE")
        for _ in range(5):
            db.execute("INSERT OR IGNORE INTO tree (hash, data) VALUES (?, ?)", (os.urandom(32), os.urandom(300)))
        db.execute("UPDATE ws SET root = ? WHERE name = 'main'", (os.urandom(32),))
        db.execute("INSERT INTO audit (ws, detail) VALUES (?, ?)", ("main", "x" * 1500))
        db.execute("COMMIT")
    t1, c1 = time.perf_counter(), cpu()
    print(f"page_size={page_size}: {ntx} small transactions, {1e3 * (t1 - t0) / ntx:.3f} ms each "
          f"(cpu {1e3 * (c1 - c0) / ntx:.3f} ms)")
    db.close()
    os.unlink(path)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "big":
        big(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "small":
        small(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(__doc__)
