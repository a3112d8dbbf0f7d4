#!/usr/bin/env bash
# sluice admission benchmark: what the Redis rate limiter costs. What `make bench-limits` runs.
#
# One simulator (zero delays, 8 output tokens), one redis-server, nginx (plain reverse proxy,
# the reference) and three sluice processes on the same simulator, same WORKERS:
#   off     no limits (the config of bench/run.sh)
#   redis   rate_limits with backend redis: a fixed-window request limit per key, a token
#           bucket per tenant and a daily token quota per key, all far above what the run
#           sends, so every request passes. Their leases are the automatic ones (limits this
#           large lease): most requests are admitted from what the process took from Redis in
#           advance, and every request's tokens are settled; the report gives the script
#           calls per request
#   redis1  one request limit per key (fixed window), backend redis
#   memory  the limits of redis, counted in the gateway's memory
# wrk (as in phase 1 of bench/run.sh) measures each target ROUNDS times, interleaved in a
# rotating order: requests/s, latency p50/p99 with WRK_CONNS connections and with one, CPU
# per request of the gateway and of redis-server. The run fails unless the redis variant
# really counted in Redis (its /metrics, the access log's "limiter" field, Redis's keys).
# Prints a Markdown report and writes it to bench/results/limits-latest.md (raw data next
# to it in limits-latest.jsonl).
#
# Knobs (environment): WORKERS (nproc), SIM_WORKERS (1), ROUNDS (3), WRK_THREADS (1),
# WRK_CONNS (32), WRK_DURATION (10), WARMUP (2), LIGHT_DURATION (3), SLUICE_BIN
# (build/sluice), KEEP_TMP (0), as in bench/run.sh.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_setup wrk nginx node curl redis-server redis-cli

# Every request passes: the limits are far above what a run sends.
LIMITS='  requests:
    - {scope: key, limit: 1000000000, window: 1h}
    - {scope: tenant, algorithm: token_bucket, limit: 1000000000, window: 1m}
  tokens:
    - {scope: key, limit: 1000000000000, per: day}'

start_redis() {  # -> REDIS_PID, REDIS_PORT
  REDIS_PORT=$(free_port)
  mkdir -p "$TMP/redis"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$TMP/redis" \
    --daemonize no --logfile '' >"$TMP/redis.out" 2>"$TMP/redis.err" &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  wait_line "$TMP/redis.out" 'Ready to accept connections' "$REDIS_PID" redis-server >/dev/null
  log "redis-server pid $REDIS_PID on 127.0.0.1:$REDIS_PORT ($(redis-server --version | awk '{print $3}'))"
}

