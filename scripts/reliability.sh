#!/usr/bin/env bash
# Runs the reliability tests and writes the reliability table in docs/reliability.md from
# what they report.
#
#   scripts/reliability.sh                 # CI mode: default rounds (a few minutes; 50
#                                          # kill -9 rounds of the mount server)
#   scripts/reliability.sh --long          # release-check mode: more rounds, longer loops,
#                                          # 100 000 decoder inputs, a short cargo-fuzz run
#   scripts/reliability.sh --rounds 200    # crash rounds per operation and of the mount
#                                          # server (either mode)
#   options: --release (test the release build), --no-docs (do not touch the docs),
#            --fuzz-secs N (seconds per fuzz target in --long, default 60)
#
# Tests: tests/concurrency.rs, tests/crash_cli.rs, tests/hostile_input.rs, shell_heredoc.rs, integrity.rs,
# page_checksums.rs, integrity_scale.rs, limits_cli.rs, exec_cli.rs and mount_crash.rs. Tests print `RELIABILITY|suite|area|what|count|held`
# lines; this script collects them (and every test's pass/fail) into the table between
# the markers in docs/reliability.md. It exits non-zero when a test failed (the table is
# written anyway and shows the failures).
set -uo pipefail
cd "$(dirname "$0")/.."

long=0
rounds=""
release=()
docs=1
fuzz_secs=60
while [ $# -gt 0 ]; do
  case "$1" in
    --long) long=1 ;;
    --rounds) rounds="$2"; shift ;;
    --rounds=*) rounds="${1#*=}" ;;
    --release) release=(--release) ;;
    --no-docs) docs=0 ;;
    --fuzz-secs) fuzz_secs="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
  shift
done

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export AVFS_REQUIRE_FUSE="${AVFS_REQUIRE_FUSE:-1}"
if [ "$long" = 1 ]; then
  mode="long"
  export AVFS_CRASH_ROUNDS="${rounds:-${AVFS_CRASH_ROUNDS:-200}}"
  export AVFS_MOUNT_CRASH_ROUNDS="${rounds:-${AVFS_MOUNT_CRASH_ROUNDS:-200}}"
  export AVFS_CONC_SECS="${AVFS_CONC_SECS:-30}"
  export AVFS_CONC_EXECS="${AVFS_CONC_EXECS:-16}"
  export AVFS_CONC_UNMOUNT_ROUNDS="${AVFS_CONC_UNMOUNT_ROUNDS:-50}"
  export AVFS_FUZZ_ITERS="${AVFS_FUZZ_ITERS:-100000}"
  export AVFS_FSX_OPS="${AVFS_FSX_OPS:-125000}"
  export AVFS_INTEGRITY_ROUNDS="${AVFS_INTEGRITY_ROUNDS:-300}"
  ignored=(--include-ignored)
else
  mode="ci"
  export AVFS_CRASH_ROUNDS="${rounds:-${AVFS_CRASH_ROUNDS:-50}}"
  export AVFS_MOUNT_CRASH_ROUNDS="${rounds:-${AVFS_MOUNT_CRASH_ROUNDS:-50}}"
  ignored=()
fi

out_dir="target/reliability"
mkdir -p "$out_dir"
log="$out_dir/$mode.log"
: > "$log"

suites=(concurrency crash_cli hostile_input shell_heredoc integrity page_checksums integrity_scale limits_cli exec_cli)
[ -f tests/mount_crash.rs ] && suites+=(mount_crash)
[ -f tests/mountfs.rs ] && suites+=(mountfs)
[ -f tests/mount_unlinked.rs ] && suites+=(mount_unlinked)
[ -f tests/content_sizes.rs ] && suites+=(content_sizes)

echo "reliability ($mode mode): ${suites[*]}; AVFS_CRASH_ROUNDS=$AVFS_CRASH_ROUNDS AVFS_MOUNT_CRASH_ROUNDS=$AVFS_MOUNT_CRASH_ROUNDS" | tee -a "$log"
status=0
start=$(date +%s)
cargo build "${release[@]}" --tests --bins -q 2>&1 | tee -a "$log" || status=1
for s in "${suites[@]}"; do
  echo "=== SUITE $s" >> "$log"
  t0=$(date +%s)
  cargo test "${release[@]}" --test "$s" -- --nocapture --test-threads="${AVFS_TEST_THREADS:-2}" "${ignored[@]}" \
    >> "$log" 2>&1
  rc=$?
  echo "=== END $s rc=$rc secs=$(( $(date +%s) - t0 ))" >> "$log"
  [ $rc = 0 ] || status=1
done

# A short fuzz run (long mode), when cargo-fuzz works here (it needs nightly features:
# RUSTC_BOOTSTRAP=1 lets the stable compiler accept them).
if [ "$long" = 1 ] && [ -d fuzz ]; then
  if cargo fuzz --version >/dev/null 2>&1; then
    for t in $(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz list 2>/dev/null); do
      echo "=== FUZZ $t" >> "$log"
      (cd fuzz && RUSTC_BOOTSTRAP=1 timeout $(( fuzz_secs + 600 )) cargo fuzz run -O "$t" -- \
          -max_total_time="$fuzz_secs" -rss_limit_mb=2048 -print_final_stats=1) >> "$log" 2>&1
      rc=$?
      echo "=== END FUZZ $t rc=$rc" >> "$log"
      [ $rc = 0 ] || status=1
    done
  else
    echo "=== FUZZ unavailable (cargo install cargo-fuzz)" >> "$log"
  fi
fi

total=$(( $(date +%s) - start ))
echo "done in ${total}s; log: $log"

