#!/usr/bin/env bash
# Benchmarks avfs side by side with a native directory on the same disk and prints markdown
# tables of medians, ratios and the goals (docs/benchmarks.md explains every workload).
# Three groups, all run by default:
#   vault  vault operations (import, fork, checkpoint save/restore, diff, cat) on workspaces
#          of 1 000, 10 000 and 100 000 files, against cp -a, git, diff -rq, cat;
#   mount  real tools in a FUSE mount of a fresh vault and in a plain directory: tar x of a
#          ~20 000-file source tarball, git init+add+commit, git status, find+stat, ls -lR,
#          rm -rf, 1 GiB sequential write+read, cargo build of this crate (offline);
#   exec   `avfs exec -- true` with and without a live mount and with and without --sandbox
#          (bubblewrap), and the change report of 100 changes in a 100 000-file workspace,
#          against `sh -c true`.
#
#   ./scripts/bench.sh                                   # everything (30-45 minutes on 2 cores)
#   ./scripts/bench.sh --groups vault --sizes 1000,10000 # a quick run of one group
#   ./scripts/bench.sh --groups mount --tar-files 2000 --io-mib 128 --mount-workloads tree,io
#   ./scripts/bench.sh --reps 11 --dir /mnt/x            # more repetitions; everything under /mnt/x
#
#   # FUSE request counts per workload (only debug builds of the mount server count them):
#   cargo build --bin avfs && ./scripts/bench.sh --groups mount --avfs target/debug/avfs
#
# Options are passed to src/bin/avfs-bench/main.rs (see --help). Progress goes to stderr, the
# report to stdout. The mount group needs /dev/fuse; the cargo workload needs the crates of
# Cargo.lock in ~/.cargo/registry (it builds with --offline).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --bin avfs --bin avfs-bench
exec ./target/release/avfs-bench "$@"
