#!/usr/bin/env bash
# How many objects a change to each header rebuilds: the objects whose compiler depfile
# (BUILD/**/*.o.d, written by every compile) lists the header. Run after a complete build
# of BUILD; nothing is compiled or touched.
#
#   scripts/header-fanout.sh BUILD HEADER...     e.g. scripts/header-fanout.sh build src/config/records.hpp
#
# Prints, per header: objects in all, objects outside tests/, objects outside tests/ and
# outside the header's own library (src/<lib>/).
set -euo pipefail
build="$1"; shift
mapfile -t deps < <(find "$build" -name '*.o.d' | sort)
for h in "$@"; do
  lib="$(echo "$h" | sed -n 's|^src/\([^/]*\)/.*|\1|p')"
  all=0; src=0; other=0
  for d in "${deps[@]}"; do
    [ -f "${d%.d}" ] || continue   # an object no longer built
    grep -q "/$h\\b" "$d" || continue
    all=$((all + 1))
    case "$d" in */tests/*) continue ;; esac
    src=$((src + 1))
    case "$d" in */src/$lib/*) continue ;; esac
    other=$((other + 1))
  done
  printf '%-28s %3d objects, %3d outside tests, %3d outside tests and src/%s (of %d)\n' "$h" "$all" "$src" "$other" "$lib" "${#deps[@]}"
done
