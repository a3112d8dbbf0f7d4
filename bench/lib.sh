# Shared machinery of the benchmark scripts (bench/run.sh, limits.sh, routing.sh). Sourced, not
# run. The sourcing script sets `set -Eeuo pipefail` and sources this file, which:
#   - sets the defaults of the common knobs (WORKERS, SIM_WORKERS, ROUNDS, WRK_THREADS,
#     WRK_CONNS, WRK_DURATION, WARMUP, LIGHT_DURATION, START_TIMEOUT, SLUICE_BIN) and ROOT,
#     BENCH, KEY, CLK_TCK, CHAT_PATH, RESULTS_DIR; installs the ERR trap;
#   - defines log/die, pid tracking and stopping (PIDS, stop_pid, stop_all), the cleanup
#     trap, free_port, wait_line, port_open, start_sim, start_nginx, sluice_config,
#     start_sluice, check_targets, cpu_ticks, thread_ticks, thread_ticks_json, busy_ticks, children_cpu_ms, run_wrk, kv,
#     wrk_errors, measure_nonstream, measure_rounds, access_log_json, json_object, bench_meta, write_report.
# bench_setup then checks the tools, creates the temp dir TMP and the raw results file RAW,
# installs the traps, copies the binary (BIN) and raises `ulimit -n` (NOFILE, NGINX_NOFILE).
#
# target_url TARGET (-> URL) and proxy_pids TARGET (-> pids whose CPU is the proxy's),
# used by check_targets, run_wrk and measure_nonstream, are defined here for nginx and
# sluice variants in the arrays PID and PORT; a script may define its own after sourcing.

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
START_TIMEOUT=${START_TIMEOUT:-15}   # seconds for a component to start listening
KEY=sk-bench-0123456789abcdef
CLK_TCK=$(getconf CLK_TCK)
CHAT_PATH=/v1/chat/completions
RESULTS_DIR="$BENCH/results"
SCRIPT_NAME="bench/$(basename "$0")"

trap 'echo "bench: command failed (line $LINENO): $BASH_COMMAND" >&2' ERR

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'bench: FAILED: %s\n' "$*" >&2; exit 1; }

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

# bench_setup TOOLS...: checks the tools, makes TMP and RAW, installs the traps, copies the
# binary to BIN, raises `ulimit -n` (-> NOFILE, NGINX_NOFILE).
bench_setup() {
  local tool
  for tool in "$@" getconf ps timeout; do
    command -v "$tool" >/dev/null || die "'$tool' is not installed ($* are needed)"
  done
  [[ -x "$SRC_BIN" ]] || die "sluice binary $SRC_BIN not found; run 'make build' first"

  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  TMP=$(mktemp -d /tmp/sluice-bench.XXXXXX)
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # A private copy of the binary: the same build for the whole run even if build/ is
  # rebuilt meanwhile.
  cp "$SRC_BIN" "$TMP/sluice"
  BIN="$TMP/sluice"
  "$BIN" --help >/dev/null 2>&1 || die "$SRC_BIN does not run (being rebuilt?)"

  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  NOFILE=$(ulimit -n)
  NGINX_NOFILE=65536
  [[ "$NOFILE" == unlimited ]] || NGINX_NOFILE=$NOFILE

  RAW="$TMP/raw.jsonl"
  : >"$RAW"
}

build_stream_client() {  # -> STREAM_CLIENT: bench/streams.cpp built into the run's temp dir
  command -v g++ >/dev/null || die "'g++' is not installed (it builds bench/streams.cpp)"
  STREAM_CLIENT="$TMP/streams"
  g++ -O2 -std=c++20 -o "$STREAM_CLIENT" "$BENCH/streams.cpp" || die "bench/streams.cpp does not build"
}

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
# generated by $SCRIPT_NAME: a plain reverse proxy in front of the simulator
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

metric() {  # metric TARGET NAME_AND_LABELS: a value from the target's /metrics (PORT[TARGET])
  curl -s -m 10 "http://127.0.0.1:${PORT[$1]}/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print v }'
}

