#!/usr/bin/env bash
# Does the compiler cache carry over from one checkout to another? Clones REV (default HEAD)
# into two folders of different names and depths, builds the first with an empty temporary
# cache, then the second with what the first left, and prints the second build's ccache
# figures (docs/building.md). The shared cache (~/.cache/ccache) is not touched.
#
#   scripts/cache-clones.sh            JOBS=2 (default nproc), REV=<commit>, KEEP=1 keeps the
#                                      clones and the cache in the printed folder
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rev="$(git -C "$root" rev-parse "${REV:-HEAD}")"
jobs="${JOBS:-$(nproc)}"
command -v ccache >/dev/null || { echo "cache-clones: ccache not installed" >&2; exit 1; }
work="$(mktemp -d /tmp/sluice-clones.XXXXXX)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
export CCACHE_DIR="$work/ccache"   # its own cache: also no ccache.conf of the user's
a="$work/a"
b="$work/other/place/b"
for d in "$a" "$b"; do
  git clone -q --no-checkout "$root" "$d"
  git -C "$d" checkout -q "$rev"
done

build() {  # the plain build, as `make build` does it
  local start=$SECONDS
  (cd "$1" && cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build build -j "$jobs" >/dev/null)
  echo "$((SECONDS - start))"
}
# hits, misses, uncacheable calls of the statistics since the last zeroing
counts() {
  ccache --print-stats | awk '
    /^(direct_cache_hit|preprocessed_cache_hit)\t/ { hit += $2 }
    /^cache_miss\t/ { miss += $2 }
    /^(could_not_use_precompiled_header|could_not_use_modules|preprocessor_error|unsupported_code_directive|compiler_produced_no_output|compile_failed|bad_compiler_arguments|unsupported_compiler_option|unsupported_source_language|multiple_source_files|output_to_stdout|no_input_file|called_for_link|called_for_preprocessing|autoconf_test|could_not_find_compiler|compiler_check_failed|internal_error|missing_cache_file|recache)\t/ && $2 > 0 { other = other " " $1 "=" $2 }
    END { printf "%d hits, %d misses%s", hit, miss, other }'
}

echo "cache-clones: commit $rev, JOBS=$jobs, cache $CCACHE_DIR"
ccache -z >/dev/null
t=$(build "$a")
echo "first clone  ($a): $(counts), ${t} s"
ccache -z >/dev/null
t=$(build "$b")
echo "second clone ($b): $(counts), ${t} s"
ccache -s
if [ "${KEEP:-0}" = 1 ]; then echo "cache-clones: kept $work"; fi
