#!/usr/bin/env bash
# A fleet of sluice instances on one host behind nginx (docs/deploy.md, "A cluster on one host").
#
#   deploy/cluster.sh up N       start N instances and nginx in front (more or fewer: as scale)
#   deploy/cluster.sh scale N    add or remove instances until N run, without failing a request
#   deploy/cluster.sh restart    replace every instance in place, one at a time, without failing a request
#   deploy/cluster.sh down       stop everything (instances drain first)
#   deploy/cluster.sh status     one line per instance: id, pid, ports, readiness
#
# The instances share what the configuration names (redis.url, history.database_url, the
# event brokers): one Redis, one database, one event stream. Each has its own instance name
# (<CLUSTER_NAME>-<id>), data directory, access log and ports, all under the state directory
# (instances/<id>/, kept after the instance stops; ids are never reused).
#
# Safe order. Scale-out: start, wait for /ready, then add to nginx and reload. Scale-in:
# remove from nginx, reload, wait until nginx's workers from before the reload have exited
# (they finish the requests they were serving, streams included), then SIGTERM the instance
# (it drains) and wait for it to exit. A restart replaces each process in place, one at a
# time, on its own port (cmd_restart): capacity never drops, and nginx is not reloaded.
#
# Settings (environment):
#   SLUICE_BIN        the gateway binary                 (build/sluice)
#   SLUICE_CONFIG     the configuration every instance runs (config/sluice.example.yaml)
#   CLUSTER_DIR       state: pid files, logs, nginx's files (.cluster)
#   CLUSTER_NAME      instance name prefix                (sluice)
#   NGINX_LISTEN      where nginx listens                  (127.0.0.1:8080)
#   NGINX_BIN         nginx                                (nginx on PATH, else /usr/sbin/nginx)
#   INSTANCE_HOST     the instances' listen address        (127.0.0.1)
#   REQUEST_TIMEOUT   nginx's read/send timeouts            (600s)
#   WAIT_SECONDS      how long a step may wait (ready, nginx's old workers, a drain) (120)
# The instances take free ports (their listeners bind port 0); the ports they got are read
# from their output and kept in the state directory. Every other SLUICE_* variable reaches
# the instances as it is (SLUICE_REDIS_URL, SLUICE_DATABASE_URL...).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
BIN="${SLUICE_BIN:-$repo/build/sluice}"
CONFIG="${SLUICE_CONFIG:-$repo/config/sluice.example.yaml}"
DIR="${CLUSTER_DIR:-$repo/.cluster}"
NAME="${CLUSTER_NAME:-sluice}"
LISTEN="${NGINX_LISTEN:-127.0.0.1:8080}"
HOST="${INSTANCE_HOST:-127.0.0.1}"
TIMEOUT="${REQUEST_TIMEOUT:-600s}"
[[ "$TIMEOUT" =~ ^([0-9]+)s$ ]] || { echo "cluster: REQUEST_TIMEOUT must be seconds, like 600s (got '$TIMEOUT')" >&2; exit 2; }
TIMEOUT_S="${BASH_REMATCH[1]}"
WAIT="${WAIT_SECONDS:-120}"
NGINX="${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}"

say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

mkdir -p "$DIR/instances" "$DIR/nginx"
DIR="$(cd "$DIR" && pwd)"
CONFIG="$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")"
# One change at a time: a second run waits for the first.
exec 9>"$DIR/lock"
flock 9

