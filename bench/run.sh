#!/usr/bin/env bash
# sluice benchmark: the upstream simulator directly, through nginx (plain reverse proxy) and
# through sluice, all measured in one run on one machine. What `make bench` runs.
#
#   1. non-streaming: wrk POSTs a small chat completion (max_tokens 8) to each target,
#      interleaved, ROUNDS times; requests/s, latency p50/p99, CPU per request of each proxy.
#   2. streaming: bench/streams.cpp opens STREAMS concurrent streaming requests to each
#      target; errors, TTFT p50/p99, resident memory per open stream of each proxy.
#   3. prints a Markdown table and writes it to bench/results/latest.md (raw data next to
#      it in latest.jsonl).
#
# Everything runs on 127.0.0.1 with free ports, under a temp dir that is removed at the end
# (KEEP_TMP=1 keeps it). Processes are stopped by pid. Knobs (environment):
#   WORKERS (nproc)  sluice workers = nginx worker_processes
#   SIM_WORKERS (1)  simulator worker threads
#   ROUNDS (3) WRK_THREADS (1) WRK_CONNS (32) WRK_DURATION (10) WARMUP (2) seconds
#   LIGHT_DURATION (3)  seconds of the extra 1-connection latency run per target; 0 = skip
#   STREAMS (1000) STREAM_ROUNDS (3) STREAM_TOKENS (50) STREAM_TTFT (200ms)
#   STREAM_INTER_TOKEN (20ms) STREAM_JITTER (0)
#   SLUICE_BIN (build/sluice)
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STREAMS=${STREAMS:-1000}
STREAM_ROUNDS=${STREAM_ROUNDS:-3}
STREAM_TOKENS=${STREAM_TOKENS:-50}
STREAM_TTFT=${STREAM_TTFT:-200ms}
STREAM_INTER_TOKEN=${STREAM_INTER_TOKEN:-20ms}
STREAM_JITTER=${STREAM_JITTER:-0}

bench_setup wrk nginx node curl g++
build_stream_client

# File descriptors: a stream holds one client socket at the proxy, one upstream socket, and
# one socket each at the client and the simulator.
if [[ "$NOFILE" != unlimited && "$NOFILE" -lt $((2 * STREAMS + 1024)) ]]; then
  die "ulimit -n is $NOFILE, too low for STREAMS=$STREAMS (need $((2 * STREAMS + 1024)))"
fi

start_all() {  # start_all SIM_ARGS...
  start_sim "$@"
  start_nginx
  start_sluice
}

target_url() {
  case $1 in
    direct) echo "http://127.0.0.1:$SIM_PORT$CHAT_PATH" ;;
    nginx) echo "http://127.0.0.1:$NGINX_PORT$CHAT_PATH" ;;
    sluice) echo "http://127.0.0.1:$SLUICE_PORT$CHAT_PATH" ;;
  esac
}

proxy_pids() {
  case $1 in
    direct) echo "$SIM_PID" ;;
    nginx) echo "$NGINX_WORKER_PIDS" ;;
    sluice) echo "$SLUICE_PID" ;;
  esac
}

# ---- 1. non-streaming ---------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
log "phase 1: non-streaming, $ROUNDS rounds x 3 targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s"
start_all --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
check_targets direct nginx sluice

TARGETS=(direct nginx sluice)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 3; k++)); do
    measure_nonstream "$r" "${TARGETS[$(((k + r - 1) % 3))]}"   # rotate the order from round to round
  done
done
stop_all   # sluice flushes its access log when it stops
access_log_json "$TMP/sluice.access.log" >>"$RAW"
rm -f "$TMP/sluice.access.log"

# ---- 2. streaming -----------------------------------------------------------------------
log "phase 2: streaming, $STREAM_ROUNDS rounds x 3 targets, $STREAMS concurrent streams of $STREAM_TOKENS tokens"
for ((r = 1; r <= STREAM_ROUNDS; r++)); do
  # Fresh processes every round: the idle RSS baseline is that of a process that has not
  # yet held thousands of streams (allocators keep freed memory), and rounds are alike.
  stop_all
  start_all --ttft "$STREAM_TTFT" --inter-token "$STREAM_INTER_TOKEN" --jitter "$STREAM_JITTER" \
    --default-output-tokens "$STREAM_TOKENS"
  check_targets direct nginx sluice
  for ((k = 0; k < 3; k++)); do
    t=${TARGETS[$(((k + r - 1) % 3))]}
    rss=""
    [[ $t == direct ]] || rss=$(proxy_pids "$t" | tr ' ' ',')
    read -r -a pp <<<"$(proxy_pids "$t")"
    p0=$(cpu_ticks "${pp[@]}")
    s0=$(cpu_ticks "$SIM_PID")
    b0=$(busy_ticks)
    w0=$EPOCHREALTIME
    times >"$TMP/times0"
    sline=$(timeout 150 "$STREAM_CLIENT" --url "$(target_url "$t")" --n "$STREAMS" \
      --key "$KEY" --max-tokens "$STREAM_TOKENS" --timeout-ms 60000 --rss-pid "$rss" \
      --label "$t" 2>"$TMP/streams.err") || die "bench/streams.cpp against $t failed: $(cat "$TMP/streams.err")"
    times >"$TMP/times1"
    w1=$EPOCHREALTIME
    b1=$(busy_ticks)
    p1=$(cpu_ticks "${pp[@]}")
    s1=$(cpu_ticks "$SIM_PID")
    client_ms=$(($(children_cpu_ms "$TMP/times1") - $(children_cpu_ms "$TMP/times0")))
    wall_ms=$(( (${w1/[.,]/} - ${w0/[.,]/}) / 1000 ))
    printf '{"phase":"stream","round":%d,"target":"%s","proxy_ticks":%d,"sim_ticks":%d,"busy_ticks":%d,"client_cpu_ms":%d,"run_ms":%d,"result":%s}\n' \
      "$r" "$t" $((p1 - p0)) $((s1 - s0)) $((b1 - b0)) "$client_ms" "$wall_ms" "$sline" >>"$RAW"
    log "round $r $t: $sline"
  done
done
stop_all

# ---- 3. report --------------------------------------------------------------------------
write_report latest "$BENCH/report.mjs" "$(bench_meta streams:="$STREAMS" stream_rounds:="$STREAM_ROUNDS" \
  stream_tokens:="$STREAM_TOKENS" stream_ttft="$STREAM_TTFT" stream_inter_token="$STREAM_INTER_TOKEN" \
  stream_jitter="$STREAM_JITTER")"
