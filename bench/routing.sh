#!/usr/bin/env bash
# sluice routing benchmark: what routing costs on the data path. What `make bench-routing` runs.
#
# One simulator (zero delays, 8 output tokens), nginx (plain reverse proxy, the reference)
# and four sluice processes on the same simulator, same WORKERS, every route named
# sluice-sim (the model bench/chat.lua sends):
#   single    the config of bench/run.sh (one backend, short form) with the routing
#             bookkeeping mostly off: no backend or provider breaker, no passive ejection
#   defaults  the same single backend with the routing defaults (backend and provider
#             breakers on, passive ejection on)
#   set       balance: least_connections over three backends b1, b2, b3, all on the
#             simulator's URL; routing defaults
#   canary    the set route, plus canary: {alias: sluice-sim-canary, weight: 10} (no TTFT rollback: noise must not end it), whose own
#             backend c1 is on the same simulator
# wrk (as in phase 1 of bench/run.sh) measures each target ROUNDS times, interleaved in a
# rotating order: requests/s, latency p50/p99 with WRK_CONNS connections and with one, CPU
# per request of the gateway. The run fails unless the set variant's access log shows all
# three backends (each at least 10 % of the lines) and the canary variant's has 5-15 % of
# its lines served by the canary alias.
# Prints a Markdown report and writes it to bench/results/routing-latest.md (raw data next
# to it in routing-latest.jsonl).
#
# Knobs (environment): WORKERS (nproc), SIM_WORKERS (1), ROUNDS (3), WRK_THREADS (1),
# WRK_CONNS (32), WRK_DURATION (10), WARMUP (2), LIGHT_DURATION (3), SLUICE_BIN
# (build/sluice), KEEP_TMP (0), as in bench/run.sh.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_setup wrk nginx node curl

CANARY_ALIAS=sluice-sim-canary
CANARY_WEIGHT=10
SET_BACKENDS=(b1 b2 b3)
TARGETS=(nginx single defaults set canary)

# nginx, and sluice variants named in PID/PORT: lib.sh's target_url and proxy_pids.

# ---- start --------------------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
start_nginx

ROUTING_OFF='routing: {breaker: {enabled: false}, provider_breaker: {enabled: false}, health: {eject_after: 0}}'
SIM_URL="http://127.0.0.1:$SIM_PORT/v1"
# Three backends on the one simulator, kept apart by their names (one breaker, health state
# and in-flight count each); the upstream request is the same as in the other variants.
SET_ROUTE="  - alias: sluice-sim
    balance: least_connections
    backends:
      - {name: b1, provider: openai, base_url: \"$SIM_URL\", model: sluice-sim}
      - {name: b2, provider: openai, base_url: \"$SIM_URL\", model: sluice-sim}
      - {name: b3, provider: openai, base_url: \"$SIM_URL\", model: sluice-sim}"
CANARY_ROUTES="$SET_ROUTE
    canary: {alias: $CANARY_ALIAS, weight: $CANARY_WEIGHT, max_ttft_ratio: 0}
  - alias: $CANARY_ALIAS
    backends:
      - {name: c1, provider: openai, base_url: \"$SIM_URL\", model: sluice-sim}"
sluice_config single "$ROUTING_OFF"
sluice_config defaults
sluice_config set "" "$SET_ROUTE"
sluice_config canary "" "$CANARY_ROUTES"
for t in single defaults set canary; do
  "$BIN" check-config "$TMP/$t.yaml" >"$TMP/$t.check" 2>&1 ||
    die "sluice check-config rejects the $t config: $(cat "$TMP/$t.check")"
  start_sluice "$t"
  PID[$t]=$SLUICE_PID PORT[$t]=$SLUICE_PORT
done
check_targets "${TARGETS[@]}"

# ---- measure ------------------------------------------------------------------------------
log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds

# ---- check that the set spread the requests and the canary took its share -----------------
canary_active=$(metric canary "sluice_canary_active{model=\"sluice-sim\"}")
canary_rollbacks=$(metric canary "sluice_canary_rollbacks_total{model=\"sluice-sim\"}")
canary_first=$(metric canary "sluice_canary_requests_total{model=\"sluice-sim\",set=\"canary\"}")
stable_first=$(metric canary "sluice_canary_requests_total{model=\"sluice-sim\",set=\"stable\"}")
stop_all   # sluice flushes its access log when it stops
for t in single defaults set canary; do
  f="$TMP/$t.access.log"
  backends=$({ grep -o '"backend":"[^"]*"' "$f" || true; } | sort | uniq -c |
    awk '{ sub(/"backend":/, "", $2); printf "%s%s:%d", (n++ ? "," : ""), $2, $1 }')
  access_log_json "$f" "$(printf ',"target":"%s","backends":{%s},"served_by_canary":%d' "$t" "$backends" \
    "$(grep -c "\"served_by\":\"$CANARY_ALIAS\"" "$f" || true)")" >>"$RAW"
done
printf '{"phase":"canary","alias":"%s","weight":%d,"active_at_end":%s,"rollbacks":%s,"canary_first":%s,"stable_first":%s}\n' \
  "$CANARY_ALIAS" "$CANARY_WEIGHT" "${canary_active:-null}" "${canary_rollbacks:-null}" "${canary_first:-null}" \
  "${stable_first:-null}" >>"$RAW"

set_lines=$(wc -l <"$TMP/set.access.log")
for b in "${SET_BACKENDS[@]}"; do
  n=$(grep -c "\"backend\":\"$b\"" "$TMP/set.access.log" || true)
  log "set variant: backend $b in $n of $set_lines access log lines"
  [[ "$set_lines" -gt 0 && $((n * 10)) -ge "$set_lines" ]] ||
    die "the set variant's backend $b served $n of $set_lines requests (less than 10 %)"
done
canary_lines=$(wc -l <"$TMP/canary.access.log")
canary_served=$(grep -c "\"served_by\":\"$CANARY_ALIAS\"" "$TMP/canary.access.log" || true)
log "canary variant: $canary_served of $canary_lines access log lines served by $CANARY_ALIAS; canary active at the end: ${canary_active:-?}, rollbacks: ${canary_rollbacks:-?}"
[[ "$canary_lines" -gt 0 && $((canary_served * 100)) -ge $((canary_lines * 5)) &&
  $((canary_served * 100)) -le $((canary_lines * 15)) ]] ||
  die "the canary variant's access log: $canary_served of $canary_lines lines served by $CANARY_ALIAS (not 5-15 %; canary active at the end: ${canary_active:-?}, rollbacks: ${canary_rollbacks:-?})"
rm -f "$TMP"/*.access.log

# ---- report -------------------------------------------------------------------------------
write_report routing-latest "$BENCH/report-routing.mjs" "$(bench_meta \
  routing_off="$ROUTING_OFF" canary_routes="$CANARY_ROUTES")"
