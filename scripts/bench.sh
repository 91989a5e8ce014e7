#!/usr/bin/env bash
# Benchmarks vault operations (import, fork, checkpoint save/restore, diff, cat) on
# workspaces of 1 000, 10 000 and 100 000 files, side by side with a native directory on
# the same disk, and prints a markdown table of medians, ratios and the goals.
#
#   ./scripts/bench.sh                         # all sizes (about 5-10 minutes on 2 cores)
#   ./scripts/bench.sh --sizes 1000,10000      # a quick run
#   ./scripts/bench.sh --reps 11 --dir /mnt/x  # more repetitions; trees and vaults under /mnt/x
#
# Options are passed to src/bin/avfs-bench.rs (see --help). Progress goes to stderr, the
# report to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --bin avfs --bin avfs-bench
exec ./target/release/avfs-bench "$@"
