#!/usr/bin/env bash
# Fetches the BPE rank files of the OpenAI encodings (cl100k_base, o200k_base) from npm:
# the tiktoken package pinned in data/tokenizer/package.json and package-lock.json.
#
#   scripts/fetch-tokenizer.sh [DEST]
#
# Leaves the files in data/tokenizer/node_modules/tiktoken/encoders/ (the default rank
# directory of the tokenizer, see docs/tokenizer.md) and, when DEST is given, copies
# cl100k_base.json and o200k_base.json into DEST as well. Idempotent: when the installed
# package already matches the lock file, npm is not run. Needs node/npm and the npm registry.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pkg="$root/data/tokenizer"
enc="$pkg/node_modules/tiktoken/encoders"
want="$(sed -n '/"node_modules\/tiktoken"/,/}/s/.*"version": *"\([^"]*\)".*/\1/p' "$pkg/package-lock.json")"
have=""
if [ -f "$pkg/node_modules/tiktoken/package.json" ]; then
  have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg/node_modules/tiktoken/package.json" | head -1)"
fi
if [ -z "$want" ]; then
  echo "fetch-tokenizer: no tiktoken entry in $pkg/package-lock.json" >&2
  exit 1
fi
if [ "$have" != "$want" ] || [ ! -s "$enc/cl100k_base.json" ] || [ ! -s "$enc/o200k_base.json" ]; then
  command -v npm >/dev/null || { echo "fetch-tokenizer: npm not found (apt-get install nodejs npm)" >&2; exit 1; }
  (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error)
fi
for f in cl100k_base.json o200k_base.json; do
  [ -s "$enc/$f" ] || { echo "fetch-tokenizer: $enc/$f missing after npm ci" >&2; exit 1; }
done
if [ $# -ge 1 ]; then
  mkdir -p "$1"
  cp "$enc/cl100k_base.json" "$enc/o200k_base.json" "$1/"
  echo "$1"
else
  echo "$enc"
fi
