#!/bin/sh
# Issue 28's venv workflow with ignore rules, measured in a fresh $AVFS_HOME: a small
# package (setup.py + one module) with `.venv/` ignored; `python3 -m venv .venv`, then
# `pip install -e .` (offline, setuptools from the venv), then a fork that runs the venv.
# Prints the envelope and `diff` sizes, and $AVFS_HOME against the project and its ignored
# files (`du`, which counts a hard-linked file once), before and after the fork; then
# `exec -- true` in that workspace with and without the kept overlay (medians of N runs,
# interleaved). Usage: scripts/ignore-bench.sh [AVFS] [N]
set -eu
AVFS=${1:-target/release/avfs}
N=${2:-15}
AVFS_HOME=$(mktemp -d /tmp/avfs-ignore-bench.XXXXXX)
export AVFS_HOME
SRC=$(mktemp -d /tmp/avfs-ignore-src.XXXXXX)
trap 'rm -rf "$AVFS_HOME" "$SRC"' EXIT
mkdir -p "$SRC/pkg" "$AVFS_HOME/policies"
printf 'def hello():\n    return "hi"\n' > "$SRC/pkg/__init__.py"
printf 'from setuptools import setup\nsetup(name="pkg", version="0.1", packages=["pkg"])\n' > "$SRC/setup.py"
printf '.venv/\n*.egg-info/\n__pycache__/\nbuild/\n' > "$SRC/.gitignore"
"$AVFS" vault create p >/dev/null
# pip install is `networked` for the policy: this vault allows it (nothing is fetched).
for v in p f; do
  printf '[defaults]\nread_only = "allow"\nmutating = "allow"\ndestructive = "allow"\nnetworked = "allow"\nhost_escape_risk = "allow"\nunknown = "allow"\n' > "$AVFS_HOME/policies/$v.toml"
done
"$AVFS" --vault p import "$SRC" / >/dev/null
kib() { du -sk "$@" | awk '{s += $1} END {print s}'; }
size=$("$AVFS" --json --vault p exec -- python3 -m venv .venv | wc -c)
echo "envelope of python3 -m venv .venv: $size bytes"
echo "avfs diff --json after it:          $("$AVFS" --json --vault p diff | wc -c) bytes"
size=$("$AVFS" --json --vault p exec -- .venv/bin/pip install -q --no-index --no-build-isolation --no-use-pep517 -e . | wc -c)
echo "envelope of pip install -e .:       $size bytes"
echo "avfs diff --json after it:          $("$AVFS" --json --vault p diff | wc -c) bytes"
"$AVFS" --vault p exec -- .venv/bin/python -c 'import pkg; print("import pkg:", pkg.hello())' | tail -1
ign=$("$AVFS" --json --vault p status | python3 -c 'import json,sys; print(json.load(sys.stdin)["ignored"]["path"])')
echo "project (host copy): $(kib "$SRC") KiB; ignored files: $(kib "$ign") KiB"
echo "AVFS_HOME: $(kib "$AVFS_HOME") KiB (vaults $(kib "$AVFS_HOME/vaults") KiB, ignored $(kib "$AVFS_HOME/ignored") KiB)"
"$AVFS" vault fork p f >/dev/null
"$AVFS" --vault f exec -- .venv/bin/python -c 'import pkg; print("fork, import pkg:", pkg.hello())' | tail -1
echo "AVFS_HOME after the fork ran: $(kib "$AVFS_HOME") KiB (ignored $(kib "$AVFS_HOME/ignored") KiB)"
# The mount shows the venv (read-only): its python runs from there.
MNT=$(mktemp -d /tmp/avfs-ignore-mnt.XXXXXX)
"$AVFS" mount p "$MNT" >/dev/null
echo "through avfs mount: $(find "$MNT/.venv" | wc -l) venv entries; $("$MNT/.venv/bin/python" -c 'import sys; print("sys.prefix", sys.prefix)')"
"$AVFS" unmount "$MNT" >/dev/null; rmdir "$MNT"
# exec -- true, kept overlay against a fresh overlay per run, interleaved.
: > "$AVFS_HOME/kept.ms"; : > "$AVFS_HOME/fresh.ms"
wall() { t0=$(date +%s%N); "$@" >/dev/null; echo $(( ($(date +%s%N) - t0) / 1000000 )); }
i=0
while [ $i -lt "$N" ]; do
  wall "$AVFS" --json --vault p exec -- true >> "$AVFS_HOME/kept.ms"
  wall env AVFS_KEEP_OVERLAY=0 "$AVFS" --json --vault p exec -- true >> "$AVFS_HOME/fresh.ms"
  i=$((i + 1))
done
med() { sort -n "$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo "exec -- true with the .venv: kept overlay $(med "$AVFS_HOME/kept.ms") ms, fresh overlay $(med "$AVFS_HOME/fresh.ms") ms (wall time of the avfs process, medians of $N, interleaved)"
