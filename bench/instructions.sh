#!/usr/bin/env bash
# Instructions per request of sluice under valgrind's callgrind: exact, unlike times on a
# shared machine, so a small change to the request path can be measured.
#
#   bench/instructions.sh [VARIANT...]     variants: off (no limits, the default config of
#                                          bench/run.sh), memory (three limits and a token
#                                          quota counted in memory), redis (the same limits
#                                          counted in a redis-server started here),
#                                          sqlite (the request history in a SQLite file),
#                                          events (every request an event to build/kafka-mock),
#                                          postgres (the history in a PostgreSQL 15 server
#                                          started here, itself under callgrind),
#                                          records (sqlite and events together, as the
#                                          sqlite variant of bench/records.sh);
#                                          default: off memory
#
# For each variant: one simulator (zero delays, 8 output tokens), `sluice serve` with one
# worker under callgrind with instrumentation off; WARMUP requests (one at a time, curl),
# then instrumentation on for REQUESTS requests, then a dump. Prints the instructions per
# request of the whole process (workers, the access log's thread, the history writer,
# librdkafka's threads: callgrind writes a file per thread, cg.VARIANT.1-NN), and the
# difference of each variant to the first. Knobs: REQUESTS (200), WARMUP (50), SLUICE_BIN
# (build/sluice), KAFKA_MOCK (kafka-mock beside the binary), SETTLE (1.5) and WINDOW (6)
# in seconds (below), KEEP_TMP (0: 1 keeps the callgrind files, cg.VARIANT.1-NN per
# thread and pg/cg.pg.PID per PostgreSQL process, for callgrind_annotate).
# Needs valgrind, curl and node; redis also redis-server; events and records the Kafka
# mock (cmake --build build --target kafka-mock); postgres PostgreSQL 15 and psql.
#
# Recording variants. Requests come one at a time (about 80/s under callgrind), while
# under load batches fill up; so that the window holds the batches a loaded gateway
# writes, each of them complete:
#  - history: batch_rows = REQUESTS and flush_interval 1h; the warm-up is REQUESTS +
#    WARMUP requests, so that the first batch (which prepares the statements) is written
#    before the window, and the window holds exactly the second batch of REQUESTS rows
#    (WARMUP < REQUESTS): the default batch size with the default REQUESTS;
#  - events: linger 1s (about 80 events a produce request, as linger 5ms at ~20k
#    requests/s gives); SETTLE (1.5 s) is waited after the warm-up, and the window lasts
#    WINDOW seconds (6), at least SETTLE after the last request, so that every event of
#    the window is delivered and its report served.
#  Time-driven work in the window (the access log's polls, librdkafka's timers and its
#  statistics every second) is counted too, and is far more per request here (200
#  requests in 6 s) than under load (~20,000/s). So librdkafka's main thread, where its
#  statistics and timers run, is shown apart, with the total without it: it took about
#  1.6 million instructions a second (50,000 per request here, varying by ~15,000 from
#  run to run), mostly computing the percentiles of its latency histograms.
# After the window the gateway's /infra must show every row written and every event
# delivered, or the variant fails.
# postgres: the server runs under callgrind as well; after the gateway's window, two
# more gateways outside callgrind write one and two batches, and the difference of their
# backends' instructions is printed on its own line ("postgres server: N instructions per
# row"): what the database server spends per row.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SLUICE_BIN:-$ROOT/build/sluice}
KAFKA_MOCK=${KAFKA_MOCK:-$(dirname "$BIN")/kafka-mock}
PG_BIN=${SLUICE_PG_BIN:-/usr/lib/postgresql/15/bin}
REQUESTS=${REQUESTS:-200}
WARMUP=${WARMUP:-50}
SETTLE=${SETTLE:-1.5}
WINDOW=${WINDOW:-6}
KEY=sk-bench-0123456789abcdef
VARIANTS=("$@")
[[ ${#VARIANTS[@]} -gt 0 ]] || VARIANTS=(off memory)
for tool in valgrind callgrind_control callgrind_annotate curl; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is missing" >&2; exit 1; }
done
[[ -x "$BIN" ]] || { echo "instructions.sh: no binary at $BIN (make build)" >&2; exit 1; }
wants() { [[ " ${VARIANTS[*]} " == *" $1 "* ]]; }
((WARMUP < REQUESTS)) || { echo "instructions.sh: WARMUP must be below REQUESTS (one history batch in the window)" >&2; exit 2; }

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
free_port() { node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

"$BIN" sim --host 127.0.0.1 --port 0 --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8 >"$TMP/sim.out" 2>&1 &
PIDS+=($!)
SIM_PORT=$(wait_port "$TMP/sim.out" 'listening on 127\.0\.0\.1:[0-9]+' "${PIDS[0]}")

REDIS_PORT=""
if wants redis; then
  command -v redis-server >/dev/null || { echo "instructions.sh: redis-server is missing" >&2; exit 1; }
  REDIS_PORT=$(free_port)
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$TMP" \
    --daemonize no --logfile '' >"$TMP/redis.out" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 100; i++)); do
    grep -q 'Ready to accept connections' "$TMP/redis.out" && break
    kill -0 "${PIDS[-1]}" 2>/dev/null || { echo "instructions.sh: redis-server exited: $(cat "$TMP/redis.out")" >&2; exit 1; }
    sleep 0.1
  done
fi

KAFKA_BOOTSTRAP=""
if wants events || wants records; then
  [[ -x "$KAFKA_MOCK" ]] || { echo "instructions.sh: no kafka-mock at $KAFKA_MOCK (build the kafka-mock target)" >&2; exit 1; }
  mkfifo "$TMP/kafka.in"
  "$KAFKA_MOCK" --bootstrap-file "$TMP/kafka.bootstrap" --topic sluice.requests --partitions 2 \
    <"$TMP/kafka.in" >"$TMP/kafka.out" 2>"$TMP/kafka.err" &
  PIDS+=($!)
  exec {KAFKA_IN}>"$TMP/kafka.in"  # held open: the mock exits on EOF
  for ((i = 0; i < 100; i++)); do [[ -s "$TMP/kafka.bootstrap" ]] && break; sleep 0.1; done
  KAFKA_BOOTSTRAP=$(cat "$TMP/kafka.bootstrap") || { echo "instructions.sh: kafka-mock did not start: $(cat "$TMP/kafka.err")" >&2; exit 1; }
fi

# PostgreSQL under callgrind, collecting from its start: each backend (a fork of the
# postmaster, one per connection) writes its own cg.pg.PID when it exits. Its cost per row
# is measured apart from the gateway's window (pg_row_cost below).
PG_PORT="" PG_AS=()
if wants postgres; then
  [[ -x "$PG_BIN/postgres" ]] || { echo "instructions.sh: PostgreSQL 15 is not installed ($PG_BIN)" >&2; exit 1; }
  command -v psql >/dev/null || { echo "instructions.sh: psql is missing" >&2; exit 1; }
  mkdir -p "$TMP/pg"
  if [[ $(id -u) -eq 0 ]]; then
    PG_AS=(runuser -u postgres --)
    chmod 711 "$TMP"
    chown -R postgres:postgres "$TMP/pg"
  fi
  "${PG_AS[@]}" "$PG_BIN/initdb" -D "$TMP/pg/data" -A trust -U postgres --no-sync >"$TMP/pg.init" 2>&1 ||
    { echo "instructions.sh: initdb failed: $(cat "$TMP/pg.init")" >&2; exit 1; }
  PG_PORT=$(free_port)
  "${PG_AS[@]}" valgrind --tool=callgrind --callgrind-out-file="$TMP/pg/cg.pg.%p" \
    "$PG_BIN/postgres" -D "$TMP/pg/data" -k "$TMP/pg" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c synchronous_commit=off >"$TMP/pg.out" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 600; i++)); do "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.1; done
  psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c 'CREATE DATABASE sluice' postgres
fi

config() {  # config VARIANT -> $TMP/VARIANT.yaml
  local history="{backend: none}"
  case $1 in
    sqlite|records) history="{backend: sqlite, path: $TMP/$1.history.db, batch_rows: $REQUESTS, flush_interval: 1h}" ;;
    postgres) history="{url: \"postgresql://postgres@127.0.0.1:$PG_PORT/sluice\", batch_rows: $REQUESTS, flush_interval: 1h}" ;;
  esac
  cat >"$TMP/$1.yaml" <<EOF
listen: 127.0.0.1:0
workers: 1
access_log: $TMP/$1.access.log
history: $history
admin: {public_status: true}
keys:
  - {name: bench, key: $KEY}
models:
  - alias: sluice-sim
    provider: openai
    base_url: http://127.0.0.1:$SIM_PORT/v1
EOF
  case $1 in
    off|sqlite|postgres) ;;
    events|records)
      echo "events: {brokers: \"$KAFKA_BOOTSTRAP\", topic: sluice.requests, linger: 1s, fallback_file: $TMP/$1.fallback.jsonl}" >>"$TMP/$1.yaml"
      ;;
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
    *) echo "instructions.sh: unknown variant $1 (off, memory, redis, sqlite, events, postgres, records)" >&2; exit 2 ;;
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

