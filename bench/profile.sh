#!/usr/bin/env bash
# Where the gateway's CPU goes on the non-streamed path (TARGET=nginx: the same for nginx as a
# plain proxy, the reference): one sluice (PROFILE full or minimal,
# the configurations of bench/binaries.sh) in front of the simulator, under wrk; while wrk
# runs, `perf record` samples the gateway's threads, then `perf stat` counts its system
# calls per request (raw_syscalls:sys_enter, and the failed ones by number: a receive that
# finds nothing to read is one). Writes bench/results/profile-PROFILE-latest.txt: requests,
# CPU per request, system calls per request by name, and the top symbols (self time).
#
#   PROFILE=full DURATION=10 bench/profile.sh
#
# Needs perf (Debian linux-perf) and the right to use it on this process (root, or
# kernel.perf_event_paranoid <= 1). Knobs: PROFILE, DURATION (s of the measured run),
# TOP (symbols listed), CALLGRAPH=1 (DWARF call graphs: adds the gateway's functions by
# inclusive share; FREQ_CALLGRAPH samples/s, default 499), WORKERS, SIM_WORKERS, WRK_CONNS,
# WARMUP as in bench/lib.sh.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=${PROFILE:-full}
TARGET=${TARGET:-sluice}
DURATION=${DURATION:-10}
TOP=${TOP:-40}
CALLGRAPH=${CALLGRAPH:-}   # 1: record call graphs (DWARF) and list the gateway's functions by inclusive share
FREQ=${FREQ:-1999}
[[ -z "$CALLGRAPH" ]] || FREQ=${FREQ_CALLGRAPH:-499}
bench_setup wrk node curl perf
[[ $TARGET == sluice || $TARGET == nginx ]] || die "TARGET is sluice or nginx"
case $PROFILE in
  full) EXTRA=$(full_profile_yaml) ;;
  minimal) EXTRA='' ;;
  *) die "PROFILE is full or minimal" ;;
esac

start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
if [[ $TARGET == nginx ]]; then
  start_nginx
  PIDLIST=$(tr ' ' ',' <<<"$NGINX_WORKER_PIDS")
  OUT="$RESULTS_DIR/profile-nginx-latest.txt"
else
  sluice_config sluice "$EXTRA"
  start_sluice sluice
  PID[sluice]=$SLUICE_PID PORT[sluice]=$SLUICE_PORT
  PIDLIST=$SLUICE_PID
  OUT="$RESULTS_DIR/profile-$PROFILE-latest.txt"
fi
# (With call graphs, perf's own unwinding costs the gateway CPU: a separate file.)
[[ -z "$CALLGRAPH" ]] || OUT="${OUT%-latest.txt}-callgraph-latest.txt"
check_targets "$TARGET"
run_wrk "$TARGET" "$WRK_CONNS" "$WARMUP" >/dev/null

# 1. CPU and samples.
log "perf record of $TARGET ($PIDLIST) for ${DURATION}s under wrk -c$WRK_CONNS"
c0=$(cpu_ticks ${PIDLIST//,/ })
perf record -q ${CALLGRAPH:+--call-graph dwarf,16384} -F "$FREQ" -p "$PIDLIST" -o "$TMP/perf.data" -- sleep "$DURATION" 2>"$TMP/perf.err" &
perf_pid=$!
line=$(run_wrk "$TARGET" "$WRK_CONNS" "$DURATION")
wait "$perf_pid" || die "perf record failed: $(cat "$TMP/perf.err")"
c1=$(cpu_ticks ${PIDLIST//,/ })
req=$(kv "$line" requests)
[[ "$req" -gt 0 ]] || die "wrk completed no request"

# 2. System calls, counted in a second run of the same length (perf stat's tracepoints).
log "perf stat of system calls for ${DURATION}s"
perf stat -x, -e 'raw_syscalls:sys_enter' -p "$PIDLIST" -o "$TMP/sys.total" -- sleep "$DURATION" &
stat_pid=$!
perf record -q -e 'raw_syscalls:sys_exit' -p "$PIDLIST" -o "$TMP/sys.data" -- sleep "$DURATION" 2>>"$TMP/perf.err" &
rec_pid=$!
line2=$(run_wrk "$TARGET" "$WRK_CONNS" "$DURATION")
wait "$stat_pid" "$rec_pid" || die "perf stat failed: $(cat "$TMP/perf.err")"
req2=$(kv "$line2" requests)

{
  echo "# bench/profile.sh TARGET=$TARGET PROFILE=$PROFILE, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $WORKERS workers, wrk -c$WRK_CONNS -d${DURATION}s"
  echo "requests: $req ($((req / DURATION))/s); CPU per request: $(awk -v t=$((c1 - c0)) -v r="$req" -v k="$CLK_TCK" 'BEGIN { printf "%.1f us", t / k * 1e6 / r }')"
  echo
  echo "## System calls per request (second run: $req2 requests)"
  awk -F, -v r="$req2" '$3 == "raw_syscalls:sys_enter" { printf "all: %.2f\n", $1 / r }' "$TMP/sys.total"
  # Each sample is one sys_exit: its id and its return value (negative: failed, -11 EAGAIN).
  perf script -i "$TMP/sys.data" -F trace 2>/dev/null |
    awk -v r="$req2" 'BEGIN { split("0 read 1 write 3 close 7 poll 9 mmap 11 munmap 28 madvise 48 shutdown 16 ioctl 20 writev 41 socket 42 connect 44 sendto 45 recvfrom 46 sendmsg 47 recvmsg 54 setsockopt 72 fcntl 202 futex 228 clock_gettime 232 epoll_wait 233 epoll_ctl 271 ppoll 281 epoll_pwait 283 timerfd_create 286 timerfd_settime 288 accept4 290 eventfd2 426 io_uring_enter", a, " "); for (i = 1; i < length(a); i += 2) name[a[i]] = a[i + 1] }
      $1 != "NR" { next } { id = $2; ret = $4
        if (id in name) id = name[id]; n[id]++; if (ret + 0 < 0) f[id " " ret]++ }
      END { for (k in n) printf "  syscall %s: %.2f per request\n", k, n[k] / r
            for (k in f) printf "  syscall %s failed with %s: %.2f per request\n", substr(k, 1, index(k, " ") - 1), substr(k, index(k, " ") + 1), f[k] / r }' |
    sort -t: -k2 -gr | awk 'NR <= 24'
  echo
  echo "## By object (self, all threads)"
  perf report -i "$TMP/perf.data" --no-children --sort dso -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' | awk 'NR <= 8'
  echo
  echo "## Top symbols (self, all threads)"
  perf report -i "$TMP/perf.data" --no-children --sort dso,symbol -g none --stdio 2>/dev/null |
    grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' | cut -c1-180 | awk -v n="$TOP" 'NR <= n'
  if [[ -n "$CALLGRAPH" ]]; then
    echo
    echo "## The gateway's own functions by inclusive share (self and callees; DWARF call graphs)"
    perf report -i "$TMP/perf.data" --children --sort symbol -g none --stdio 2>/dev/null |
      grep -v '^#' | grep -E 'sluice::' | sed 's/[ -]*$//' | cut -c1-200 | awk -v n="$TOP" 'NR <= n'
  fi
} >"$OUT"
cat "$OUT"
log "written to $OUT"
