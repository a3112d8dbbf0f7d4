#!/usr/bin/env bash
# sluice benchmark: the upstream simulator directly, through nginx (plain reverse proxy) and
# through sluice, all measured in one run on one machine. What `make bench` runs.
#
#   1. non-streaming: wrk POSTs a small chat completion (max_tokens 8) to each target,
#      interleaved, ROUNDS times; requests/s, latency p50/p99, CPU per request of each proxy.
#   2. streaming: bench/streams.mjs opens STREAMS concurrent streaming requests to each
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
trap 'echo "bench: command failed (line $LINENO): $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
SRC_BIN=${SLUICE_BIN:-$ROOT/build/sluice}
WORKERS=${WORKERS:-$(nproc)}
SIM_WORKERS=${SIM_WORKERS:-1}
ROUNDS=${ROUNDS:-3}
WRK_THREADS=${WRK_THREADS:-1}
WRK_CONNS=${WRK_CONNS:-32}
WRK_DURATION=${WRK_DURATION:-10}
WARMUP=${WARMUP:-2}
LIGHT_DURATION=${LIGHT_DURATION:-3}
STREAMS=${STREAMS:-1000}
STREAM_ROUNDS=${STREAM_ROUNDS:-3}
STREAM_TOKENS=${STREAM_TOKENS:-50}
STREAM_TTFT=${STREAM_TTFT:-200ms}
STREAM_INTER_TOKEN=${STREAM_INTER_TOKEN:-20ms}
STREAM_JITTER=${STREAM_JITTER:-0}
START_TIMEOUT=${START_TIMEOUT:-15}   # seconds for a component to start listening
KEY=sk-bench-0123456789abcdef
CLK_TCK=$(getconf CLK_TCK)
CHAT_PATH=/v1/chat/completions
RESULTS_DIR="$BENCH/results"

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }

for tool in wrk nginx node curl getconf ps timeout; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed (wrk, nginx, node are needed)"
done
[[ -x "$SRC_BIN" ]] || die "sluice binary $SRC_BIN not found; run 'make build' first"

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
TMP=$(mktemp -d /tmp/sluice-bench.XXXXXX)
PIDS=()   # everything we started and have not stopped yet

