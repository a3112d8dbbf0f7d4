#!/usr/bin/env bash
# sluice API benchmark: what POST /v1/responses (the Responses API, translated by the gateway
# to a chat completion for an OpenAI-compatible route) and POST /v1/embeddings cost against
# POST /v1/chat/completions, in one run, on the same simulator; nginx (plain reverse proxy
# in front of the same simulator) is the reference.
#
# One simulator (zero delays), nginx, and one sluice process per gateway variant (same
# config: WORKERS workers, auth and access log on, history off, one route `m`, provider
# openai, base_url the simulator's /v1; the stored responses with their defaults). Every
# request is non-streamed with a small fixed output (16 tokens):
#   chat               POST /v1/chat/completions  {"model":"m","messages":[...],"max_tokens":16}
#   responses          POST /v1/responses  {"model":"m","input":"...","max_output_tokens":16,"store":false}
#   responses-store    the same without "store" (true, the default: the response is kept)
#   embeddings-float   POST /v1/embeddings  {"model":"m","input":"...","encoding_format":"float"}
#   embeddings-base64  the same with "encoding_format":"base64"
#   nginx-chat, nginx-embeddings-float, nginx-embeddings-base64: the chat and embeddings
#     bodies through nginx to the simulator (which has no /v1/responses: the responses
#     variants are compared with nginx-chat, the upstream request they become).
# wrk (bench/api.lua, the body per target) measures each target ROUNDS times, interleaved in
# a rotating order (bench/lib.sh's measure_rounds: 2 s warm-up, WRK_DURATION s measured with
# WRK_CONNS connections, LIGHT_DURATION s with one); CPU per request of the gateway (or the
# nginx workers) and of the simulator. Before the rounds every target must answer 200 with
# the expected object, and a stored response must read back (store true) or not (store
# false). The non-2xx answers wrk counted in every wrk run and the status counts of each
# gateway's access log are in the report.
# Prints a Markdown report and writes it to bench/results/api-latest.md (raw: .jsonl).
#
#   cp build/sluice /tmp/bench-sluice
#   SLUICE_BIN=/tmp/bench-sluice BIN_COMMIT=$(git rev-parse --short HEAD) bench/api.sh
#
# Knobs (environment) as bench/run.sh: WORKERS (nproc), SIM_WORKERS (1), ROUNDS (3),
# WRK_THREADS (1), WRK_CONNS (32), WRK_DURATION (10), WARMUP (2), LIGHT_DURATION (3),
# SLUICE_BIN (build/sluice), KEEP_TMP (0); BIN_COMMIT: the commit the binary was built
# from, shown in the report instead of the work tree's HEAD.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_setup wrk nginx node curl

PROMPT='Say something short.'
CHAT_BODY='{"model":"m","messages":[{"role":"user","content":"'$PROMPT'"}],"max_tokens":16}'
RESP_BODY='{"model":"m","input":"'$PROMPT'","max_output_tokens":16,"store":false}'
RESP_STORE_BODY='{"model":"m","input":"'$PROMPT'","max_output_tokens":16}'   # store: true, the default
EMB_FLOAT_BODY='{"model":"m","input":"'$PROMPT'","encoding_format":"float"}'
EMB_B64_BODY='{"model":"m","input":"'$PROMPT'","encoding_format":"base64"}'

GATEWAYS=(chat responses responses-store embeddings-float embeddings-base64)
TARGETS=(nginx-chat chat responses responses-store nginx-embeddings-float embeddings-float
  nginx-embeddings-base64 embeddings-base64)
declare -A BODY UPATH OBJECT
for t in chat nginx-chat; do BODY[$t]=$CHAT_BODY UPATH[$t]=/v1/chat/completions OBJECT[$t]=chat.completion; done
BODY[responses]=$RESP_BODY BODY[responses-store]=$RESP_STORE_BODY
for t in responses responses-store; do UPATH[$t]=/v1/responses OBJECT[$t]=response; done
for t in embeddings-float nginx-embeddings-float; do BODY[$t]=$EMB_FLOAT_BODY; done
for t in embeddings-base64 nginx-embeddings-base64; do BODY[$t]=$EMB_B64_BODY; done
for t in embeddings-float nginx-embeddings-float embeddings-base64 nginx-embeddings-base64; do
  UPATH[$t]=/v1/embeddings OBJECT[$t]=list
done

# Targets: nginx-* are nginx's workers, the others the sluice process of that name.
target_url() {
  case $1 in
    nginx-*) echo "http://127.0.0.1:$NGINX_PORT${UPATH[$1]}" ;;
    *) echo "http://127.0.0.1:${PORT[$1]}${UPATH[$1]}" ;;
  esac
}
proxy_pids() {
  case $1 in
    nginx-*) echo "$NGINX_WORKER_PIDS" ;;
    *) echo "${PID[$1]}" ;;
  esac
}

