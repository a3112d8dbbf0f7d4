#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang) and runs each for a bounded time.
#   scripts/fuzz.sh smoke        every target FUZZ_SECONDS (default 20) on a temp copy of the
#                                seed corpus; the repository is not written
#   scripts/fuzz.sh long         every target FUZZ_SECONDS (default 600); the grown corpus is
#                                kept in FUZZ_CORPUS (default build-fuzz/corpus/<target>)
#   scripts/fuzz.sh build        only builds them
# FUZZ_TARGETS="stream config" picks targets; FUZZ_JOBS (default 2) run at once.
# Fails on any crash, leak, timeout or sanitizer report; the input that caused it is left
# in build-fuzz/artifacts/ with the fuzzer's log. Prints the executions per target.
# The body is one block, read whole before it runs: editing this file meanwhile is safe.
{
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-smoke}"
BUILD="${FUZZ_BUILD:-build-fuzz}"
JOBS="${FUZZ_JOBS:-2}"
ALL_TARGETS="http_request http_response framing stream chat_request completion anthropic config history_query resp guard signals"
TARGETS="${FUZZ_TARGETS:-$ALL_TARGETS}"
case "$mode" in
  smoke) SECS="${FUZZ_SECONDS:-20}" ;;
  long) SECS="${FUZZ_SECONDS:-600}" ;;
  build) SECS=0 ;;
  *) echo "usage: $0 smoke|long|build" >&2; exit 2 ;;
esac

CXX_BIN="${FUZZ_CXX:-clang++}"
command -v "$CXX_BIN" >/dev/null || { echo "fuzz: $CXX_BIN not found (scripts/setup.sh --test installs clang)" >&2; exit 1; }
cmake -S . -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX_BIN" -DSLUICE_FUZZ=ON >/dev/null
scripts/ccache-stats.sh begin "$BUILD"
cmake --build "$BUILD" -j "$JOBS" --target fuzz_targets
scripts/ccache-stats.sh end "$BUILD"
[ "$mode" = build ] && exit 0

work="$(mktemp -d /tmp/sluice-fuzz.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

artifacts="$BUILD/artifacts"
rm -rf "$artifacts"
mkdir -p "$artifacts"

run_one() {
  local t="$1" corpus
  if [ "$mode" = long ]; then
    corpus="${FUZZ_CORPUS:-$BUILD/corpus}/$t"
  else
    corpus="$work/corpus/$t"
  fi
  mkdir -p "$corpus" "$work/art/$t"
  # Seeds: copied, never written in place.
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  local dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  local rc=0
  # The hard timeout only guards against a fuzzer that does not stop by itself.
  timeout -k 10 $((SECS + 120)) "$BUILD/fuzz/fuzz_$t" "$corpus" "${dict[@]}" \
    -max_total_time="$SECS" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$work/art/$t/" >"$work/$t.log" 2>&1 || rc=$?
  local execs
  execs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/$t.log" | grep -o '[0-9]*$' || echo 0)"
  echo "$t $execs $rc" >>"$work/summary"
  if [ "$rc" -ne 0 ]; then
    mkdir -p "$artifacts/$t"
    cp "$work/art/$t/"* "$artifacts/$t/" 2>/dev/null || true
    cp "$work/$t.log" "$artifacts/$t/fuzz.log"
    echo "fuzz: $t FAILED (exit $rc); log and input in $artifacts/$t/" >&2
    # CI keeps only what is printed: the report, its first frames, and the input.
    grep -m1 -n -E 'Assertion|runtime error|fuzz check failed|ERROR' "$work/$t.log" | cut -d: -f1 |
      while read -r at; do sed -n "${at},$((at + 25))p" "$work/$t.log"; done >&2 || true
    for f in "$work/art/$t/"*; do
      [ -f "$f" ] && echo "fuzz: input $(basename "$f") (base64, first 4 KiB): $(base64 -w0 "$f" | head -c 4096)" >&2
    done
  fi
}

start=$(date +%s)
for t in $TARGETS; do
  [ -x "$BUILD/fuzz/fuzz_$t" ] || { echo "fuzz: no target $t" >&2; exit 2; }
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  run_one "$t" &
  pids+=($!)
done
wait || true
pids=()

echo
printf '%-16s %14s  %s\n' target executions result
failed=0 total=0
while read -r t execs rc; do
  printf '%-16s %14s  %s\n' "$t" "$execs" "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)")"
  total=$((total + execs))
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
done < <(sort "$work/summary")
printf '%-16s %14s\n' total "$total"
echo "fuzz: $mode, ${SECS}s per target, $JOBS at once, $(( $(date +%s) - start ))s"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $failed target(s) failed" >&2
  exit 1
fi
exit 0
}
