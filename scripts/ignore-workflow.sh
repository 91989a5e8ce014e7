#!/bin/bash
# Issue 28's goal on a real project from PyPI, driven through `avfs exec` as an agent
# would: import the sdist, `python3 -m venv .venv`, `.venv/bin/pip install -e . pytest`
# (approved: pip reaches the network), pytest, a fork, pytest in the fork. Prints each
# step's exit, changes and ignored files, then `du -sb` of $AVFS_HOME by subdirectory
# against the project and its ignored files (one `du` counts a hard link once).
# Usage: scripts/ignore-workflow.sh [AVFS] [PYPI-PROJECT] (default more-itertools)
AVFS=$(realpath "${1:-target/release/avfs}")
PROJECT=${2:-more-itertools}
AVFS_HOME=$(mktemp -d /tmp/avfs-ignore-flow.XXXXXX)
export AVFS_HOME
DL=$(mktemp -d /tmp/avfs-ignore-sdist.XXXXXX)
trap 'rm -rf "$AVFS_HOME" "$DL"' EXIT
(cd "$DL" && pip download -q --no-binary :all: --no-deps "$PROJECT" && tar xzf ./*.tar.gz && rm ./*.tar.gz)
SRC=$(echo "$DL"/*)
cat > "$AVFS_HOME/policy.toml" <<'P'
[[rule]]
name = "py"
program = "python3"
category = "mutating"
decision = "allow_with_checkpoint"
[[rule]]
name = "pip"
program = "pip"
category = "networked"
decision = "allow_with_checkpoint"
network = true
P
"$AVFS" vault create proj >/dev/null
"$AVFS" --vault proj import "$SRC" / >/dev/null
LAST="$AVFS_HOME/../$(basename "$AVFS_HOME").last.json"
trap 'rm -rf "$AVFS_HOME" "$DL" "$LAST"' EXIT
# One exec; a pending approval is approved (as the person would) and the run made again.
step() {
  "$AVFS" --json --vault "$1" exec -- "${@:2}" > "$LAST"
  local ap
  ap=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1])).get("approval") or {}; print(a.get("id","") if a.get("state")=="pending" else "")' "$LAST")
  if [ -n "$ap" ]; then
    "$AVFS" approve "$ap" >/dev/null
    "$AVFS" --json --vault "$1" exec --approve "$ap" -- "${@:2}" > "$LAST"
  fi
  python3 - "$LAST" "$1: ${*:2}" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
r = v.get("result") or {}
print(f"{sys.argv[2][:60]:60s} exit={v.get('exit_code')} changes={len(v.get('changes') or [])} "
      f"ignored={v['change_summary']['ignored']} {r.get('duration_ms')} ms")
if v.get("exit_code"):
    print(r.get("stderr", "")[-800:])
PY
}
step proj python3 -m venv .venv
step proj .venv/bin/pip install -q -e . pytest
step proj .venv/bin/pytest -q -p no:cacheprovider tests
"$AVFS" vault fork proj f1 >/dev/null
step f1 .venv/bin/pytest -q -p no:cacheprovider tests
IGN=$("$AVFS" --json --vault proj status | python3 -c 'import json,sys; print(json.load(sys.stdin)["ignored"]["path"])')
echo "project: $(du -sb "$SRC" | cut -f1) B; its ignored files: $(du -sb "$IGN" | cut -f1) B (.venv $(du -sb "$IGN/.venv" | cut -f1) B)"
echo "\$AVFS_HOME: $(du -sb "$AVFS_HOME" | cut -f1) B"
du -sb "$AVFS_HOME"/*
# Separately: one du counts a directory once, so ignored/* would not show in the call above.
du -sb "$AVFS_HOME"/ignored/*
