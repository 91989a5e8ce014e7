#!/bin/bash
# The mount with and without the kernel's writeback cache (AVFS_MOUNT_WRITEBACK), beside a
# native directory, all on one tmpfs, interleaved; prints medians per workload. Root, FUSE.
# Usage: scripts/mount-writeback.sh [ROUNDS]   (AVFS_BIN: the avfs to measure)
A=${AVFS_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/avfs}
T=/tmp/wbt; mkdir -p $T; mountpoint -q $T || mount -t tmpfs -o size=4g tmpfs $T
export AVFS_HOME=$T/home; mkdir -p $AVFS_HOME
LIB=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
[ -f $T/src.tar ] || tar cf $T/src.tar -C "$(dirname "$LIB")" "$(basename "$LIB")" 2>/dev/null
[ -d $T/repo ] || git clone -q --bare "$(cd "$(dirname "$0")/.." && pwd)" $T/repo
$A vault create w >/dev/null 2>&1
t() { local s=$(date +%s%N); "$@" >/dev/null 2>&1; local e=$(date +%s%N); echo $(( (e-s)/1000000 )); }
work() { # $1 label, $2 dir
  echo "$1 tar $(t tar xf $T/src.tar -C $2)"
  echo "$1 dd4k $(t dd if=/dev/zero of=$2/big bs=4k count=25600)"
  echo "$1 py8k $(t python3 -c "f=open('$2/lines','w'); [f.write('line %d\n'%i) for i in range(1500000)]; f.close()")"
  echo "$1 gitclone $(t git clone -q $T/repo $2/repo)"
  echo "$1 sqlite $(t python3 -c "
import sqlite3; c=sqlite3.connect('$2/db.sqlite'); c.execute('create table t(a,b)')
for i in range(200):
    c.executemany('insert into t values(?,?)', [(j, 'x'*100) for j in range(500)]); c.commit()
")"
  echo "$1 rm $(t rm -rf $2/$(basename "$LIB") $2/big $2/lines $2/repo $2/db.sqlite)"
}
for i in $(seq ${1:-3}); do
  for wb in 1 0; do
    mkdir -p $T/m; AVFS_MOUNT_WRITEBACK=$wb $A --vault w mount $T/m >/dev/null 2>&1 || { echo mount failed; exit 1; }
    work wb$wb $T/m
    $A unmount $T/m >/dev/null 2>&1
  done
  mkdir -p $T/native; work native $T/native; rm -rf $T/native
done | python3 -c "
import sys,statistics as st
d={}
for l in sys.stdin:
    a,b,v=l.split(); d.setdefault(b,{}).setdefault(a,[]).append(int(v))
for b,m in d.items(): print(b, '  '.join('%s %d ms'%(a,st.median(v)) for a,v in sorted(m.items())))
"
$A vault delete w -y >/dev/null 2>&1; umount $T; uptime