# sluice_config NAME [EXTRA_YAML [MODELS_YAML]] -> writes $TMP/NAME.yaml: WORKERS workers,
# auth on (KEY), access log on ($TMP/NAME.access.log), shutdown_grace 1s, the routes (one
# openai route sluice-sim to the simulator, or MODELS_YAML when given: the entries of the
# `models:` list, indented by two spaces), then EXTRA_YAML (more top-level keys), and no
# request history unless EXTRA_YAML has a history key.
sluice_config() {
  local name=$1 extra=${2:-} models=${3:-} port
  port=$(free_port)
  [[ -n "$models" ]] || models="  - alias: sluice-sim
    provider: openai
    base_url: http://127.0.0.1:$SIM_PORT/v1"
  cat >"$TMP/$name.yaml" <<EOF
# generated by $SCRIPT_NAME
listen: 127.0.0.1:$port
workers: $WORKERS
access_log: $TMP/$name.access.log
timeouts:
  shutdown_grace: 1s
  drain_delay: 0s
admin:
  public_status: true   # the bench reads /metrics and /infra on loopback
keys:
  - {name: bench, key: $KEY}
models:
$models
EOF
  [[ -z "$extra" ]] || printf '%s\n' "$extra" >>"$TMP/$name.yaml"
  # The request history is on by default (SQLite); these benchmarks measure the data path
  # and admission, so it is off unless EXTRA_YAML configures it (bench/records.sh does).
  [[ "$extra" == *"history:"* ]] || printf 'history: {backend: none}\n' >>"$TMP/$name.yaml"
}

# full_profile_yaml: the limits of the "full" profile (bench/binaries.sh, profile.sh),
# counted in memory: a request limit per key, a token bucket per tenant, a daily token quota
# per key, far above what a run sends, so every request passes, reserves and settles.
full_profile_yaml() {
  cat <<'EOF'
rate_limits:
  backend: memory
  requests:
    - {scope: key, limit: 1000000000, window: 1h}
    - {scope: tenant, algorithm: token_bucket, limit: 1000000000, window: 1m}
  tokens:
    - {scope: key, limit: 1000000000000, per: day}
EOF
}

# start_sluice [NAME] -> SLUICE_PID, SLUICE_PORT: serves $TMP/NAME.yaml (written by
# sluice_config; NAME defaults to sluice, whose config is written here), output in
# $TMP/NAME.out and NAME.err.
start_sluice() {
  local name=${1:-sluice} line
  [[ -n "${1:-}" ]] || sluice_config sluice
  rm -f "$TMP/$name.out" "$TMP/$name.err"
  "$BIN" serve --config "$TMP/$name.yaml" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SLUICE_PID=$!
  PIDS+=("$SLUICE_PID")
  line=$(wait_line "$TMP/$name.err" 'sluice listening on' "$SLUICE_PID" "$name")
  SLUICE_PORT=${line##*:}
  log "$name pid $SLUICE_PID on 127.0.0.1:$SLUICE_PORT ($WORKERS workers)"
}

# check_targets TARGET...: one request through each target answers 200.
check_targets() {
  local t url code
  for t in "$@"; do
    url=$(target_url "$t")
    rm -f "$TMP/check.out"
    code=$(curl -s -o "$TMP/check.out" -w '%{http_code}' -m 10 -X POST "$url" \
      -H 'content-type: application/json' -H "authorization: Bearer $KEY" \
      -d '{"model":"sluice-sim","messages":[{"role":"user","content":"hi"}],"max_tokens":8}') || true
    [[ "$code" == 200 ]] || die "$t ($url) answered HTTP $code: $(head -c 300 "$TMP/check.out")"
  done
}

# ---- measurement ------------------------------------------------------------------------

# CPU ticks (utime + stime, all threads) summed over pids.
cpu_ticks() {
  local f files=()
  for f in "$@"; do files+=("/proc/$f/stat"); done
  awk '{ sub(/^.*\) /, ""); s += $12 + $13 } END { print s + 0 }' "${files[@]}"
}

# "ROLE TICKS" lines: the CPU ticks of the pids' threads summed by role, the thread's name
# without its number (sluice-w0 and sluice-w1 are sluice-w, rdk:broker1 is rdk:broker).
thread_ticks() {
  local p
  for p in "$@"; do cat "/proc/$p/task/"*/stat 2>/dev/null || true; done |
    awk '{ n = $0; sub(/^[^(]*\(/, "", n); sub(/\).*$/, "", n); sub(/-?[0-9]+$/, "", n)
           r = $0; sub(/^.*\) /, "", r); split(r, f, " "); t[n] += f[12] + f[13] }
         END { for (k in t) print k, t[k] }'
}

# The JSON object {"ROLE":ticks,...} of what each role used between two thread_ticks
# outputs (roles whose threads all ended in between are left out).
thread_ticks_json() {
  awk 'NR == FNR { a[$1] = $2; next } { d[$1] = $2 - a[$1] }
       END { printf "{"; s = ""; for (k in d) { printf "%s\"%s\":%d", s, k, d[k]; s = "," } printf "}" }' "$1" "$2"
}

# Busy CPU ticks of the whole machine (all CPUs) from /proc/stat.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# CPU milliseconds (user + sys) of the shell's finished children, from a `times` output.
children_cpu_ms() {
  awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); t += a[1] * 60 + a[2] }
                 printf "%d\n", t * 1000 }' "$1"
}

