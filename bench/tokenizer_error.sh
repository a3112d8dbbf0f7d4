#!/usr/bin/env bash
# Measures the token estimator against the exact BPE, and the BPE's throughput
# (docs/tokenizer.md). Builds the tokenizer_error tool in $BUILD (default: build).
#
#   bench/tokenizer_error.sh [REFERENCE_DIR [FLAGS...]]
#       error on this repository's docs and code and the articles REFERENCE_DIR/*.txt
#       (default /work/shared/reference); FLAGS go to the tool (--min-tokens N, --seconds S)
#   bench/tokenizer_error.sh --calibrate       fit the weights on the calibration corpus
#   bench/tokenizer_error.sh --calibration-error   the error on the calibration corpus
#
# The calibration corpus is text of this Debian system, not of the repository: npm's
# documentation, READMEs under /usr/share/doc, C++/Python/JavaScript sources, and the
# translated messages of the gettext catalogs (/usr/share/locale/*/LC_MESSAGES/*.mo) in 18
# languages. It is assembled in a temporary directory and removed afterwards.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-build}"
cd "$root"

scripts/fetch-tokenizer.sh >/dev/null
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)" --target tokenizer_error >/dev/null
tool="$build/bench/tokenizer_error"

calibration_corpus() {
  local dir="$1"
  mkdir -p "$dir/prose" "$dir/code" "$dir/mo"
  # English technical prose.
  cp -r /usr/lib/node_modules/npm/docs/content "$dir/prose/npm"
  find /usr/share/doc -maxdepth 2 -type f \( -name 'README*' -o -name '*.md' -o -name '*.md.gz' \) |
    sort | while read -r f; do
      out="$dir/prose/doc-$(echo "${f#/usr/share/doc/}" | tr '/' '_')"
      case "$f" in *.gz) zcat "$f" >"${out%.gz}.txt" 2>/dev/null || true ;; *) cp "$f" "$out.txt" ;; esac
    done
  # Source code.
  cp /usr/include/c++/12/bits/stl_*.h "$dir/code/" 2>/dev/null || true
  for f in "$dir"/code/*.h; do mv "$f" "$f.hpp"; done
  cp -r /usr/lib/python3.11/json /usr/lib/python3.11/http /usr/lib/python3.11/email "$dir/code/" 2>/dev/null || true
  cp -r /usr/lib/node_modules/npm/lib "$dir/code/npm-lib"
  # Translated messages: 300 paragraphs of 4 messages per language.
  /usr/bin/python3 - "$dir/mo" <<'EOF'
import glob, struct, sys
out = sys.argv[1]
langs = "zh_CN zh_TW ja ko ru uk el ar he hi th vi tr pl de fr es pt_BR".split()
for lang in langs:
    msgs = []
    for path in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
        data = open(path, "rb").read()
        if len(data) < 28:
            continue
        magic = struct.unpack("<I", data[:4])[0]
        e = "<" if magic == 0x950412DE else ">"
        _, n, _, toff = struct.unpack(e + "4I", data[4:20])
        for i in range(n):
            length, off = struct.unpack(e + "2I", data[toff + 8 * i: toff + 8 * i + 8])
            for s in data[off:off + length].split(b"\0"):
                try:
                    t = s.decode("utf-8").strip()
                except UnicodeDecodeError:
                    continue
                if len(t) >= 10 and not t.startswith("Project-Id-Version"):
                    msgs.append(t)
    paras = ["\n".join(msgs[i:i + 4]) for i in range(0, len(msgs), 4)][:300]
    open(f"{out}/{lang}.txt", "w").write("\n\n".join(paras) + "\n")
EOF
}

case "${1:-}" in
  --calibrate | --calibration-error)
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    calibration_corpus "$tmp"
    if [ "$1" = --calibrate ]; then flag=--calibrate; else flag=; fi
    "$tool" $flag --min-tokens 3 prose="$tmp/prose" code="$tmp/code" scripts="$tmp/mo"
    ;;
  *)
    ref="${1:-/work/shared/reference}"
    shift || true
    docs=()
    for f in README.md docs/*.md; do docs+=("docs=$f"); done
    zh=()
    for f in "$ref"/*.txt; do zh+=("zh=$f"); done
    "$tool" "$@" "${docs[@]}" code=src code=tests code=bench code=scripts "${zh[@]}"
    ;;
esac
