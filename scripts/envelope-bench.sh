#!/bin/sh
# Issue 16's bounds, measured: the envelope of `avfs exec -- python3 -m venv .venv` (by
# default and with --changes full) and the audit log's growth per exec over N such
# execs (default 20), in a fresh $AVFS_HOME. Usage: scripts/envelope-bench.sh [AVFS] [N]
set -eu
AVFS=${1:-target/release/avfs}
N=${2:-20}
AVFS_HOME=$(mktemp -d /tmp/avfs-envelope-bench.XXXXXX)
export AVFS_HOME
"$AVFS" vault create venv >/dev/null
VAULT=$AVFS_HOME/vaults/venv.avfs
audit_bytes() {
  python3 -c 'import sqlite3,sys; c=sqlite3.connect("file:"+sys.argv[1]+"?mode=ro",uri=True); print(c.execute("select sum(pgsize) from dbstat where name=\"audit\"").fetchone()[0], c.execute("select coalesce(sum(length(detail)),0) from audit").fetchone()[0])' "$VAULT"
}
size=$("$AVFS" --json --vault venv exec -- python3 -m venv .venv | wc -c)
echo "envelope, default:         $size bytes"
size=$("$AVFS" --json --vault venv exec --changes full -- python3 -m venv .venv-full | wc -c)
echo "envelope, --changes full:  $size bytes"
set -- $(audit_bytes); pages0=$1; detail0=$2; vault0=$(stat -c %s "$VAULT")
i=0
while [ $i -lt "$N" ]; do
  "$AVFS" --json --vault venv exec -- python3 -m venv ".venv$i" >/dev/null
  i=$((i + 1))
done
set -- $(audit_bytes); pages1=$1; detail1=$2; vault1=$(stat -c %s "$VAULT")
echo "audit table pages: $pages0 -> $pages1 bytes, $(( (pages1 - pages0) / N )) per exec"
echo "audit details:     $detail0 -> $detail1 bytes, $(( (detail1 - detail0) / N )) per exec"
echo "vault file:        $vault0 -> $vault1 bytes (contents and trees of $N virtualenvs too)"
rm -rf "$AVFS_HOME"