# run_wrk TARGET CONNS SECONDS -> prints the BENCH line
run_wrk() {
  local t=$1 c=$2 d=$3 out="$TMP/wrk.out"
  BENCH_KEY=$KEY timeout $((d + 30)) wrk -t"$WRK_THREADS" -c"$c" -d"${d}s" --timeout 5s --latency \
    -s "$BENCH/chat.lua" "$(target_url "$t")" >"$out" 2>&1 || die "wrk against $t failed: $(cat "$out")"
  grep -m1 '^BENCH ' "$out" || die "no result line from wrk against $t: $(cat "$out")"
}

kv() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<<" $1"; }  # kv LINE KEY

wrk_errors() {  # wrk_errors LINE: connect + read + write + status + timeout errors
  echo $(($(kv "$1" err_connect) + $(kv "$1" err_read) + $(kv "$1" err_write) +
    $(kv "$1" err_status) + $(kv "$1" err_timeout)))
}

# measure_nonstream ROUND TARGET [EXTRA_NAME EXTRA_PIDS]: a WARMUP s warm-up, the measured
# WRK_DURATION s run with WRK_CONNS connections, then LIGHT_DURATION s with one; appends
# one "nonstream" JSON line to $RAW with wrk's figures and the CPU ticks, during the
# measured run, of the proxy (proxy_pids TARGET), the simulator, wrk and the machine, and,
# when EXTRA_NAME is given, of EXTRA_PIDS as "EXTRA_NAME_ticks"; "threads" splits the
# proxy's ticks by thread role (thread_ticks).
measure_nonstream() {
  local r=$1 t=$2 xname=${3:-} xpids=${4:-} pp xp p0 p1 s0 s1 b0 b1 x0=0 x1=0 line lline req dur errs wrk_ms extra=""
  local light_p50=null light_p99=null light_req=null
  run_wrk "$t" "$WRK_CONNS" "$WARMUP" >/dev/null
  read -r -a pp <<<"$(proxy_pids "$t")"
  read -r -a xp <<<"$xpids"
  p0=$(cpu_ticks "${pp[@]}")
  thread_ticks "${pp[@]}" >"$TMP/threads0"
  s0=$(cpu_ticks "$SIM_PID")
  [[ -z "$xname" ]] || x0=$(cpu_ticks "${xp[@]}")
  b0=$(busy_ticks)
  times >"$TMP/times0"
  line=$(run_wrk "$t" "$WRK_CONNS" "$WRK_DURATION")
  times >"$TMP/times1"
  b1=$(busy_ticks)
  p1=$(cpu_ticks "${pp[@]}")
  thread_ticks "${pp[@]}" >"$TMP/threads1"
  s1=$(cpu_ticks "$SIM_PID")
  [[ -z "$xname" ]] || x1=$(cpu_ticks "${xp[@]}")
  wrk_ms=$(($(children_cpu_ms "$TMP/times1") - $(children_cpu_ms "$TMP/times0")))
  req=$(kv "$line" requests)
  dur=$(kv "$line" duration_us)
  errs=$(wrk_errors "$line")
  if [[ "$LIGHT_DURATION" -gt 0 ]]; then
    lline=$(run_wrk "$t" 1 "$LIGHT_DURATION")
    light_p50=$(kv "$lline" p50_us) light_p99=$(kv "$lline" p99_us) light_req=$(kv "$lline" requests)
    errs=$((errs + $(wrk_errors "$lline")))
  fi
  [[ -z "$xname" ]] || extra=$(printf ',"%s_ticks":%d' "$xname" $((x1 - x0)))
  printf '{"phase":"nonstream","round":%d,"target":"%s","requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"errors":%d,"proxy_ticks":%d,"sim_ticks":%d,"light_requests":%s,"light_p50_us":%s,"light_p99_us":%s,"wrk_cpu_ms":%d,"busy_ticks":%d,"threads":%s%s}\n' \
    "$r" "$t" "$req" "$dur" "$(kv "$line" p50_us)" "$(kv "$line" p90_us)" "$(kv "$line" p99_us)" \
    "$(kv "$line" max_us)" "$errs" $((p1 - p0)) $((s1 - s0)) "$light_req" "$light_p50" "$light_p99" \
    "$wrk_ms" $((b1 - b0)) "$(thread_ticks_json "$TMP/threads0" "$TMP/threads1")" "$extra" >>"$RAW"
  log "round $r $t: $req requests in $((dur / 1000)) ms, p50 $(kv "$line" p50_us) us, p99 $(kv "$line" p99_us) us, errors $errs; cpu ticks: proxy $((p1 - p0)), sim $((s1 - s0)), ${xname:+$xname $((x1 - x0)), }wrk $((wrk_ms * CLK_TCK / 1000)), machine $((b1 - b0))"
}

