#!/usr/bin/env bash
# What SQLite itself spends per history row (docs/benchmarks.md, "Records"): builds
# bench/sqlite_rows.cpp against the system's libsqlite3 in a temp dir and runs it for each
# variant of the table, once under callgrind (instructions) and once under strace (the
# write system calls and the bytes they write: the kernel's share, which callgrind does
# not see). Counts, not times: the machine is shared and noisy, and these do not move
# from run to run. Needs g++ and libsqlite3-dev (scripts/setup.sh installs them),
# valgrind and strace (apt-get install valgrind strace).
#
#   bench/sqlite_rows.sh      prints per variant: instructions, pwrite calls and bytes
#                             written per row (setup included, spread over 38,400 rows)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
for tool in g++ valgrind strace; do
  command -v "$tool" >/dev/null || { echo "sqlite_rows.sh: $tool is missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++20 -o "$tmp/sqlite_rows" "$root/bench/sqlite_rows.cpp" -lsqlite3

run() {  # run LABEL INDEXES ROWS_PER_STATEMENT COLUMNS OMIT_NULL ROWS_PER_TX
  local label=$1
  shift
  local rows total writes bytes
  rows=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$tmp/sqlite_rows" "$tmp/t.db" "$@" \
    2>"$tmp/vg.err") || { cat "$tmp/vg.err" >&2; exit 1; }
  total=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/vg.err")
  strace -e trace=pwrite64 -o "$tmp/st.out" "$tmp/sqlite_rows" "$tmp/t.db" "$@" >/dev/null
  read -r writes bytes < <(awk -F'= ' '/^pwrite64/ { n++; b += $NF } END { print n + 0, b + 0 }' "$tmp/st.out")
  awk -v l="$label" -v t="$total" -v w="$writes" -v b="$bytes" -v r="$rows" \
    'BEGIN { printf "%-62s %9d %8.3f %8d\n", l, t / r, w / r, b / r }'
}

printf '%-62s %9s %8s %8s\n' "variant (all: 32 rows per INSERT)" "instr/row" "pwrite/row" "bytes/row"
run "schema: 33 columns, both indexes, transactions of 192 rows" 3 32 33 0 192
run "  no index" 0 32 33 0 192
run "  index on unix_ms only" 1 32 33 0 192
run "  index on (key_name, unix_ms) only" 2 32 33 0 192
run "  columns never set left out of the INSERT (the writer)" 3 32 33 1 192
run "  a table of the first 12 columns" 3 32 12 0 192
run "  one row per INSERT" 3 1 33 0 192
run "the writer, transactions of 960 rows" 3 32 33 1 960
run "the writer, transactions of 960 rows, no unix_ms index" 2 32 33 1 960