if [ "$docs" = 1 ]; then
  python3 - "$log" "$mode" "$total" "docs/reliability.md" <<'PY'
import re, sys, datetime, os
log, mode, total, doc = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
text = open(log, encoding="utf-8", errors="replace").read()
suite = None
rows, tests, panics, suite_secs, fuzz = [], [], {}, {}, {}
cur_fuzz = None
lines = text.splitlines()
for i, line in enumerate(lines):
    m = re.match(r"=== SUITE (\S+)", line)
    if m:
        suite = m.group(1); continue
    m = re.match(r"=== END (\S+) rc=(\d+) secs=(\d+)", line)
    if m:
        suite_secs[m.group(1)] = (int(m.group(2)), int(m.group(3))); suite = None; continue
    m = re.match(r"=== FUZZ (\S+)", line)
    if m:
        cur_fuzz = m.group(1); fuzz[cur_fuzz] = {"runs": None, "crash": None, "rc": None}; continue
    m = re.match(r"=== END FUZZ (\S+) rc=(\d+)", line)
    if m:
        fuzz[m.group(1)]["rc"] = int(m.group(2)); cur_fuzz = None; continue
    if cur_fuzz:
        m = re.match(r"stat::number_of_executed_units:\s*(\d+)", line)
        if m: fuzz[cur_fuzz]["runs"] = int(m.group(1))
        m = re.match(r"#(\d+)\s+DONE", line)
        if m and fuzz[cur_fuzz]["runs"] is None: fuzz[cur_fuzz]["runs"] = int(m.group(1))
        if "Test unit written to" in line or "panicked at" in line:
            fuzz[cur_fuzz]["crash"] = (fuzz[cur_fuzz]["crash"] or "") + line.strip()[:200] + " "
        continue
    m = re.search(r"RELIABILITY\|([^|]*)\|([^|]*)\|([^|]*)\|([^|]*)\|(.*)$", line)
    if m:
        rows.append(m.groups()); continue
    m = re.match(r"test (\S+) \.\.\. (ok|FAILED|ignored)", line)
    if m and suite:
        tests.append((suite, m.group(1), m.group(2))); continue
    m = re.match(r"thread '([^']+)' \(\d+\) panicked at ([^\n]+)", line) or re.match(r"thread '([^']+)' panicked at ([^\n]+)", line)
    if m and suite:
        msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
        panics.setdefault((suite, m.group(1)), (m.group(2).rstrip(":"), msg))
    m = re.match(r"SKIPPED (\S+)", line)
    if m and suite:
        tests.append((suite, m.group(1).rstrip(":"), "skipped"))

def esc(s):
    return s.replace("|", "\\|").replace("\n", " ")

out = []
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
env = {k: os.environ.get(k) for k in ["AVFS_CRASH_ROUNDS", "AVFS_MOUNT_CRASH_ROUNDS", "AVFS_CONC_SECS", "AVFS_CONC_EXECS", "AVFS_FUZZ_ITERS"] if os.environ.get(k)}
out.append(f"Mode **{mode}**, generated {when} by `scripts/reliability.sh{' --long' if mode == 'long' else ''}` in {total} s "
           f"({', '.join(f'{k}={v}' for k, v in env.items())}).")
out.append("")
out.append("| suite | area | what was tried | times | what held |")
out.append("|---|---|---|---:|---|")
for s, area, what, count, held in rows:
    out.append(f"| {esc(s)} | {esc(area)} | {esc(what)} | {esc(count)} | {esc(held)} |")
for name, f in sorted(fuzz.items()):
    held = "no crash" if f["rc"] == 0 and not f["crash"] else f"CRASH: {f['crash'] or 'exit ' + str(f['rc'])}"
    out.append(f"| fuzz | cargo-fuzz | `{name}` (libFuzzer) | {f['runs'] if f['runs'] is not None else '?'} | {esc(held)} |")
out.append("")
failed = [t for t in tests if t[2] == "FAILED"]
passed = [t for t in tests if t[2] == "ok"]
skipped = [t for t in tests if t[2] in ("skipped",)]
out.append(f"Tests: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped "
           + "(" + ", ".join(f"{s}: {'ok' if rc == 0 else 'FAILED'} in {secs} s" for s, (rc, secs) in suite_secs.items()) + ").")
out.append("")
if failed:
    out.append("**Failing — what did not hold:**")
    out.append("")
    out.append("| suite | test | where | message |")
    out.append("|---|---|---|---|")
    for s, t, _ in failed:
        where, msg = panics.get((s, t), ("?", ""))
        out.append(f"| {s} | `{t}` | {esc(where)} | {esc(msg[:300])} |")
    out.append("")
if skipped:
    out.append("Skipped: " + ", ".join(f"`{s}::{t}`" for s, t, _ in skipped) + ".")
    out.append("")
block = "\n".join(out)
begin, end = f"<!-- BEGIN reliability table ({mode}) -->", f"<!-- END reliability table ({mode}) -->"
try:
    doc_text = open(doc, encoding="utf-8").read()
except FileNotFoundError:
    doc_text = "# Reliability\n\n"
new = f"{begin}\n{block}\n{end}"
if begin in doc_text and end in doc_text:
    doc_text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: new, doc_text, flags=re.S)
else:
    doc_text = doc_text.rstrip("\n") + f"\n\n### Latest {mode} run\n\n{new}\n"
open(doc, "w", encoding="utf-8").write(doc_text)
print(f"updated {doc}: {len(rows)} rows, {len(passed)} passed, {len(failed)} failed")
PY
fi
exit $status