# measure_rounds [EXTRA_NAME EXTRA_PIDS]: ROUNDS rounds of measure_nonstream over the
# targets of the array TARGETS, the order rotated from round to round (so no target is
# always first after a quiet moment); the extra arguments go to every measure_nonstream.
measure_rounds() {
  local r k
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < ${#TARGETS[@]}; k++)); do
      measure_nonstream "$r" "${TARGETS[$(((k + r - 1) % ${#TARGETS[@]}))]}" "$@"
    done
  done
}

# For scripts comparing nginx with sluice variants: each variant's pid and port in the
# associative arrays PID and PORT (a script may define its own target_url/proxy_pids).
declare -A PID PORT
target_url() {
  case $1 in
    nginx) echo "http://127.0.0.1:$NGINX_PORT$CHAT_PATH" ;;
    *) echo "http://127.0.0.1:${PORT[$1]}$CHAT_PATH" ;;
  esac
}
proxy_pids() {
  case $1 in
    nginx) echo "$NGINX_WORKER_PIDS" ;;
    *) echo "${PID[$1]}" ;;
  esac
}

# access_log_json FILE [EXTRA_JSON_FIELDS]: the "access_log" JSON line (line count, non-200
# count, counts by status) of a sluice access log.
access_log_json() {
  local file=$1 extra=${2:-} lines non200 statuses
  lines=$(wc -l <"$file" 2>/dev/null || echo 0)
  non200=$(grep -vc '"status":200,' "$file" 2>/dev/null || true)
  statuses=$({ grep -o '"status":[0-9]*' "$file" 2>/dev/null || true; } | sort | uniq -c |
    awk '{ sub(/"status":/, "", $2); printf "%s\"%s\":%d", (n++ ? "," : ""), $2, $1 }')
  printf '{"phase":"access_log"%s,"lines":%d,"non200":%d,"statuses":{%s}}\n' "$extra" "$lines" "${non200:-0}" "$statuses"
}

# ---- report -----------------------------------------------------------------------------

# json_object KEY=STRING | KEY:=NUMBER ... -> one JSON object, keys in the order given.
json_object() {
  node -e 'const o = {};
    for (const a of process.argv.slice(1)) {
      const m = /^([^:=]+)(:?=)([\s\S]*)$/.exec(a);
      o[m[1]] = m[2] === ":=" ? Number(m[3]) : m[3];
    }
    console.log(JSON.stringify(o));' "$@"
}

# bench_meta EXTRA_FIELDS... -> the run's metadata as JSON (json_object fields): date,
# machine, commit, binary, tool versions, the common knobs, EXTRA_FIELDS, CLK_TCK, ulimit -n,
# load average at the start (bench_setup) and now.
bench_meta() {
  local git_rev
  git_rev=$(GIT_OPTIONAL_LOCKS=0 git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [[ -n "$(GIT_OPTIONAL_LOCKS=0 git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    git_rev="$git_rev (with uncommitted changes)"
  fi
  json_object date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" nproc:="$(nproc)" \
    cpu="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" kernel="$(uname -r)" git="$git_rev" \
    binary_mtime="$(date -u -r "$SRC_BIN" +%Y-%m-%dT%H:%M:%SZ)" \
    nginx="$({ nginx -v 2>&1 || true; } | sed 's/.*: //')" \
    wrk="$({ wrk -v 2>&1 || true; } | awk 'NR == 1 {print $2}')" node="$(node -v)" \
    workers:="$WORKERS" sim_workers:="$SIM_WORKERS" rounds:="$ROUNDS" wrk_threads:="$WRK_THREADS" \
    wrk_conns:="$WRK_CONNS" wrk_duration:="$WRK_DURATION" warmup:="$WARMUP" light_duration:="$LIGHT_DURATION" \
    "$@" clk_tck:="$CLK_TCK" nofile="$NOFILE" load_start="$LOAD_START" load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
}

# write_report NAME REPORT_SCRIPT META_JSON: the Markdown report of $RAW to stdout and to
# $RESULTS_DIR/NAME.md, the raw lines (after a meta line) to $RESULTS_DIR/NAME.jsonl.
write_report() {
  local name=$1 script=$2
  mkdir -p "$RESULTS_DIR"
  BENCH_META=$3 node "$script" "$RAW" >"$TMP/report.md"
  cp "$TMP/report.md" "$RESULTS_DIR/$name.md"
  { printf '{"phase":"meta","meta":%s}\n' "$3"; cat "$RAW"; } >"$RESULTS_DIR/$name.jsonl"
  cat "$TMP/report.md"
  log "written $RESULTS_DIR/$name.md and $name.jsonl"
}
