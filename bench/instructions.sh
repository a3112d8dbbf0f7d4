#!/usr/bin/env bash
# Instructions per request of sluice under valgrind's callgrind: exact, unlike times on a
# shared machine, so a small change to the request path can be measured.
#
#   bench/instructions.sh [VARIANT...]     variants: off (no limits, the default config of
#                                          bench/run.sh), memory (three limits and a token
#                                          quota counted in memory), redis (the same limits
#                                          counted in a redis-server started here);
#                                          default: off memory
#
# For each variant: one simulator (zero delays, 8 output tokens), `sluice serve` with one
# worker under callgrind with instrumentation off; WARMUP requests (one at a time, curl),
# then instrumentation on for REQUESTS requests, then a dump. Prints the instructions per
# request of the whole process (workers and the access log's thread), and the difference
# of each variant to the first. Knobs: REQUESTS (200), WARMUP (50), SLUICE_BIN
# (build/sluice), KEEP_TMP (0: 1 keeps the callgrind files, cg.VARIANT.1, for
# callgrind_annotate). Needs valgrind and curl; the redis variant also redis-server.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SLUICE_BIN:-$ROOT/build/sluice}
REQUESTS=${REQUESTS:-200}
WARMUP=${WARMUP:-50}
KEY=sk-bench-0123456789abcdef
VARIANTS=("$@")
[[ ${#VARIANTS[@]} -gt 0 ]] || VARIANTS=(off memory)
for tool in valgrind callgrind_control callgrind_annotate curl; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is missing" >&2; exit 1; }
done
[[ -x "$BIN" ]] || { echo "instructions.sh: no binary at $BIN (make build)" >&2; exit 1; }

TMP=$(mktemp -d /tmp/sluice-instr-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ "${KEEP_TMP:-0}" == 1 ]] || rm -rf "$TMP"
}
trap cleanup EXIT

wait_port() {  # wait_port FILE PATTERN PID -> the port printed in FILE
  local i
  for ((i = 0; i < 600; i++)); do
    if grep -qE "$2" "$1" 2>/dev/null; then grep -oE "$2" "$1" | head -1 | grep -oE '[0-9]+$'; return; fi
    kill -0 "$3" 2>/dev/null || { echo "instructions.sh: process $3 exited: $(cat "$1")" >&2; exit 1; }
    sleep 0.1
  done
  echo "instructions.sh: nothing listened ($1)" >&2
  exit 1
}

"$BIN" sim --host 127.0.0.1 --port 0 --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8 >"$TMP/sim.out" 2>&1 &
PIDS+=($!)
SIM_PORT=$(wait_port "$TMP/sim.out" 'listening on 127\.0\.0\.1:[0-9]+' "${PIDS[0]}")

REDIS_PORT=""
if [[ " ${VARIANTS[*]} " == *" redis "* ]]; then
  command -v redis-server >/dev/null || { echo "instructions.sh: redis-server is missing" >&2; exit 1; }
  REDIS_PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$TMP" \
    --daemonize no --logfile '' >"$TMP/redis.out" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 100; i++)); do
    grep -q 'Ready to accept connections' "$TMP/redis.out" && break
    kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "instructions.sh: redis-server exited: $(cat "$TMP/redis.out")" >&2; exit 1; }
    sleep 0.1
  done
fi

config() {  # config VARIANT -> $TMP/VARIANT.yaml
  cat >"$TMP/$1.yaml" <<EOF
listen: 127.0.0.1:0
workers: 1
access_log: $TMP/$1.access.log
history: {backend: none}
keys:
  - {name: bench, key: $KEY}
models:
  - alias: sluice-sim
    provider: openai
    base_url: http://127.0.0.1:$SIM_PORT/v1
EOF
  case $1 in
    off) ;;
    memory|redis)
      [[ $1 == redis ]] && echo "redis: {url: \"redis://127.0.0.1:$REDIS_PORT\"}" >>"$TMP/$1.yaml"
      cat >>"$TMP/$1.yaml" <<EOF
rate_limits:
  backend: $1
  requests:
    - {scope: key, limit: 1000000000, window: 1h}
    - {scope: tenant, algorithm: token_bucket, limit: 1000000000, window: 1m}
  tokens:
    - {scope: key, limit: 1000000000000, per: day}
EOF
      ;;
    *) echo "instructions.sh: unknown variant $1 (off, memory, redis)" >&2; exit 2 ;;
  esac
}

ask() {  # ask PORT N: N requests, one at a time; each must answer 200
  local i code
  for ((i = 0; i < $2; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/v1/chat/completions" \
      -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
      -d '{"model":"sluice-sim","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}')
    [[ "$code" == 200 ]] || { echo "instructions.sh: HTTP $code" >&2; exit 1; }
  done
}

first=""
for v in "${VARIANTS[@]}"; do
  config "$v"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$TMP/cg.$v" \
    "$BIN" serve --config "$TMP/$v.yaml" >"$TMP/$v.out" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  port=$(wait_port "$TMP/$v.out" 'sluice listening on 127\.0\.0\.1:[0-9]+' "$pid")
  ask "$port" "$WARMUP"
  callgrind_control -i on "$pid" >/dev/null 2>&1
  ask "$port" "$REQUESTS"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  # The dump holds what ran while instrumentation was on (the file without a part number
  # is written at exit). awk reads everything: an early exit would break the pipe.
  total=$(callgrind_annotate "$TMP/cg.$v.1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !t { gsub(",", "", $1); t = $1 } END { print t }')
  per=$((total / REQUESTS))
  kill "$pid"
  line="$v: $per instructions per request ($REQUESTS requests)"
  if [[ -z "$first" ]]; then first=$per; else line+=", $((per - first)) more than ${VARIANTS[0]}"; fi
  echo "$line"
done
