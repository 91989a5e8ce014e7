#!/usr/bin/env python3
# usage: scripts/page-checksum-cost.py NEW-AVFS OLD-AVFS [WORK-DIR] [ROUNDS]
# The cost of page checksums (docs/integrity.md, "Page checksums"), measured whole-process,
# interleaved: the same commands on a vault with page checksums (made by NEW) and on one
# without (made by OLD, a build from before them), each read by NEW; and, as a third
# column, OLD on its own vault (no checksum shim at all). Medians of wall and CPU time.
import os, resource, shutil, statistics, subprocess, sys, time
NEW, OLD = sys.argv[1], sys.argv[2]
W = sys.argv[3] if len(sys.argv) > 3 else '/dev/shm/avfs-pagesum-cost'
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
shutil.rmtree(W, ignore_errors=True); os.makedirs(W)
def run(b, home, *a, stdin=None):
    env = dict(os.environ, AVFS_HOME=home)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.perf_counter()
    r = subprocess.run([b, '-q', *a], env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, (a, r.stderr)
    return t, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
# Inputs.
many = W + '/many'; os.makedirs(many)
for i in range(100_000): open(f'{many}/e{i:06}', 'w').close()
f64 = W + '/f64'; f1g = W + '/f1g'
with open(f64, 'wb') as f: f.write(os.urandom(64 << 20))
with open(f1g, 'wb') as f:
    for _ in range(16): f.write(os.urandom(64 << 20))
homes = {'checksums': (NEW, W + '/h-new'), 'none': (OLD, W + '/h-old')}
for name, (b, h) in homes.items():
    t, _ = run(b, h, 'import', many, '/many'); print(f'set-up {name}: import of 10^5 entries {t:.1f} s', file=sys.stderr)
    run(b, h, 'write', '/f64', stdin=open(f64, 'rb'))
    run(b, h, 'checkpoint', 'save', 'base')
    hdr = open(h + '/vaults/default.avfs', 'rb').read(100)
    print(f'  {name}: reserved bytes per page {hdr[20]}', file=sys.stderr)
variants = [('with checksums (new avfs)', NEW, homes['checksums'][1]),
            ('without (new avfs, old vault)', NEW, homes['none'][1]),
            ('without (old avfs, old vault)', OLD, homes['none'][1])]
def bench(label, make):
    res = {v[0]: [] for v in variants}
    for i in range(ROUNDS):
        for vname, b, h in variants:
            res[vname].append(make(b, h, i))
    print(f'\n{label}')
    print('| variant | wall median (s) | CPU median (s) | runs |')
    print('|---|---:|---:|---:|')
    for vname, rs in res.items():
        print(f'| {vname} | {statistics.median(r[0] for r in rs):.3f} | {statistics.median(r[1] for r in rs):.3f} | {len(rs)} |')
    sys.stdout.flush()
bench('`ls -l /many` (10^5 entries, a stored tree)', lambda b, h, i: run(b, h, 'ls', '-l', '/many'))
bench('`cat /f64` (64 MiB)', lambda b, h, i: run(b, h, 'cat', '/f64'))
def small(b, h, i):
    run(b, h, 'write', '/small.txt', f'{b} {i}')
    return run(b, h, 'checkpoint', 'save', f'c-{os.path.basename(os.path.dirname(b))}-{i}-{time.time_ns()}')
bench('`checkpoint save` after a 1-file write (a small transaction)', small)
def ingest(b, h, i):
    t = run(b, h, 'write', f'/g{i}', stdin=open(f1g, 'rb'))
    run(b, h, 'rm', f'/g{i}'); run(b, h, 'gc')
    return t
bench('`write` of 1 GiB from stdin (ingest)', ingest)
