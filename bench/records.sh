#!/usr/bin/env bash
# sluice records benchmark: what the access log, the request history and the Kafka events
# cost. What `make bench-records` runs.
#
# One simulator (zero delays, 8 output tokens), nginx (plain reverse proxy, the reference),
# and sluice processes on the same simulator, same WORKERS:
#   off      history off (backend none), no events
#   sqlite   history in SQLite (WAL, a file in the run's temp dir),
#            events to Kafka (librdkafka's mock cluster, built with the tests: build/kafka-mock)
#   postgres the same with the history in PostgreSQL (a server started for the run)
# Every variant writes the access log (as in the other benchmarks) and collects metrics
# (they cannot be turned off); in the recording variants /metrics is also scraped every
# second during the runs, as Prometheus would.
# wrk measures each target ROUNDS times, interleaved in a rotating order. CPU per request
# counts the gateway alone and with its dependencies (the Kafka mock, the PostgreSQL
# server's processes). The run fails unless every recording variant really wrote its
# rows and delivered its events (its /infra after the run).
#
# Knobs (environment): as bench/run.sh (WORKERS, ROUNDS, WRK_CONNS, WRK_DURATION...).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

bench_setup wrk nginx node curl runuser
KAFKA_MOCK=${KAFKA_MOCK:-$(dirname "$SRC_BIN")/kafka-mock}
[[ -x "$KAFKA_MOCK" ]] || die "$KAFKA_MOCK not found: build the tests (make unit-test) first"
PG_BIN=/usr/lib/postgresql/15/bin
[[ -x "$PG_BIN/postgres" ]] || die "PostgreSQL 15 is not installed (scripts/setup.sh --test)"

TARGETS=(nginx off sqlite postgres)

# nginx, and sluice variants named in PID/PORT: lib.sh's target_url and proxy_pids.

start_kafka() {  # -> KAFKA_PID, KAFKA_BOOTSTRAP
  mkfifo "$TMP/kafka.in"
  "$KAFKA_MOCK" --bootstrap-file "$TMP/kafka.bootstrap" --topic sluice.requests --partitions 2 \
    <"$TMP/kafka.in" >"$TMP/kafka.out" 2>"$TMP/kafka.err" &
  KAFKA_PID=$!
  PIDS+=("$KAFKA_PID")
  exec {KAFKA_IN}>"$TMP/kafka.in"  # held open: the mock exits on EOF
  for _ in $(seq 100); do [[ -s "$TMP/kafka.bootstrap" ]] && break; sleep 0.1; done
  KAFKA_BOOTSTRAP=$(cat "$TMP/kafka.bootstrap") || die "the Kafka mock cluster did not start: $(cat "$TMP/kafka.err")"
  log "kafka-mock pid $KAFKA_PID at $KAFKA_BOOTSTRAP"
}

start_postgres() {  # -> PG_PID, PG_PORT (run as the postgres user when root)
  local as=()
  [[ $(id -u) -ne 0 ]] || as=(runuser -u postgres --)
  mkdir -p "$TMP/pg"
  if [[ $(id -u) -eq 0 ]]; then
    chmod 711 "$TMP"  # the postgres user must reach its directory inside
    chown -R postgres:postgres "$TMP/pg"
  fi
  "${as[@]}" "$PG_BIN/initdb" -D "$TMP/pg/data" -A trust -U postgres --no-sync >"$TMP/pg.init" 2>&1 ||
    die "initdb failed: $(cat "$TMP/pg.init")"
  PG_PORT=$(free_port)
  "${as[@]}" "$PG_BIN/postgres" -D "$TMP/pg/data" -k "$TMP/pg" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c synchronous_commit=off >"$TMP/pg.out" 2>&1 &
  for _ in $(seq 100); do "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.1; done
  PG_PID=$(head -1 "$TMP/pg/data/postmaster.pid")
  PIDS+=("$PG_PID")
  psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'CREATE DATABASE sluice' postgres
  log "postgres pid $PG_PID on 127.0.0.1:$PG_PORT"
}
pg_pids() { echo "$PG_PID $(ps -o pid= --ppid "$PG_PID" | tr '\n' ' ')"; }  # postmaster and its backends

# A Prometheus-like scrape of every recording variant, once a second, while the rounds run.
scrape_loop() {
  while :; do
    for t in sqlite postgres; do curl -s -o /dev/null -m 2 "http://127.0.0.1:${PORT[$t]}/metrics" || true; done
    sleep 1
  done
}

infra() { curl -s -m 10 "http://127.0.0.1:${PORT[$1]}/infra"; }

# ---- start --------------------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
start_nginx
start_kafka
start_postgres
EVENTS="events: {brokers: \"$KAFKA_BOOTSTRAP\", topic: sluice.requests}"
sluice_config off "history: {backend: none}"
sluice_config sqlite "history: {backend: sqlite, path: $TMP/history.db}
$EVENTS"
sluice_config postgres "history: {url: \"postgresql://postgres@127.0.0.1:$PG_PORT/sluice\"}
$EVENTS"
for t in off sqlite postgres; do
  "$BIN" check-config "$TMP/$t.yaml" >"$TMP/$t.check" 2>&1 || die "sluice check-config rejects the $t config: $(cat "$TMP/$t.check")"
  start_sluice "$t"
  PID[$t]=$SLUICE_PID PORT[$t]=$SLUICE_PORT
done
check_targets "${TARGETS[@]}"
for t in sqlite postgres; do
  for _ in $(seq 100); do infra "$t" | grep -q '"events":{"configured":"kafka","active":"kafka","up":true' && break; sleep 0.1; done
  infra "$t" | grep -q '"up":true,"brokers"' || die "the $t variant's events are not up: $(infra "$t")"
done
scrape_loop &
SCRAPER=$!
PIDS+=("$SCRAPER")

# ---- measure ------------------------------------------------------------------------------
log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds deps "$KAFKA_PID $(pg_pids)"
stop_pid "$SCRAPER"

# ---- check that the recording variants recorded everything -----------------------------
for t in sqlite postgres; do
  # (the history's own queue: the events' has a "queued" too)
  for _ in $(seq 150); do infra "$t" | grep -q '"history":{[^}]*"queued":0,' && break; sleep 0.2; done
  i=$(infra "$t")
  printf '{"phase":"records","target":"%s","infra":%s}\n' "$t" "$i" >>"$RAW"
  node -e '
    const i = JSON.parse(process.argv[1]); const t = process.argv[2];
    const h = i.history, e = i.events.counts;
    const bad = [];
    if (!h.up || h.dropped || h.write_errors || h.queued) bad.push(`history ${JSON.stringify(h)}`);
    if (e.failed || e.rejected || e.dropped || e.fallback_written || e.produced !== e.delivered) bad.push(`events ${JSON.stringify(e)}`);
    if (h.written < 1000) bad.push(`only ${h.written} history rows`);
    if (bad.length) { console.error(`the ${t} variant lost records: ${bad.join("; ")}`); process.exit(1); }
    console.error(`[bench] ${t}: ${h.written} history rows in ${h.batches} batches, ${e.delivered} events delivered`);
  ' "$i" "$t" || die "records were lost (see above)"
done
stop_all

# ---- report -------------------------------------------------------------------------------
write_report records-latest "$BENCH/report-records.mjs" "$(bench_meta \
  postgres="$("$PG_BIN/postgres" --version | awk '{print $3}')" librdkafka="$(dpkg-query -W -f='${Version}' librdkafka1 2>/dev/null || echo unknown)")"
