#!/usr/bin/env bash
# What the compiler cache did during one build (docs/building.md), without zeroing the
# cache's statistics: `begin DIR` saves them in DIR, `end DIR [LABEL]` prints the difference
# (LABEL defaults to DIR), e.g.
#   ccache build: 87 of 88 compilations from the cache (98.9%): 85 direct, 2 preprocessed; 1 missed
# Compilations of other builds sharing the cache at the same time are counted too.
# Silent when ccache is not installed (the build then runs the compiler directly).
set -euo pipefail
command -v ccache >/dev/null || exit 0
what="$1" dir="$2" label="${3:-$2}"
mkdir -p "$dir"
snap="$dir/.ccache-stats-begin"
case "$what" in
  begin) ccache --print-stats >"$snap" ;;
  end)
    [ -f "$snap" ] || exit 0
    ccache --print-stats | awk -v dir="$label" '
      NR == FNR { before[$1] = $2; next }
      { d[$1] = $2 - before[$1] }
      END {
        hit = d["direct_cache_hit"] + d["preprocessed_cache_hit"]
        miss = d["cache_miss"]
        other = ""
        for (k in d) {
          if (d[k] > 0 && k ~ /^(could_not_use_precompiled_header|could_not_use_modules|preprocessor_error|unsupported_code_directive|unsupported_compiler_option|unsupported_source_language|compiler_produced_no_output|compiler_produced_empty_output|compile_failed|bad_compiler_arguments|internal_error|missing_cache_file|recache)$/)
            other = other sprintf("; %d %s", d[k], k)
        }
        total = hit + miss
        if (total == 0) { printf "ccache %s: nothing compiled%s\n", dir, other; exit }
        printf "ccache %s: %d of %d compilations from the cache (%.1f%%): %d direct, %d preprocessed; %d missed%s\n",
               dir, hit, total, 100 * hit / total, d["direct_cache_hit"], d["preprocessed_cache_hit"], miss, other
      }' "$snap" -
    rm -f "$snap" ;;
  *) echo "usage: $0 begin DIR | end DIR [LABEL]" >&2; exit 2 ;;
esac
