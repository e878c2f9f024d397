#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time and prints a summary.
#
#   bash tests/fuzz/run.sh                  # every target, 60 s each
#   FUZZ_SECONDS=300 bash tests/fuzz/run.sh record_decode checkpoint_parse
#
# Needs the nightly toolchain (`rustup toolchain install nightly`); installs cargo-fuzz when
# missing. Built without a sanitizer (`-s none`): the code under test is safe Rust, and the
# global allocator is mimalloc, whose heap AddressSanitizer does not see anyway; panics,
# overflow checks (debug assertions are on in fuzz builds) and timeouts are what is caught.
# New corpus entries go to tests/fuzz/corpus/TARGET, crashes to tests/fuzz/artifacts/TARGET
# (both ignored by git); tests/fuzz/seeds/TARGET is read as a starting corpus. Exits non-zero
# if any target crashed. Not part of CI (.ci/test).
set -euo pipefail

cd "$(dirname "$0")/../.."
FUZZ_DIR=tests/fuzz
SECONDS_EACH="${FUZZ_SECONDS:-60}"
# A single input taking longer than this counts as a hang.
TIMEOUT_EACH="${FUZZ_TIMEOUT:-10}"
TARGETS=(record_decode record_chain checkpoint_parse admin_bodies v1_requests)
if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cargo +nightly fuzz build --fuzz-dir "$FUZZ_DIR" -s none

LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
failed=0
summary=()
for t in "${TARGETS[@]}"; do
    mkdir -p "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/seeds/$t"
    echo "== $t: ${SECONDS_EACH}s"
    status=ok
    # The first corpus dir receives new inputs; the seeds are only read.
    if ! cargo +nightly fuzz run --fuzz-dir "$FUZZ_DIR" -s none "$t" \
        "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/seeds/$t" -- \
        -max_total_time="$SECONDS_EACH" -timeout="$TIMEOUT_EACH" -rss_limit_mb=4096 \
        -print_final_stats=1 >"$LOGS/$t.log" 2>&1; then
        status=CRASHED
        failed=1
    fi
    # libFuzzer ends a clean run with "Done N runs in S second(s)".
    done_line="$(grep -o 'Done [0-9]* runs in [0-9]* second' "$LOGS/$t.log" | tail -1 || true)"
    runs="$(echo "$done_line" | awk '{print $2}')"
    secs="$(echo "$done_line" | awk '{print $5}')"
    if [ -z "$runs" ]; then
        runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$LOGS/$t.log" | grep -o '[0-9]*$' | tail -1 || true)"
    fi
    corpus="$(find "$FUZZ_DIR/corpus/$t" -type f | wc -l)"
    crashes="$(find "$FUZZ_DIR/artifacts/$t" -type f 2>/dev/null | wc -l)"
    if [ "$status" != ok ]; then
        tail -40 "$LOGS/$t.log"
    fi
    summary+=("$(printf '%-18s %-8s %12s runs %6s s  corpus %6s  artifacts %s' \
        "$t" "$status" "${runs:-?}" "${secs:-?}" "$corpus" "$crashes")")
done

echo
echo "== summary (artifacts: files in $FUZZ_DIR/artifacts/TARGET, from this run or earlier)"
printf '%s\n' "${summary[@]}"
exit "$failed"
