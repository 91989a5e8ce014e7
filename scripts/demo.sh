#!/usr/bin/env bash
# The main job, for now: a short tour of vault, fork, checkpoint and diff on the default
# vault (created on first use under $AVFS_HOME, default ~/.avfs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
avfs() { ./target/release/avfs "$@"; }
run() { printf '\n$ avfs %s\n' "$*"; avfs "$@"; }

tag="demo-$(date +%s)"
run write -p "/$tag/src/main.rs" 'fn main() { println!("hello"); }'
run write "/$tag/README.md" "# $tag"
run checkpoint save "$tag-base" -m "demo starting point"
run vault fork default "$tag-task"
run --vault "$tag-task" write "/$tag/src/main.rs" 'fn main() { println!("hello, fork"); }'
run --vault "$tag-task" rm "/$tag/README.md"
run --vault "$tag-task" diff --patch
printf '\n# the source vault is untouched:\n'
run cat "/$tag/src/main.rs"
run --vault "$tag-task" checkpoint save
run checkpoint list
run vault list
run --json --vault "$tag-task" diff