stop_pid() {  # stop_pid PID: TERM, wait up to 5s, then KILL
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local pid
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$pid"; done
  PIDS=()
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_all
  if [[ $rc -ne 0 ]]; then
    echo "bench: logs kept in $TMP" >&2
    for f in "$TMP"/*.err "$TMP"/*.out "$TMP"/nginx/error.log; do
      [[ -s "$f" ]] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
    done
  elif [[ "${KEEP_TMP:-0}" == 1 ]]; then
    echo "bench: temp dir kept: $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A private copy of the binary: the same build for the whole run even if build/ is
# rebuilt meanwhile.
cp "$SRC_BIN" "$TMP/sluice"
BIN="$TMP/sluice"
"$BIN" --help >/dev/null 2>&1 || die "$SRC_BIN does not run (being rebuilt?)"

# File descriptors: a stream holds one client socket at the proxy, one upstream socket, and
# one socket each at the client and the simulator.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [[ "$NOFILE" != unlimited && "$NOFILE" -lt $((2 * STREAMS + 1024)) ]]; then
  die "ulimit -n is $NOFILE, too low for STREAMS=$STREAMS (need $((2 * STREAMS + 1024)))"
fi

NGINX_NOFILE=65536
[[ "$NOFILE" == unlimited ]] || NGINX_NOFILE=$NOFILE

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# wait_line FILE REGEX PID NAME: wait until FILE has a line matching REGEX; prints it.
wait_line() {
  local file=$1 re=$2 pid=$3 name=$4 i line
  for ((i = 0; i < START_TIMEOUT * 10; i++)); do
    if line=$(grep -m1 -E "$re" "$file" 2>/dev/null); then
      printf '%s\n' "$line"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || die "$name exited while starting (see $file)"
    sleep 0.1
  done
  die "$name did not print '$re' within ${START_TIMEOUT}s (see $file)"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- components -------------------------------------------------------------------------

start_sim() {  # start_sim EXTRA_ARGS...  -> SIM_PID, SIM_PORT
  rm -f "$TMP/sim.out" "$TMP/sim.err"   # so that no line from an earlier start is read
  "$BIN" sim --host 127.0.0.1 --port 0 --workers "$SIM_WORKERS" --max-in-flight 100000 \
    "$@" >"$TMP/sim.out" 2>"$TMP/sim.err" &
  SIM_PID=$!
  PIDS+=("$SIM_PID")
  local line
  line=$(wait_line "$TMP/sim.out" 'sluice-sim listening on' "$SIM_PID" simulator)
  SIM_PORT=${line##*:}
  log "simulator pid $SIM_PID on 127.0.0.1:$SIM_PORT ($*)"
}

start_nginx() {  # -> NGINX_PID (master), NGINX_WORKER_PIDS, NGINX_PORT
  local ngx="$TMP/nginx" i
  rm -rf "$ngx"
  mkdir -p "$ngx/tmp"
  NGINX_PORT=$(free_port)
  cat >"$ngx/nginx.conf" <<EOF
# generated by bench/run.sh: a plain reverse proxy in front of the simulator
daemon off;
master_process on;
worker_processes $WORKERS;
worker_rlimit_nofile $NGINX_NOFILE;
pid $ngx/nginx.pid;
error_log $ngx/error.log warn;
events {
    worker_connections 16384;
}
http {
    access_log off;
    client_body_temp_path $ngx/tmp/client_body;
    proxy_temp_path $ngx/tmp/proxy;
    fastcgi_temp_path $ngx/tmp/fastcgi;
    uwsgi_temp_path $ngx/tmp/uwsgi;
    scgi_temp_path $ngx/tmp/scgi;
    keepalive_requests 1000000;
    upstream sim {
        server 127.0.0.1:$SIM_PORT;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
        location / {
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
  nginx -t -q -p "$ngx" -c "$ngx/nginx.conf" -e "$ngx/error.log" >"$TMP/nginx-test.err" 2>&1 ||
    die "nginx rejects its generated config: $(cat "$TMP/nginx-test.err")"
  rm -f "$TMP/nginx.out" "$TMP/nginx.err"
  nginx -p "$ngx" -c "$ngx/nginx.conf" -e "$ngx/error.log" >"$TMP/nginx.out" 2>"$TMP/nginx.err" &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  for ((i = 0; i < START_TIMEOUT * 10; i++)); do
    kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited while starting (see $ngx/error.log)"
    NGINX_WORKER_PIDS=$({ ps -o pid= --ppid "$NGINX_PID" || true; } | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
    if port_open "$NGINX_PORT" && [[ $(wc -w <<<"$NGINX_WORKER_PIDS") -ge $WORKERS ]]; then
      log "nginx master pid $NGINX_PID, workers $NGINX_WORKER_PIDS on 127.0.0.1:$NGINX_PORT"
      return 0
    fi
    sleep 0.1
  done
  die "nginx did not listen on 127.0.0.1:$NGINX_PORT within ${START_TIMEOUT}s"
}

start_sluice() {  # -> SLUICE_PID, SLUICE_PORT
  local port line
  port=$(free_port)
  cat >"$TMP/sluice.yaml" <<EOF
# generated by bench/run.sh
listen: 127.0.0.1:$port
workers: $WORKERS
access_log: $TMP/access.log
timeouts:
  shutdown_grace: 1s
keys:
  - {name: bench, key: $KEY}
models:
  - alias: sluice-sim
    provider: openai
    base_url: http://127.0.0.1:$SIM_PORT/v1
EOF
  rm -f "$TMP/sluice.out" "$TMP/sluice.err"
  "$BIN" serve --config "$TMP/sluice.yaml" >"$TMP/sluice.out" 2>"$TMP/sluice.err" &
  SLUICE_PID=$!
  PIDS+=("$SLUICE_PID")
  line=$(wait_line "$TMP/sluice.err" 'sluice listening on' "$SLUICE_PID" sluice)
  SLUICE_PORT=${line##*:}
  log "sluice pid $SLUICE_PID on 127.0.0.1:$SLUICE_PORT ($WORKERS workers)"
}

start_all() {  # start_all SIM_ARGS...
  start_sim "$@"
  start_nginx
  start_sluice
}

# Sanity check: one request through each target answers 200.
check_targets() {
  local t url code
  for t in direct nginx sluice; do
    url=$(target_url "$t")
    rm -f "$TMP/check.out"
    code=$(curl -s -o "$TMP/check.out" -w '%{http_code}' -m 10 -X POST "$url" \
      -H 'content-type: application/json' -H "authorization: Bearer $KEY" \
      -d '{"model":"sluice-sim","messages":[{"role":"user","content":"hi"}],"max_tokens":8}') || true
    [[ "$code" == 200 ]] || die "$t ($url) answered HTTP $code: $(head -c 300 "$TMP/check.out")"
  done
}

target_url() {
  case $1 in
    direct) echo "http://127.0.0.1:$SIM_PORT$CHAT_PATH" ;;
    nginx) echo "http://127.0.0.1:$NGINX_PORT$CHAT_PATH" ;;
    sluice) echo "http://127.0.0.1:$SLUICE_PORT$CHAT_PATH" ;;
  esac
}

# CPU ticks (utime + stime, all threads) summed over pids.
cpu_ticks() {
  local f files=()
  for f in "$@"; do files+=("/proc/$f/stat"); done
  awk '{ sub(/^.*\) /, ""); s += $12 + $13 } END { print s + 0 }' "${files[@]}"
}

# Busy CPU ticks of the whole machine (all CPUs) from /proc/stat.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# CPU milliseconds (user + sys) of the shell's finished children, from a `times` output.
children_cpu_ms() {
  awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
                 printf "%d\n", t * 1000 }' "$1"
}

proxy_pids() {
  case $1 in
    direct) echo "$SIM_PID" ;;
    nginx) echo "$NGINX_WORKER_PIDS" ;;
    sluice) echo "$SLUICE_PID" ;;
  esac
}

# run_wrk TARGET CONNS SECONDS -> prints the BENCH line
run_wrk() {
  local t=$1 c=$2 d=$3 out="$TMP/wrk.out"
  BENCH_KEY=$KEY timeout $((d + 30)) wrk -t"$WRK_THREADS" -c"$c" -d"${d}s" --timeout 5s --latency \
    -s "$BENCH/chat.lua" "$(target_url "$t")" >"$out" 2>&1 || die "wrk against $t failed: $(cat "$out")"
  grep -m1 '^BENCH ' "$out" || die "no result line from wrk against $t: $(cat "$out")"
}

kv() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<<" $1"; }  # kv LINE KEY

RAW="$TMP/raw.jsonl"
: >"$RAW"

# ---- 1. non-streaming ---------------------------------------------------------------------
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); ulimit -n $NOFILE"
log "phase 1: non-streaming, $ROUNDS rounds x 3 targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s"
start_all --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
check_targets

TARGETS=(direct nginx sluice)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 3; k++)); do
    t=${TARGETS[$(((k + r - 1) % 3))]}   # rotate the order from round to round
    run_wrk "$t" "$WRK_CONNS" "$WARMUP" >/dev/null
    read -r -a pp <<<"$(proxy_pids "$t")"
    p0=$(cpu_ticks "${pp[@]}")
    s0=$(cpu_ticks "$SIM_PID")
    b0=$(busy_ticks)
    times >"$TMP/times0"
    line=$(run_wrk "$t" "$WRK_CONNS" "$WRK_DURATION")
    times >"$TMP/times1"
    b1=$(busy_ticks)
    p1=$(cpu_ticks "${pp[@]}")
    s1=$(cpu_ticks "$SIM_PID")
    wrk_ms=$(($(children_cpu_ms "$TMP/times1") - $(children_cpu_ms "$TMP/times0")))
    req=$(kv "$line" requests)
    dur=$(kv "$line" duration_us)
    errs=$(($(kv "$line" err_connect) + $(kv "$line" err_read) + $(kv "$line" err_write) +
      $(kv "$line" err_status) + $(kv "$line" err_timeout)))
    light_p50=null light_p99=null light_req=null
    if [[ "$LIGHT_DURATION" -gt 0 ]]; then
      lline=$(run_wrk "$t" 1 "$LIGHT_DURATION")
      light_p50=$(kv "$lline" p50_us) light_p99=$(kv "$lline" p99_us) light_req=$(kv "$lline" requests)
      errs=$((errs + $(kv "$lline" err_connect) + $(kv "$lline" err_read) + $(kv "$lline" err_write) +
        $(kv "$lline" err_status) + $(kv "$lline" err_timeout)))
    fi
    printf '{"phase":"nonstream","round":%d,"target":"%s","requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"errors":%d,"proxy_ticks":%d,"sim_ticks":%d,"light_requests":%s,"light_p50_us":%s,"light_p99_us":%s,"wrk_cpu_ms":%d,"busy_ticks":%d}\n' \
      "$r" "$t" "$req" "$dur" "$(kv "$line" p50_us)" "$(kv "$line" p90_us)" "$(kv "$line" p99_us)" \
      "$(kv "$line" max_us)" "$errs" $((p1 - p0)) $((s1 - s0)) "$light_req" "$light_p50" "$light_p99" \
      "$wrk_ms" $((b1 - b0)) >>"$RAW"
    log "round $r $t: $req requests in $((dur / 1000)) ms, p50 $(kv "$line" p50_us) us, p99 $(kv "$line" p99_us) us, errors $errs; cpu ticks: proxy $((p1 - p0)), sim $((s1 - s0)), wrk $((wrk_ms * CLK_TCK / 1000)), machine $((b1 - b0))"
  done
done
stop_all   # sluice flushes its access log when it stops
ACCESS_LINES=$(wc -l <"$TMP/access.log" 2>/dev/null || echo 0)
ACCESS_NON200=$(grep -vc '"status":200,' "$TMP/access.log" 2>/dev/null || true)
ACCESS_STATUSES=$({ grep -o '"status":[0-9]*' "$TMP/access.log" 2>/dev/null || true; } | sort | uniq -c |
  awk '{ sub(/"status":/, "", $2); printf "%s\"%s\":%d", (n++ ? "," : ""), $2, $1 }')
printf '{"phase":"access_log","lines":%d,"non200":%d,"statuses":{%s}}\n' "$ACCESS_LINES" "${ACCESS_NON200:-0}" \
  "$ACCESS_STATUSES" >>"$RAW"
rm -f "$TMP/access.log"

# ---- 2. streaming -----------------------------------------------------------------------
log "phase 2: streaming, $STREAM_ROUNDS rounds x 3 targets, $STREAMS concurrent streams of $STREAM_TOKENS tokens"
for ((r = 1; r <= STREAM_ROUNDS; r++)); do
  # Fresh processes every round: the idle RSS baseline is that of a process that has not
  # yet held thousands of streams (allocators keep freed memory), and rounds are alike.
  stop_all
  start_all --ttft "$STREAM_TTFT" --inter-token "$STREAM_INTER_TOKEN" --jitter "$STREAM_JITTER" \
    --default-output-tokens "$STREAM_TOKENS"
  check_targets
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
    sline=$(timeout 150 node "$BENCH/streams.mjs" --url "$(target_url "$t")" --n "$STREAMS" \
      --key "$KEY" --max-tokens "$STREAM_TOKENS" --timeout-ms 60000 --rss-pid "$rss" \
      --label "$t" 2>"$TMP/streams.err") || die "streams.mjs against $t failed: $(cat "$TMP/streams.err")"
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
GIT_REV=$(GIT_OPTIONAL_LOCKS=0 git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(GIT_OPTIONAL_LOCKS=0 git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  GIT_REV="$GIT_REV (with uncommitted changes)"
fi
export BENCH_META
BENCH_META=$(node -e 'console.log(JSON.stringify({
  date: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
  nproc: Number(process.argv[1]), cpu: process.argv[2], kernel: process.argv[3], git: process.argv[4],
  binary_mtime: process.argv[5], nginx: process.argv[6], wrk: process.argv[7], node: process.version,
  workers: Number(process.argv[8]), sim_workers: Number(process.argv[9]), rounds: Number(process.argv[10]),
  wrk_threads: Number(process.argv[11]), wrk_conns: Number(process.argv[12]),
  wrk_duration: Number(process.argv[13]), warmup: Number(process.argv[14]),
  light_duration: Number(process.argv[15]), streams: Number(process.argv[16]),
  stream_rounds: Number(process.argv[17]), stream_tokens: Number(process.argv[18]),
  stream_ttft: process.argv[19], stream_inter_token: process.argv[20],
  stream_jitter: process.argv[21], clk_tck: Number(process.argv[22]), nofile: process.argv[23],
  load_start: process.argv[24], load_end: process.argv[25],
}))' "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" "$(uname -r)" "$GIT_REV" \
  "$(date -u -r "$SRC_BIN" +%Y-%m-%dT%H:%M:%SZ)" "$({ nginx -v 2>&1 || true; } | sed 's/.*: //')" \
  "$({ wrk -v 2>&1 || true; } | awk 'NR == 1 {print $2}')" "$WORKERS" "$SIM_WORKERS" "$ROUNDS" "$WRK_THREADS" \
  "$WRK_CONNS" "$WRK_DURATION" "$WARMUP" "$LIGHT_DURATION" "$STREAMS" "$STREAM_ROUNDS" \
  "$STREAM_TOKENS" "$STREAM_TTFT" "$STREAM_INTER_TOKEN" "$STREAM_JITTER" "$CLK_TCK" "$NOFILE" \
  "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)")

mkdir -p "$RESULTS_DIR"
node "$BENCH/report.mjs" "$RAW" >"$TMP/report.md"
cp "$TMP/report.md" "$RESULTS_DIR/latest.md"
{ printf '{"phase":"meta","meta":%s}\n' "$BENCH_META"; cat "$RAW"; } >"$RESULTS_DIR/latest.jsonl"
cat "$TMP/report.md"
log "written $RESULTS_DIR/latest.md and latest.jsonl"