# A pid of ours still running: alive, and still a `sluice serve` or nginx (not a reused pid).
alive() {
  [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null || return 1
  local cmd
  cmd="$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true)"
  [[ "$cmd" == *" serve --config "* || "$cmd" == nginx* ]]
}
# host:port for URLs and nginx (an IPv6 host in brackets).
at() { [[ "$HOST" == *:* ]] && echo "[$HOST]:$1" || echo "$HOST:$1"; }
field() { cat "$DIR/instances/$1/$2" 2>/dev/null || true; }

# The ids of instances whose process runs, oldest first. An instance's directory outlives
# it (its logs stay); its pid file goes when it stops, or here when its process is gone
# (it crashed, or was killed).
running() {
  local id
  for id in $(ls -1 "$DIR/instances" 2>/dev/null | sort -n); do
    [[ -f "$DIR/instances/$id/pid" ]] || continue
    if alive "$(field "$id" pid)"; then
      echo "$id"
    else
      rm -f "$DIR/instances/$id/pid"
    fi
  done
}
# Instances in nginx's upstream list (the ids written there), in order.
listed() { [[ -f "$DIR/nginx/members" ]] && cat "$DIR/nginx/members" || true; }

wait_until() {  # wait_until SECONDS WHAT COMMAND...
  local limit="$1" what="$2" t=0
  shift 2
  until "$@"; do
    (( t++ >= limit * 10 )) && { say "gave up after ${limit}s waiting for $what"; return 1; }
    sleep 0.1
  done
}

ready() { curl -fsS -o /dev/null --max-time 2 "http://$(at "$(field "$1" admin_port)")/ready"; }

# Starts instance `id` and waits until it is ready. Its listeners take free ports (the
# ports it got are read from its output), unless `port` is given: then it shares that port
# with the instance serving it (--takeover, for a restart in place).
start_one() {
  local id="$1" port="${2:-0}" d="$DIR/instances/$1" takeover=()
  [[ "$port" == 0 ]] || takeover=(--takeover)
  mkdir -p "$d"
  (
    cd "$d"
    export SLUICE_INSTANCE="$NAME-$id" SLUICE_LISTEN="$(at "$port")" SLUICE_ADMIN_LISTEN="$(at 0)" \
      SLUICE_DATA_DIR="$d" SLUICE_ACCESS_LOG="$d/access.log"
    exec setsid "$BIN" serve --config "$CONFIG" "${takeover[@]}" >"$d/out.log" 2>"$d/err.log" </dev/null 9>&-
  ) &
  echo $! >"$d/pid"
  # (kill -0, not alive(): until it has exec'd, the child is still this shell.)
  listening() { grep -q "sluice listening on" "$d/err.log" 2>/dev/null || ! kill -0 "$(field "$id" pid)" 2>/dev/null; }
  wait_until 30 "instance $id to listen" listening || true
  if ! grep -q "sluice listening on" "$d/err.log" 2>/dev/null || ! alive "$(field "$id" pid)"; then
    say "instance $id did not start:"
    tail -n 20 "$d/err.log" >&2 || true
    kill -KILL "$(field "$id" pid)" 2>/dev/null || true
    rm -f "$d/pid"
    return 1
  fi
  sed -n 's/^sluice listening on .*:\([0-9]*\)$/\1/p' "$d/err.log" | tail -n 1 >"$d/port"
  sed -n 's/^sluice admin listening on .*:\([0-9]*\)$/\1/p' "$d/err.log" | tail -n 1 >"$d/admin_port"
  if [[ ! -s "$d/admin_port" ]] || ! wait_until "$WAIT" "instance $id to be ready" ready "$id"; then
    # Not left behind half-started: it would share a port, or be counted as a member.
    say "instance $id is not ready (no admin listener, or /ready never 200): stopped; its output: $d/err.log"
    stop_one "$id" >/dev/null 2>&1 || true
    return 1
  fi
  say "instance $NAME-$id ready on $HOST:$(field "$id" port) (admin $(field "$id" admin_port), pid $(field "$id" pid))"
}

# Stops an instance nginx no longer sends to, and waits for its exit. SIGINT drains like
# SIGTERM without its first phase (timeouts.drain_delay, for balancers that still send:
# nginx does not any more); in-flight requests get timeouts.shutdown_grace. SIGKILL only
# past WAIT_SECONDS.
stop_one() {
  local id="$1" pid
  pid="$(field "$id" pid)"
  if alive "$pid"; then
    kill -INT "$pid"
    gone() { ! alive "$pid"; }
    if ! wait_until "$WAIT" "instance $id to drain" gone; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$DIR/instances/$id/pid"
  say "instance $NAME-$id stopped"
}

nginx_pid() { cat "$DIR/nginx/nginx.pid" 2>/dev/null || true; }
nginx_workers() { ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ' || true; }

# nginx's files for the member list given (ids).
write_nginx() {
  local n="$DIR/nginx" id
  mkdir -p "$n/temp"
  : >"$n/upstreams.conf.new"
  for id in "$@"; do
    echo "server $(at "$(field "$id" port)") max_fails=2 fail_timeout=10s;" >>"$n/upstreams.conf.new"
  done
  mv "$n/upstreams.conf.new" "$n/upstreams.conf"
  printf '%s\n' "$@" >"$n/members"
  sed -e "s|@LISTEN@|$LISTEN|" -e "s|@UPSTREAMS@|$n/upstreams.conf|" -e "s|@TIMEOUT@|$TIMEOUT|" \
    "$here/nginx/sluice.conf" >"$n/sluice.conf"
  cat >"$n/nginx.conf" <<EOF
# Written by deploy/cluster.sh: the process settings; the proxy itself is sluice.conf.
daemon on;
pid $n/nginx.pid;
error_log $n/error.log warn;
worker_processes 2;
# Workers from before a reload finish their requests (streams too) within this: as long
# as a request may take.
worker_shutdown_timeout $((TIMEOUT_S + 5))s;
events { worker_connections 8192; }
http {
    access_log $n/access.log;
    client_body_temp_path $n/temp/body;
    proxy_temp_path $n/temp/proxy;
    fastcgi_temp_path $n/temp/fastcgi;
    uwsgi_temp_path $n/temp/uwsgi;
    scgi_temp_path $n/temp/scgi;
    include $n/sluice.conf;
}
EOF
  "$NGINX" -t -q -c "$n/nginx.conf" -p "$n" 2>"$n/test.log" || { cat "$n/test.log" >&2; die "nginx refused its configuration"; }
}

# Puts `ids` in nginx's upstream list; returns once no nginx worker from before is left,
# so nothing can send to an instance that left the list.
set_members() {
  local master old pid
  write_nginx "$@"
  master="$(nginx_pid)"
  if ! alive "$master"; then
    "$NGINX" -c "$DIR/nginx/nginx.conf" -p "$DIR/nginx" </dev/null >/dev/null 2>>"$DIR/nginx/error.log" 9>&-
    wait_until 10 "nginx to start" test -s "$DIR/nginx/nginx.pid"
    say "nginx on $LISTEN"
    return
  fi
  old="$(nginx_workers "$master")"
  kill -HUP "$master"
  for pid in $old; do
    gone() { ! alive "$pid"; }
    wait_until $((TIMEOUT_S + 10)) "nginx worker $pid (before the reload) to finish its requests" gone
  done
}

cmd_scale() {
  local want="$1" have=() id next members=()
  [[ "$want" =~ ^[0-9]+$ ]] || die "scale: expected a count, got '$want'"
  [[ -x "$BIN" ]] || die "no gateway binary at $BIN (make build)"
  mapfile -t have < <(running)
  # Scale out: new instances first, ready, then listed.
  if (( ${#have[@]} < want )); then
    next="$(cat "$DIR/next_id" 2>/dev/null || echo 1)"
    while (( ${#have[@]} < want )); do
      echo $((next + 1)) >"$DIR/next_id"  # first: a failed start never leaves its id to reuse
      if ! start_one "$next"; then
        # The ones started before it serve: listed, so that nothing runs unlisted.
        (( ${#have[@]} > 0 )) && set_members "${have[@]}"
        die "scale: stopped at ${#have[@]} instances"
      fi
      have+=("$next")
      next=$((next + 1))
    done
    set_members "${have[@]}"
    return
  fi
  # Scale in: the newest leave the list first, then drain.
  if (( ${#have[@]} == want )); then
    # Nothing to start or stop; nginx is made to list exactly these (after a crash, say).
    if (( want > 0 )) && { ! alive "$(nginx_pid)" || [[ "$(listed | tr '\n' ' ')" != "${have[*]} " ]]; }; then
      set_members "${have[@]}"
    fi
    return 0
  fi
  members=("${have[@]:0:want}")
  if (( want > 0 )); then
    set_members "${members[@]}"
  else
    stop_nginx
  fi
  for id in "${have[@]:want}"; do stop_one "$id"; done
}

# A restart in place: nginx's list and configuration do not change (a reload would close
# its clients' keep-alive connections as their responses end, which a client sending its
# next request at that moment sees as a reset). For each instance, the new process shares
# its port (SO_REUSEPORT, --takeover) and is ready before the old one gets SIGTERM: the old
# one answers with Connection: close during its drain delay while the kernel gives new
# connections to both, then it stops listening, finishes what it serves, and exits.
cmd_restart() {
  local olds=() id next port pid
  mapfile -t olds < <(running)
  (( ${#olds[@]} > 0 )) || die "restart: nothing runs (cluster.sh up N)"
  migrate_queues
  next="$(cat "$DIR/next_id" 2>/dev/null || echo 1)"
  # First, the binary and configuration on ports of their own: a process sharing a port
  # takes connections from the moment it binds, ready or not, so one that would never be
  # ready must not get there.
  echo $((next + 1)) >"$DIR/next_id"
  start_one "$next" || die "restart: the new process does not get ready; nothing was replaced"
  stop_one "$next" >/dev/null
  next=$((next + 1))
  for id in "${olds[@]}"; do
    port="$(field "$id" port)"
    pid="$(field "$id" pid)"
    echo $((next + 1)) >"$DIR/next_id"
    start_one "$next" "$port" || die "restart: $NAME-$id kept (its replacement did not start)"
    if alive "$pid"; then
      kill -TERM "$pid" || true
      gone() { ! alive "$pid"; }
      wait_until "$WAIT" "instance $id to drain" gone || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/instances/$id/pid"
    say "instance $NAME-$id replaced by $NAME-$next on port $port"
    [[ -f "$DIR/nginx/members" ]] && sed -i "s/^$id\$/$next/" "$DIR/nginx/members"
    next=$((next + 1))
  done
}

# What the kernel queued on a closing listener goes to the other listener of its port only
# with this setting (docs/deploy.md, "In-place upgrade"); set when this script may.
migrate_queues() {
  local f=/proc/sys/net/ipv4/tcp_migrate_req
  [[ -r "$f" && "$(cat "$f")" == 1 ]] && return 0
  if [[ -w "$f" ]] && echo 1 >"$f" 2>/dev/null; then
    say "set net.ipv4.tcp_migrate_req=1: connections queued on a closing listener move to its replacement"
  else
    say "net.ipv4.tcp_migrate_req is 0 and cannot be set here: a connection arriving as an old listener closes may be reset"
  fi
}

stop_nginx() {
  local master
  master="$(nginx_pid)"
  if alive "$master"; then
    kill -QUIT "$master"  # graceful: workers finish their requests
    gone() { ! alive "$master"; }
    wait_until "$WAIT" "nginx to stop" gone || kill -TERM "$master" 2>/dev/null || true
    say "nginx stopped"
  fi
  rm -f "$DIR/nginx/nginx.pid" "$DIR/nginx/members"
}

cmd_status() {
  local id master state
  master="$(nginx_pid)"
  if alive "$master"; then echo "nginx    pid $master on $LISTEN, members: $(listed | tr '\n' ' ')"; else echo "nginx    not running"; fi
  for id in $(running); do
    state="not ready"
    ready "$id" && state="ready"
    echo "$NAME-$id pid $(field "$id" pid) port $(field "$id" port) admin $(field "$id" admin_port) $state"
  done
}

case "${1:-}" in
  up) [[ $# -eq 2 ]] || die "usage: cluster.sh up N"; cmd_scale "$2" ;;
  scale) [[ $# -eq 2 ]] || die "usage: cluster.sh scale N"; cmd_scale "$2" ;;
  restart) cmd_restart ;;
  down) cmd_scale 0; stop_nginx ;;
  status) cmd_status ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