recording() { [[ $1 == sqlite || $1 == events || $1 == postgres || $1 == records ]]; }

# check VARIANT PORT: every row of the window written (the second batch), every event delivered.
check() {
  local infra
  infra=$(curl -s -m 10 "http://127.0.0.1:$2/infra")
  node -e '
    const [v, n, w] = [process.argv[2], +process.argv[3], +process.argv[4]];
    const i = JSON.parse(process.argv[1]), bad = [];
    if (["sqlite", "postgres", "records"].includes(v)) {
      const h = i.history;
      if (!h || h.written !== 2 * n || h.batches !== 2 || h.dropped || h.write_errors) bad.push(`history ${JSON.stringify(h)}`);
    }
    if (["events", "records"].includes(v)) {
      const e = i.events && i.events.counts;
      if (!e || e.delivered !== 2 * n + w || e.produced !== 2 * n + w || e.failed || e.rejected || e.fallback_written || e.dropped)
        bad.push(`events ${JSON.stringify(e)}`);
    }
    if (bad.length) { console.error(`instructions.sh: the ${v} variant did not record the window: ${bad.join("; ")}`); process.exit(1); }
  ' "$infra" "$1" "$REQUESTS" "$WARMUP"
}

# pg_row_cost: the PostgreSQL backend's instructions per row. A gateway outside callgrind
# (same config: batch_rows REQUESTS) writes k batches for k = 1, 2, is killed (SIGKILL:
# no flush at exit), and its backend's whole life is read from cg.pg.PID: the difference
# is one batch of REQUESTS rows, connecting and the migrations' check cancelling out.
pg_row_cost() {
  local k pid port backend totals=()
  for k in 1 2; do
    "$BIN" serve --config "$TMP/postgres.yaml" >"$TMP/pg-run$k.out" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    port=$(wait_port "$TMP/pg-run$k.out" 'sluice listening on 127\.0\.0\.1:[0-9]+' "$pid")
    ask "$port" $((k * REQUESTS))
    for ((i = 0; i < 300; i++)); do
      curl -s "http://127.0.0.1:$port/infra" | grep -q "\"written\":$((k * REQUESTS)),\"dropped\":0,\"write_errors\":0,\"batches\":$k," && break
      sleep 0.1
    done
    ((i < 300)) || { echo "instructions.sh: postgres run $k did not write its rows: $(curl -s "http://127.0.0.1:$port/infra")" >&2; exit 1; }
    backend=$(psql -At -h 127.0.0.1 -p "$PG_PORT" -U postgres -d sluice \
      -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'sluice'")
    [[ $backend =~ ^[0-9]+$ ]] || { echo "instructions.sh: not one sluice connection in PostgreSQL: $backend" >&2; exit 1; }
    kill -9 "$pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$backend" 2>/dev/null || break; sleep 0.1; done
    totals+=("$(total_of "$TMP/pg/cg.pg.$backend")")
  done
  echo $(((totals[1] - totals[0]) / REQUESTS))
}

total_of() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !t { gsub(",", "", $1); t = $1 } END { print t + 0 }'; }

first=""
for v in "${VARIANTS[@]}"; do
  config "$v"
  valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --callgrind-out-file="$TMP/cg.$v" \
    "$BIN" serve --config "$TMP/$v.yaml" >"$TMP/$v.out" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  port=$(wait_port "$TMP/$v.out" 'sluice listening on 127\.0\.0\.1:[0-9]+' "$pid")
  if [[ $v == events || $v == records ]]; then  # the producer connected
    for ((i = 0; i < 100; i++)); do curl -s "http://127.0.0.1:$port/infra" | grep -q '"up":true,"brokers"' && break; sleep 0.1; done
  fi
  warmup=$WARMUP
  recording "$v" && warmup=$((REQUESTS + WARMUP))  # the first batch (statements prepared) before the window
  ask "$port" "$warmup"
  if recording "$v"; then sleep "$SETTLE"; fi
  start=$(date +%s%N)
  callgrind_control -i on "$pid" >/dev/null 2>&1
  ask "$port" "$REQUESTS"
  if recording "$v"; then  # the window lasts WINDOW seconds, at least SETTLE after the last request
    left_ms=$((WINDOW * 1000 - ($(date +%s%N) - start) / 1000000))
    ((left_ms >= $(awk "BEGIN { print int($SETTLE * 1000) }"))) || { echo "instructions.sh: the $v requests took too long for WINDOW=$WINDOW s" >&2; exit 1; }
    sleep "$((left_ms / 1000)).$(printf '%03d' $((left_ms % 1000)))"
  fi
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  window_ns=$(($(date +%s%N) - start))
  if recording "$v"; then check "$v" "$port"; fi
  kill "$pid"
  # The dump holds what ran while instrumentation was on, one file per thread (the files
  # without a part number are written at exit). The first thread with librdkafka at its
  # root is librdkafka's main thread (rd_kafka_new starts it before any broker thread):
  # its statistics every second and its timers cost per second, not per request.
  total=0 rdk_main=0
  for f in $(ls "$TMP/cg.$v.1"-* | sort -t- -k2 -n); do
    n=$(total_of "$f")
    total=$((total + ${n:-0}))
    if ((rdk_main == 0)) && [[ $(callgrind_annotate --inclusive=yes --auto=no "$f" 2>/dev/null |
      awk '/file:function/ { getline; getline; print; exit }') == *librdkafka* ]]; then
      rdk_main=${n:-0}
    fi
  done
  per=$((total / REQUESTS))
  line="$v: $per instructions per request ($REQUESTS requests in $((window_ns / 1000000)) ms)"
  [[ -z "$first" ]] || line+=", $((per - first)) more than ${VARIANTS[0]}"
  if ((rdk_main > 0)); then
    line+="; $((rdk_main / REQUESTS)) of them in librdkafka's main thread (statistics, timers): without it $((per - rdk_main / REQUESTS))"
    [[ -z "$first" ]] || line+=", $((per - rdk_main / REQUESTS - first)) more than ${VARIANTS[0]}"
  fi
  [[ -n "$first" ]] || first=$per
  echo "$line"
  if [[ $v == postgres ]]; then
    pg_per=$(pg_row_cost)
    echo "postgres server: $pg_per instructions per row (the backend of the history's writer), $((per + pg_per)) with the gateway's"
  fi
done
