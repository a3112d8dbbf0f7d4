#!/usr/bin/env bash
# Memory per open stream and time to first token with N streams started together, sluice
# and nginx (plain reverse proxy) in front of the same simulator, in one run; BASE_BIN adds
# a second gateway binary (e.g. a build of the commit before a change).
#
#   STREAMS=2000 bench/streams.sh      (TARGETS="direct nginx sluice" by default)
#
# The simulator answers after STREAM_TTFT, then STREAM_TOKENS tokens STREAM_INTER_TOKEN
# apart (default 200ms, 50 x 100ms: 5 s per stream, so that every stream is open at the
# moment the last one gets its first token; the report says how many were). Each target
# gets fresh processes (allocators keep memory once used). The client is bench/streams.cpp
# (one thread, epoll: its client_cpu_ms shows it is not the bottleneck; its `open_at_sample`
# says whether all streams were open together). `direct` is the simulator without a proxy:
# what a proxy adds to time to first token is its p99 minus direct's. Prints one JSON line
# per target; RSS per stream = (highest RSS - idle RSS) / STREAMS, and proxy_cpu_ms the
# proxy's CPU time over the batch (for direct: the simulator's).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STREAMS=${STREAMS:-2000}
STREAM_TTFT=${STREAM_TTFT:-200ms}
STREAM_INTER_TOKEN=${STREAM_INTER_TOKEN:-100ms}
STREAM_TOKENS=${STREAM_TOKENS:-50}
bench_setup nginx node curl g++
(( NOFILE >= 2 * STREAMS + 1024 )) || die "ulimit -n is $NOFILE: $STREAMS streams need $((2 * STREAMS + 1024))"
[[ -z "${BASE_BIN:-}" ]] || cp "$BASE_BIN" "$TMP/sluice-base"

build_stream_client
read -r -a TARGETS <<<"${TARGETS:-direct nginx sluice}"
[[ -z "${BASE_BIN:-}" ]] || TARGETS+=(base)
log "machine: $(nproc) CPUs; $STREAMS streams, ttft $STREAM_TTFT, $STREAM_TOKENS tokens x $STREAM_INTER_TOKEN"
for t in "${TARGETS[@]}"; do
  start_sim --ttft "$STREAM_TTFT" --inter-token "$STREAM_INTER_TOKEN" --jitter 0 --default-output-tokens "$STREAM_TOKENS"
  case $t in
    direct)
      port=$SIM_PORT
      pids=$SIM_PID  # (its figures are the simulator's own)
      ;;
    nginx)
      start_nginx
      port=$NGINX_PORT
      pids=$(tr ' ' ',' <<<"$NGINX_WORKER_PIDS")
      ;;
    *)
      sluice_config "$t" ""
      bin=$BIN
      [[ $t == base ]] && bin="$TMP/sluice-base"
      BIN=$bin start_sluice "$t"
      port=$SLUICE_PORT
      pids=$SLUICE_PID
      ;;
  esac
  "$STREAM_CLIENT" --port "$port" --path "$CHAT_PATH" --n "$STREAMS" --key "$KEY" --max-tokens "$STREAM_TOKENS" \
    --timeout-ms 120000 --rss-pid "$pids" --label "$t"
  stop_all
done
