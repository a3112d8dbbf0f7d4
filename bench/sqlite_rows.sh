#!/usr/bin/env bash
# What SQLite itself spends per history row (docs/benchmarks.md, "Records"): builds
# bench/sqlite_rows.cpp against the system's libsqlite3 in a temp dir and runs it under
# callgrind for each variant of the table. Instruction counts, not times: the machine is
# shared and noisy, and these do not move from run to run. Needs g++ and libsqlite3-dev
# (scripts/setup.sh installs them) and valgrind (apt-get install valgrind).
#
#   bench/sqlite_rows.sh      prints: variant, instructions per row (setup included,
#                             spread over 19,200 rows)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
for tool in g++ valgrind; do
  command -v "$tool" >/dev/null || { echo "sqlite_rows.sh: $tool is missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++20 -o "$tmp/sqlite_rows" "$root/bench/sqlite_rows.cpp" -lsqlite3

run() {  # run LABEL INDEXES ROWS_PER_STATEMENT COLUMNS OMIT_NULL
  local label=$1
  shift
  local rows
  rows=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$tmp/sqlite_rows" "$tmp/t.db" "$@" \
    2>"$tmp/vg.err") || { cat "$tmp/vg.err" >&2; exit 1; }
  local total
  total=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/vg.err")
  printf '%-58s %8d\n' "$label" $((total / rows))
}

printf '%-58s %8s\n' "variant (all: 32 rows per INSERT, transactions of 192)" "instr/row"
run "schema: 33 columns, indexes on unix_ms and (key_name, unix_ms)" 3 32 33 0
run "no index" 0 32 33 0
run "index on unix_ms only" 1 32 33 0
run "index on (key_name, unix_ms) only" 2 32 33 0
run "columns never set left out of the INSERT" 3 32 33 1
run "a table of the first 12 columns, both indexes" 3 32 12 0
run "one row per INSERT" 3 1 33 0
