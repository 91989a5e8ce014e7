#!/usr/bin/env bash
# A tour of vault, fork, checkpoint, diff and exec on the default vault (created on first
# use under $AVFS_HOME, default ~/.avfs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
avfs() { ./target/release/avfs "$@"; }
run() { printf '\n$ avfs %s\n' "$*"; avfs "$@" || true; }

tag="demo-$(date +%s)"
run write -p "/$tag/src/main.rs" 'fn main() { println!("hello"); }'
run checkpoint save "$tag-base" -m "demo starting point"
run vault fork default "$tag-task"
run --vault "$tag-task" exec --shell "sed -i 's/hello/hello, fork/' $tag/src/main.rs && echo notes > $tag/NOTES.md"
run --vault "$tag-task" diff --patch
printf '\n# the source vault is untouched:\n'
run cat "/$tag/src/main.rs"
run --vault "$tag-task" exec -- curl -s https://example.com
run --vault "$tag-task" exec -- cat /etc/passwd
run vault list
run --json --vault "$tag-task" exec --shell "ls $tag && echo more >> $tag/NOTES.md"
