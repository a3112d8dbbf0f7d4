#!/usr/bin/env bash
# sluice as a fleet: three instances behind nginx (deploy/cluster.sh, deploy/nginx/sluice.conf)
# against one instance direct, in one run; then a rolling restart under open streams and a
# steady request rate. What `make bench-cluster` runs.
#
# Targets, measured ROUNDS times each in a rotating order (wrk as in bench/run.sh:
# requests/s, p50/p99 with WRK_CONNS connections and with one, CPU per request):
#   nginx     nginx as a plain reverse proxy in front of the simulator (the reference)
#   direct    one sluice instance (WORKERS workers)
#   cluster   nginx (deploy/nginx/sluice.conf) in front of CLUSTER_SIZE sluice instances
#             (CLUSTER_WORKERS workers each) started by deploy/cluster.sh
# "added by nginx" is cluster − direct per round: on one machine the cluster's instances
# share the same cores, so its throughput measures the extra hop, not more capacity.
#
# Then the rolling restart (bench/rolling.mjs): ROLL_STREAMS streams kept open (each of
# ROLL_TOKENS tokens at 20 ms from a second simulator, replaced when it ends) and ROLL_RATE
# requests/s through the cluster's nginx while `deploy/cluster.sh restart` replaces every
# instance; reports failed requests and cut streams (aim: 0).
#
# Knobs: WORKERS (nproc), CLUSTER_SIZE (3), CLUSTER_WORKERS (1), ROUNDS (3), WRK_THREADS
# (1), WRK_CONNS (32), WRK_DURATION (10), WARMUP (2), LIGHT_DURATION (3), ROLL_STREAMS
# (500), ROLL_RATE (100), ROLL_TOKENS (100), SLUICE_BIN, KEEP_TMP (0).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_setup wrk nginx node curl

CLUSTER_SIZE=${CLUSTER_SIZE:-3}
CLUSTER_WORKERS=${CLUSTER_WORKERS:-1}
ROLL_STREAMS=${ROLL_STREAMS:-500}
ROLL_RATE=${ROLL_RATE:-100}
ROLL_TOKENS=${ROLL_TOKENS:-100}
TARGETS=(nginx direct cluster)

log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
FAST_PID=$SIM_PID FAST_PORT=$SIM_PORT
start_sim --ttft 20ms --inter-token 20ms --jitter 0
SLOW_PID=$SIM_PID SLOW_PORT=$SIM_PORT
SIM_PID=$FAST_PID SIM_PORT=$FAST_PORT
start_nginx

MODELS="  - alias: sluice-sim
    provider: openai
    base_url: http://127.0.0.1:$FAST_PORT/v1
  - alias: slow
    provider: openai
    base_url: http://127.0.0.1:$SLOW_PORT/v1
    model: sluice-sim"
sluice_config direct "" "$MODELS"
start_sluice direct
PID[direct]=$SLUICE_PID PORT[direct]=$SLUICE_PORT

# The cluster: the same configuration, CLUSTER_WORKERS workers per instance, each its own
# ports (cluster.sh overrides listen, admin listen, instance, data dir and access log).
sluice_config cluster "timeouts: {total: 300s, drain_delay: 2s, shutdown_grace: 60s}" "$MODELS"
sed -i -e "s/^workers: .*/workers: $CLUSTER_WORKERS/" -e '/^timeouts:$/,/^  drain_delay: 0s$/d' "$TMP/cluster.yaml"
"$BIN" check-config "$TMP/cluster.yaml" >"$TMP/cluster.check" 2>&1 || die "check-config: $(cat "$TMP/cluster.check")"
FRONT_PORT=$(free_port)
export SLUICE_BIN="$BIN" SLUICE_CONFIG="$TMP/cluster.yaml" CLUSTER_DIR="$TMP/cluster" CLUSTER_NAME=bench \
  NGINX_LISTEN="127.0.0.1:$FRONT_PORT" REQUEST_TIMEOUT=300s WAIT_SECONDS=120
cluster_down() { "$ROOT/deploy/cluster.sh" down >/dev/null 2>&1 || true; }
trap 'cluster_down; cleanup' EXIT
"$ROOT/deploy/cluster.sh" up "$CLUSTER_SIZE" 2>"$TMP/cluster.log" || die "cluster.sh up: $(cat "$TMP/cluster.log")"
PORT[cluster]=$FRONT_PORT
cluster_pids() {
  local front
  front=$(cat "$TMP/cluster/nginx/nginx.pid")
  echo "$(ps -o pid= --ppid "$front" | tr '\n' ' ') $(cat "$TMP"/cluster/instances/*/pid 2>/dev/null | tr '\n' ' ')"
}
proxy_pids() {
  case $1 in
    nginx) echo "$NGINX_WORKER_PIDS" ;;
    cluster) cluster_pids ;;
    *) echo "${PID[$1]}" ;;
  esac
}
check_targets "${TARGETS[@]}"

log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds

# The requests must have been spread over every instance.
for f in "$TMP"/cluster/instances/*/access.log; do
  n=$(wc -l <"$f")
  log "cluster: $(basename "$(dirname "$f")") served $n requests"
  [[ "$n" -gt 100 ]] || die "instance $(basename "$(dirname "$f")") of the cluster served $n requests"
done
printf '{"phase":"spread","lines":[%s]}\n' "$(for f in "$TMP"/cluster/instances/*/access.log; do wc -l <"$f"; done | paste -sd,)" >>"$RAW"

log "rolling restart: $ROLL_STREAMS streams open ($ROLL_TOKENS tokens at 20 ms), $ROLL_RATE requests/s"
node "$BENCH/rolling.mjs" --url "http://127.0.0.1:$FRONT_PORT$CHAT_PATH" --key "$KEY" --streams "$ROLL_STREAMS" \
  --rate "$ROLL_RATE" --stream-tokens "$ROLL_TOKENS" --stream-model slow -- "$ROOT/deploy/cluster.sh" restart \
  >"$TMP/rolling.json" 2>"$TMP/rolling.err" || die "the rolling restart failed: $(tail -20 "$TMP/rolling.err")"
cat "$TMP/rolling.json" >>"$RAW"
log "rolling: $(cat "$TMP/rolling.json")"
cluster_down

write_report cluster-latest "$BENCH/report-cluster.mjs" "$(bench_meta cluster_size:="$CLUSTER_SIZE" \
  cluster_workers:="$CLUSTER_WORKERS" roll_streams:="$ROLL_STREAMS" roll_rate:="$ROLL_RATE" roll_tokens:="$ROLL_TOKENS")"
