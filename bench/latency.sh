#!/usr/bin/env bash
# Latency at light load: what each proxy adds over the simulator direct, at p50 and p99,
# (1) on one connection, one request after the other (wrk -t1 -c1), and (2) at a fixed rate
# (RATE requests/s, default 1,000, over RATE_CONNS keep-alive connections) from
# bench/rate.cpp, an open-loop generator that counts each request's latency from the moment
# it was due (a stall is charged to every request it delays). Targets: the simulator
# direct, nginx (plain reverse proxy) and sluice (PROFILE full or minimal, the
# configurations of bench/binaries.sh), ROUNDS rounds in a rotating order. Writes
# bench/results/latency-PROFILE-latest.md (raw: .jsonl).
#
#   PROFILE=full ROUNDS=3 bench/latency.sh
#
# Knobs: PROFILE, ROUNDS, LIGHT_DURATION (s of the one-connection run, default 5), RATE,
# RATE_DURATION (s, default 10), RATE_CONNS (default 16), WORKERS, SIM_WORKERS. Needs g++
# (to build bench/rate.cpp), wrk, nginx, node, curl.
set -Eeuo pipefail
LIGHT_DURATION=${LIGHT_DURATION:-5}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=${PROFILE:-full}
RATE=${RATE:-1000}
RATE_DURATION=${RATE_DURATION:-10}
RATE_CONNS=${RATE_CONNS:-16}
bench_setup wrk nginx node curl g++
case $PROFILE in
  full) EXTRA=$(full_profile_yaml) ;;
  minimal) EXTRA='' ;;
  *) die "PROFILE is full or minimal" ;;
esac
g++ -O2 -std=c++20 -o "$TMP/rate" "$BENCH/rate.cpp" || die "bench/rate.cpp does not build"

start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
start_nginx
sluice_config sluice "$EXTRA"
start_sluice sluice
PID[sluice]=$SLUICE_PID PORT[sluice]=$SLUICE_PORT
PORT[direct]=$SIM_PORT PORT[nginx]=$NGINX_PORT
TARGETS=(direct nginx sluice)
check_targets "${TARGETS[@]}"

# measure ROUND TARGET: a warm-up, the one-connection run, the fixed-rate run -> a JSON line.
measure() {
  local r=$1 t=$2 w line g0 g1
  run_wrk "$t" 4 "$WARMUP" >/dev/null
  w=$(run_wrk "$t" 1 "$LIGHT_DURATION")
  times >"$TMP/times0"
  line=$("$TMP/rate" --port "${PORT[$t]}" --path "$CHAT_PATH" --key "$KEY" --rate "$RATE" \
    --duration "$RATE_DURATION" --conns "$RATE_CONNS") || die "bench/rate.cpp against $t failed"
  times >"$TMP/times1"
  g1=$(children_cpu_ms "$TMP/times1")
  g0=$(children_cpu_ms "$TMP/times0")
  printf '{"phase":"latency","round":%d,"target":"%s","one_requests":%d,"one_duration_us":%d,"one_p50_us":%d,"one_p99_us":%d,"one_errors":%d,"rate_requests":%d,"rate_duration_us":%d,"rate_p50_us":%d,"rate_p90_us":%d,"rate_p99_us":%d,"rate_p999_us":%d,"rate_max_us":%d,"rate_errors":%d,"rate_late":%d,"rate_cpu_ms":%d}\n' \
    "$r" "$t" "$(kv "$w" requests)" "$(kv "$w" duration_us)" "$(kv "$w" p50_us)" "$(kv "$w" p99_us)" "$(wrk_errors "$w")" \
    "$(kv "$line" requests)" "$(kv "$line" duration_us)" "$(kv "$line" p50_us)" "$(kv "$line" p90_us)" \
    "$(kv "$line" p99_us)" "$(kv "$line" p999_us)" "$(kv "$line" max_us)" "$(kv "$line" errors)" \
    "$(kv "$line" late)" $((g1 - g0)) >>"$RAW"
  log "round $r $t: one connection p50 $(kv "$w" p50_us) us p99 $(kv "$w" p99_us) us; $RATE/s p50 $(kv "$line" p50_us) us p99 $(kv "$line" p99_us) us, errors $(kv "$line" errors), late $(kv "$line" late)"
}

log "$ROUNDS rounds x ${#TARGETS[@]} targets: wrk -c1 -d${LIGHT_DURATION}s, then $RATE requests/s for ${RATE_DURATION}s over $RATE_CONNS connections"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < ${#TARGETS[@]}; k++)); do
    measure "$r" "${TARGETS[$(((k + r - 1) % ${#TARGETS[@]}))]}"
  done
done
stop_all
rm -f "$TMP"/*.access.log

write_report "latency-$PROFILE-latest" "$BENCH/report-latency.mjs" "$(bench_meta profile="$PROFILE" \
  rate:="$RATE" rate_duration:="$RATE_DURATION" rate_conns:="$RATE_CONNS" extra="$EXTRA")"