# lib.sh's run_wrk with the target's body (bench/api.lua); every wrk run (warm-up, measured,
# one connection) also leaves a "wrk" line in RAW with its non-2xx count. (`r` is the round
# of the calling measure_nonstream.)
run_wrk() {
  local t=$1 c=$2 d=$3 out="$TMP/wrk.out" line
  BENCH_KEY=$KEY BENCH_BODY=${BODY[$t]} timeout $((d + 30)) wrk -t"$WRK_THREADS" -c"$c" -d"${d}s" \
    --timeout 5s --latency -s "$BENCH/api.lua" "$(target_url "$t")" >"$out" 2>&1 ||
    die "wrk against $t failed: $(cat "$out")"
  line=$(grep -m1 '^BENCH ' "$out") || die "no result line from wrk against $t: $(cat "$out")"
  printf '{"phase":"wrk","round":%d,"target":"%s","conns":%d,"seconds":%d,"requests":%d,"non2xx":%d,"errors":%d}\n' \
    "${r:-0}" "$t" "$c" "$d" "$(kv "$line" requests)" "$(kv "$line" err_status)" "$(wrk_errors "$line")" >>"$RAW"
  printf '%s\n' "$line"
}

# One request per target: 200 and the expected object; records the answer's size.
check_api_targets() {
  local t code obj
  for t in "${TARGETS[@]}"; do
    rm -f "$TMP/check.out"
    code=$(curl -s -o "$TMP/check.out" -w '%{http_code}' -m 10 -X POST "$(target_url "$t")" \
      -H 'content-type: application/json' -H "authorization: Bearer $KEY" -d "${BODY[$t]}") || true
    [[ "$code" == 200 ]] || die "$t ($(target_url "$t")) answered HTTP $code: $(head -c 300 "$TMP/check.out")"
    obj=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).object)' "$TMP/check.out") ||
      die "$t answered 200 with a body that is not JSON: $(head -c 300 "$TMP/check.out")"
    [[ "$obj" == "${OBJECT[$t]}" ]] || die "$t answered an object $obj, not ${OBJECT[$t]}: $(head -c 300 "$TMP/check.out")"
    printf '{"phase":"check","target":"%s","path":"%s","body":%s,"status":%d,"bytes":%d}\n' \
      "$t" "${UPATH[$t]}" "${BODY[$t]}" "$code" "$(wc -c <"$TMP/check.out")" >>"$RAW"
  done
  # store true keeps the response (it reads back), store false does not.
  local id want
  for t in responses responses-store; do
    curl -s -o "$TMP/check.out" -m 10 -X POST "$(target_url "$t")" -H 'content-type: application/json' \
      -H "authorization: Bearer $KEY" -d "${BODY[$t]}" || die "$t: no answer"
    id=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).id)' "$TMP/check.out")
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 10 "http://127.0.0.1:${PORT[$t]}/v1/responses/$id" \
      -H "authorization: Bearer $KEY") || true
    want=404
    [[ $t == responses ]] || want=200
    [[ "$code" == "$want" ]] || die "$t: GET /v1/responses/$id answered $code, not $want"
  done
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# ---- start --------------------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE; binary $SRC_BIN${BIN_COMMIT:+ (commit $BIN_COMMIT)}"
start_sim --ttft 0 --inter-token 0 --jitter 0
start_nginx
ROUTE="  - alias: m
    provider: openai
    base_url: http://127.0.0.1:$SIM_PORT/v1"
for t in "${GATEWAYS[@]}"; do
  sluice_config "$t" "" "$ROUTE"
  "$BIN" check-config "$TMP/$t.yaml" >"$TMP/$t.check" 2>&1 || die "sluice check-config rejects the $t config: $(cat "$TMP/$t.check")"
  start_sluice "$t"
  PID[$t]=$SLUICE_PID PORT[$t]=$SLUICE_PORT
done
check_api_targets

# ---- measure ------------------------------------------------------------------------------
log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds
for t in "${GATEWAYS[@]}"; do
  printf '{"phase":"rss","target":"%s","rss_kib":%d}\n' "$t" "$(rss_kib "${PID[$t]}")" >>"$RAW"
done
stop_all   # sluice flushes its access log when it stops
for t in "${GATEWAYS[@]}"; do access_log_json "$TMP/$t.access.log" ",\"target\":\"$t\"" >>"$RAW"; done
rm -f "$TMP"/*.access.log

# ---- report -------------------------------------------------------------------------------
meta=(binary="$SRC_BIN")
[[ -z "${BIN_COMMIT:-}" ]] || meta+=(git="$BIN_COMMIT")   # replaces bench_meta's work-tree HEAD
write_report api-latest "$BENCH/report-api.mjs" "$(bench_meta "${meta[@]}")"