rcli() { timeout 10 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

TARGETS=(nginx off redis redis1 memory)

# nginx, and sluice variants named in PID/PORT: lib.sh's target_url and proxy_pids.

# ---- start --------------------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
start_redis
start_nginx
sluice_config off
sluice_config redis "redis:
  url: redis://127.0.0.1:$REDIS_PORT
rate_limits:
  backend: redis
$LIMITS"
sluice_config memory "rate_limits:
  backend: memory
$LIMITS"
# The lightest Redis setup: one fixed-window limit per key (one script call per request).
sluice_config redis1 "redis:
  url: redis://127.0.0.1:$REDIS_PORT
rate_limits:
  backend: redis
  requests:
    - {scope: key, limit: 1000000000, window: 1h}"
for t in off redis redis1 memory; do
  "$BIN" check-config "$TMP/$t.yaml" >"$TMP/$t.check" 2>&1 ||
    die "sluice check-config rejects the $t config: $(cat "$TMP/$t.check")"
  start_sluice "$t"
  PID[$t]=$SLUICE_PID PORT[$t]=$SLUICE_PORT
done
check_targets "${TARGETS[@]}"
[[ "$(metric redis 'sluice_ratelimit_backend{configured="redis",active="redis"}')" == 1 ]] ||
  die "the redis variant's limiter is not active on Redis: $(curl -s -m 10 "http://127.0.0.1:${PORT[redis]}/infra")"
[[ "$(metric memory 'sluice_ratelimit_backend{configured="memory",active="memory"}')" == 1 ]] ||
  die "the memory variant's limiter is not active: $(curl -s -m 10 "http://127.0.0.1:${PORT[memory]}/infra")"
[[ "$(rcli dbsize)" -gt 0 ]] || die "a request through the redis variant left no key in Redis"
# Both Redis variants share this redis-server: script calls are divided by the requests of
# both (decided by a script call or from a lease).
decided() {  # decided TARGET: its requests decided with Redis
  echo $(( $(metric "$1" 'sluice_ratelimit_counted_total{backend="redis"}') +
    $(metric "$1" 'sluice_ratelimit_counted_total{backend="lease"}') ))
}
counted_before=$(( $(decided redis) + $(decided redis1) ))
rcli config resetstat >/dev/null

# ---- measure ------------------------------------------------------------------------------
log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds redis "$REDIS_PID"  # redis-server's CPU is recorded for every target

# ---- check that the redis variant counted in Redis -------------------------------------
counted_redis=$(metric redis 'sluice_ratelimit_counted_total{backend="redis"}')
counted_lease=$(metric redis 'sluice_ratelimit_counted_total{backend="lease"}')
decided_both=$(( $(decided redis) + $(decided redis1) ))
counted_local=$(metric redis 'sluice_ratelimit_counted_total{backend="local"}')
redis_errors=$(metric redis sluice_ratelimit_redis_errors_total)
settle_errors=$(metric redis sluice_ratelimit_settle_errors_total)
tokens_charged=$(metric redis sluice_tokens_charged_total)
redis_keys=$(rcli dbsize)
# Script calls since the stats were reset (after the checks above, when counted_before
# requests had been counted): EVALSHA, and EVAL after a NOSCRIPT.
script_calls=$(rcli info commandstats | tr -d '\r' |
  awk -F'[:=,]' '/^cmdstat_(evalsha|eval):/ { s += $3 } END { print s + 0 }')
stop_all   # sluice flushes its access log when it stops
for t in off redis redis1 memory; do
  f="$TMP/$t.access.log"
  access_log_json "$f" "$(printf ',"target":"%s","limiter_redis":%d,"limiter_local":%d' "$t" \
    "$(grep -c '"limiter":"redis"' "$f" || true)" "$(grep -c '"limiter":"local"' "$f" || true)")" >>"$RAW"
done
printf '{"phase":"redis","counted_before":%d,"counted_redis":%d,"counted_lease":%d,"decided_both":%d,"counted_local":%d,"redis_errors":%d,"settle_errors":%d,"tokens_charged":%d,"keys":%d,"script_calls":%d}\n' \
  "${counted_before:-0}" "${counted_redis:-0}" "${counted_lease:-0}" "${decided_both:-0}" "${counted_local:-0}" "${redis_errors:-0}" "${settle_errors:-0}" "${tokens_charged:-0}" \
  "${redis_keys:-0}" "$script_calls" >>"$RAW"
log "redis variant: counted in redis $counted_redis, from leases $counted_lease, locally $counted_local, redis errors $redis_errors, settle errors $settle_errors; $redis_keys keys, $script_calls script calls"
redis_logged=$(grep -c '"limiter":"redis"' "$TMP/redis.access.log" || true)
redis_unlogged=$({ grep '"status":200,' "$TMP/redis.access.log" || true; } | grep -vc '"limiter":"redis"' || true)
[[ $((counted_redis + counted_lease)) -gt 0 && "${counted_local:-0}" == 0 && "${redis_errors:-0}" == 0 ]] ||
  die "the redis variant did not count every request in Redis (see the line above)"
[[ "$redis_logged" -gt 0 && "$redis_unlogged" == 0 ]] ||
  die "the redis variant's access log: $redis_logged lines with \"limiter\":\"redis\", $redis_unlogged answers 200 without"
rm -f "$TMP"/*.access.log

# ---- report -------------------------------------------------------------------------------
write_report limits-latest "$BENCH/report-limits.mjs" "$(bench_meta \
  redis="$(redis-server --version | awk '{print $3}' | sed 's/^v=//')" limits="$LIMITS")"
