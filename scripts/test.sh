#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what the tests need, then
# runs every test against the real binary, real vault files and real processes.
set -euo pipefail
cd "$(dirname "$0")/.."

export AVFS_REQUIRE_FUSE="${AVFS_REQUIRE_FUSE:-1}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A workspace's kept overlay is held by a keeper process until its home goes or it idles
# (docs/exec.md). pytest keeps its last temporary homes, so their keepers would outlive the
# suite by the default 10 minutes: here they go after 30 s without a run.
export AVFS_KEEP_IDLE_SECS="${AVFS_KEEP_IDLE_SECS:-30}"

need() { command -v "$1" >/dev/null 2>&1; }
missing=()
need git || missing+=(git)
need python3 || missing+=(python3)
# The exec tests run node scripts (the sandbox needs nothing installed: it is the
# kernel's namespaces, Landlock and seccomp).
need node || missing+=(nodejs)
# tests/policy.rs runs attack lines that try to reach a loopback listener with curl.
need curl || missing+=(curl)
# tests/mountfs.rs runs stress-ng's filesystem class on a mount.
need stress-ng || missing+=(stress-ng)
# The Python client and the MCP client tests run in a virtualenv of their own.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "missing tools: ${missing[*]} (install them and re-run)" >&2
    exit 1
  fi
fi

# A virtualenv for the Python package and MCP client tests (pytest, mcp) and for the
# S3-compatible server the remote tests start (moto's S3 backend: scripts/s3-server.py).
venv=target/py-venv
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/python" -c 'import mcp, moto.server' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q pytest 'mcp>=2.3,<3' 'moto[server]>=5.1,<6'
fi
export AVFS_S3_PYTHON="$PWD/$venv/bin/python"

cargo build --release --locked --all-targets
# pjdfstest-rs (a POSIX file system suite, from crates.io), run by tests/mountfs.rs against
# a mount and a native directory.
if [ ! -x target/pjdfstest/bin/pjdfstest ]; then
  cargo install --quiet --locked pjdfstest --version 0.2.2 --root target/pjdfstest
fi
# s3s-fs (an S3 server over a directory, from crates.io): the remote tests' second server,
# beside moto (tests/common/s3.rs).
if [ ! -x target/s3s-fs/bin/s3s-fs ]; then
  cargo install --quiet --locked s3s-fs --version 0.14.1 --features binary --root target/s3s-fs
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --locked --all-targets --no-fail-fast -- --test-threads="${AVFS_TEST_THREADS:-2}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# The Python package (python/) and the MCP server driven by the official MCP Python SDK
# (tests/mcp), both against the binary built above.
"$venv/bin/pip" install -q --force-reinstall --no-deps ./python
AVFS_BIN="$PWD/target/release/avfs" "$venv/bin/pytest" -q -p no:cacheprovider python/tests tests/mcp 2>&1 | tee -a "$log"
py_status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary and the pytest run.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^(=+ )?[0-9]+ (passed|failed).* in [0-9.]+s/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^(failed|errors?)/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
[ "$status" = 0 ] && [ "$py_status" = 0 ]
