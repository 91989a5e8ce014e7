#!/usr/bin/env python3
# usage: scripts/targeted-flips.py target/release/avfs [ONLY-TARGETS-CONTAINING] [WORK-DIR]
# (docs/integrity.md has the table it gave; needs a Python sqlite3 with the dbstat table)
# Targeted byte flips: one byte ^0xff in a page of each b-tree (table or index) of a
# populated vault, and in the free list; every read and a write on a fresh copy each time.
import os, shutil, sqlite3, subprocess, sys, json
B = sys.argv[1]
W = sys.argv[3] if len(sys.argv) > 3 else '/dev/shm/avfs-targeted-flips'
shutil.rmtree(W, ignore_errors=True); os.makedirs(W)
env = dict(os.environ, AVFS_HOME=W + '/home')
def av(*a, vault=None):
    pre = ['--vault', vault] if vault else []
    r = subprocess.run([B, '--json', *pre, *a], env=env, capture_output=True)
    return r
def ok(*a):
    r = av(*a); assert r.returncode == 0, (a, r.stderr)
for i in range(12):
    ok('write', '-p', f'/src/f{i}.txt', f'line {i}\nsecond line of f{i}\n')
ok('checkpoint', 'save', 'one')
ok('write', '/big.txt', ''.join(f'{i} ' for i in range(20000)))
os.makedirs(W + '/imp/sub'); 
for i in range(50): open(f'{W}/imp/sub/imported-{i:03}.txt', 'w').write(f'imported {i}\n')
ok('import', W + '/imp', '/imp')
ok('rm', '/src/f3.txt')
ok('checkpoint', 'save', 'two', '-m', 'the second checkpoint')
ok('write', '/src/f1.txt', 'changed after two')
ok('mkdir', '/empty')
for i in range(30): ok('write', f'/tmpfile{i}', 'x' * 5000)
for i in range(30): ok('rm', f'/tmpfile{i}')
ok('gc')
vault = W + '/home/vaults/default.avfs'
pristine = open(vault, 'rb').read()
reads = [['ls', '-l', '-a', '/src'], ['ls', '/imp/sub'], ['cat', '/src/f1.txt'], ['cat', '/big.txt'],
         ['cat', '/imp/sub/imported-007.txt'], ['cat', '--at', 'one', '/src/f3.txt'], ['stat', '/src/f2.txt'],
         ['diff', 'one'], ['log', '/src/f1.txt'], ['checkpoint', 'list'], ['audit', 'verify'], ['vault', 'verify']]
def strip(out):
    # durations and timings differ run to run
    try:
        v = json.loads(out)
    except Exception:
        return out
    def clean(x):
        if isinstance(x, dict):
            return {k: clean(w) for k, w in x.items() if k not in ('elapsed_ms', 'duration_ms', 'ms', 'took_ms')}
        if isinstance(x, list):
            return [clean(w) for w in x]
        return x
    return json.dumps(clean(v), sort_keys=True)
want = [strip(av(*r, vault=vault).stdout) for r in reads]
c = sqlite3.connect(vault)
pgsz = c.execute('pragma page_size').fetchone()[0]
pages = c.execute("select name, pageno, pagetype from dbstat where ncell > 0 order by name, pageno").fetchall()
c.close()
by = {}
for name, pg, t in pages:
    by.setdefault(name, []).append((pg, t))
hdr = pristine[:100]
fl_trunk = int.from_bytes(hdr[32:36], 'big'); fl_count = int.from_bytes(hdr[36:40], 'big')
targets = []
for name, pl in by.items():
    leaves = [p for p in pl if p[1] == 'leaf'] or pl
    pg = leaves[len(leaves) // 2][0]
    targets.append((f'{name} (page {pg}, a row: last byte)', (pg - 1) * pgsz + pgsz - 1))
    targets.append((f'{name} (page {pg}, a row: 20 bytes in)', (pg - 1) * pgsz + pgsz - 20))
    targets.append((f'{name} (page {pg}, page header)', (pg - 1) * pgsz + (100 if pg == 1 else 0) + 3))
if fl_trunk:
    targets.append((f'free list trunk page {fl_trunk} (count field)', (fl_trunk - 1) * pgsz + 7))
    leaf = int.from_bytes(pristine[(fl_trunk-1)*pgsz+8:(fl_trunk-1)*pgsz+12], 'big')
    if leaf:
        targets.append((f'free list leaf page {leaf} (body)', (leaf - 1) * pgsz + 500))
print(f'vault {len(pristine)} bytes, page size {pgsz}, free pages {fl_count}', file=sys.stderr)
only = sys.argv[2] if len(sys.argv) > 2 else None
for what, off in targets:
    if only and only not in what: continue
    bad = bytearray(pristine); bad[off] ^= 0xff
    p = W + '/dmg.avfs'
    def fresh():
        for s in ['', '-wal', '-shm']:
            try: os.remove(p + s)
            except FileNotFoundError: pass
        open(p, 'wb').write(bad)
    fresh()
    res = {'same': 0, 'corrupt': 0, 'other_err': 0, 'WRONG': []}
    for r, w in zip(reads, want):
        o = av(*r, vault=p)
        out = o.stdout.decode(errors='replace')
        try: err = json.loads(out).get('error')
        except Exception: err = {'kind': 'nojson'}
        if err and err.get("kind") in ("corrupt_vault", "not_a_vault"): res["corrupt"] += 1; print("   CORRUPT", " ".join(r), file=sys.stderr)
        elif r == ['vault', 'verify'] and o.returncode == 1: res['corrupt'] += 1
        elif r == ['vault', 'verify'] and o.returncode == 0: res['same'] += 1
        elif r == ['audit', 'verify'] and o.returncode == 1: res['corrupt'] += 1
        elif err: res['other_err'] += 1; res.setdefault('kinds', []).append(err.get('kind')); print('   ', ' '.join(r), err, file=sys.stderr)
        elif strip(o.stdout) != w: print('   WRONG', ' '.join(r), out[:300], '\n   WANT', w[:300], file=sys.stderr)
        elif strip(o.stdout) == w: res['same'] += 1
        else: res['WRONG'].append(' '.join(r))
    vv = av('vault', 'verify', vault=p).returncode
    fresh()
    wr = av('write', '/new.txt', 'new', vault=p)
    werr = json.loads(wr.stdout).get('error', {}).get('kind') if wr.stdout else 'nojson'
    print(f"{what}|{res['same']}|{res['corrupt']}|{res['other_err']} {res.get('kinds','')}|{','.join(res['WRONG']) or '-'}|verify exit {vv}|write: {werr or 'ok'}")
