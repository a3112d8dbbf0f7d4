#!/usr/bin/env bash
# Two gateway binaries side by side on the non-streamed path, for a change of the request
# path that should cost nothing: the binary under test (SLUICE_BIN, default build/sluice)
# and a base (BASE_BIN, e.g. a build of the commit before the change), each in front of the
# same simulator with the same configuration, and nginx (plain reverse proxy) as the
# reference; measured ROUNDS times in a rotating order (wrk as in phase 1 of bench/run.sh).
# Reports requests/s and CPU per request of each, and the medians of the per-round ratios
# new / base and each / nginx. Writes bench/results/binaries-PROFILE-latest.md (raw: .jsonl).
#
#   BASE_BIN=/path/to/old/sluice bench/binaries.sh
#
# PROFILE (default full): full = auth, access log, metrics, and the limits of
# bench/limits.sh counted in memory (a request limit per key, a token bucket per tenant, a
# daily token quota per key; far above what a run sends, so every request passes, reserves
# and settles); minimal = auth, access log and metrics only. The history is off (its
# database would compete for the 2 cores; bench/records.sh measures it).
# Other knobs as in bench/run.sh: WORKERS, SIM_WORKERS, ROUNDS, WRK_*, WARMUP, LIGHT_DURATION.
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=${PROFILE:-full}
[[ -n "${BASE_BIN:-}" && -x "${BASE_BIN:-}" ]] || die "set BASE_BIN to the binary to compare with"
bench_setup wrk nginx node curl
cp "$BASE_BIN" "$TMP/sluice-base"

case $PROFILE in
  full) EXTRA=$(full_profile_yaml) ;;
  minimal) EXTRA='' ;;
  *) die "PROFILE is full or minimal" ;;
esac

TARGETS=(nginx base new)
log "machine: $(nproc) CPUs; base $BASE_BIN, new $SRC_BIN; profile $PROFILE"
start_sim --ttft 0 --inter-token 0 --jitter 0 --default-output-tokens 8
start_nginx
for t in base new; do
  sluice_config "$t" "$EXTRA"
  bin=$BIN
  [[ $t == base ]] && bin="$TMP/sluice-base"
  BIN=$bin start_sluice "$t"
  PID[$t]=$SLUICE_PID PORT[$t]=$SLUICE_PORT
done
check_targets "${TARGETS[@]}"

log "$ROUNDS rounds x ${#TARGETS[@]} targets, wrk -t$WRK_THREADS -c$WRK_CONNS -d${WRK_DURATION}s, then -c1 -d${LIGHT_DURATION}s"
measure_rounds
stop_all
for t in base new; do access_log_json "$TMP/$t.access.log" ",\"target\":\"$t\"" >>"$RAW"; done
rm -f "$TMP"/*.access.log

write_report "binaries-$PROFILE-latest" "$BENCH/report-binaries.mjs" "$(bench_meta profile="$PROFILE" \
  base_bin="$BASE_BIN" base_version="$("$TMP/sluice-base" --version 2>/dev/null || echo unknown)" extra="$EXTRA")"
