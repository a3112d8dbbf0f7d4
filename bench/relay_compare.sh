#!/usr/bin/env bash
# Two gateway binaries side by side on streams: resident memory per open stream and CPU per
# stream, each in front of the same simulator, ROUNDS alternating rounds of STREAMS
# concurrent streams (bench/streams.cpp). Used to compare the stream relay's designs (the
# pull loop against the four coroutines around a channel it replaced).
#
#   BASE_BIN=/path/to/old/sluice bench/relay_compare.sh        # SLUICE_BIN: the new one
#
# Knobs: STREAMS (2000), STREAM_TOKENS (50), ROUNDS (3), WORKERS (all cores).
# Memory per stream: (peak VmRSS - a fresh process's idle VmRSS) / the streams open at the peak.
set -Eeuo pipefail
source "$(dirname "$0")/lib.sh"
STREAMS=${STREAMS:-2000}
STREAM_TOKENS=${STREAM_TOKENS:-50}
[[ -n "${BASE_BIN:-}" && -x "$BASE_BIN" ]] || die "set BASE_BIN to the binary to compare with"
bench_setup node curl g++
build_stream_client

start_sim --ttft 200ms --inter-token 20ms --max-output-tokens 100000
declare -A PID PORT
# start_variant V: a fresh gateway for variant V (base or new) -> PID[V], PORT[V].
start_variant() {
  local v=$1 bin=$BIN line
  [[ $v == base ]] && bin=$BASE_BIN
  sluice_config "$v"
  sed -i '/^admin:/,+1d' "$TMP/$v.yaml"  # an older binary may not know the admin section
  "$bin" serve --config "$TMP/$v.yaml" >"$TMP/$v.out" 2>"$TMP/$v.err" &
  PID[$v]=$!
  PIDS+=("${PID[$v]}")
  line=$(wait_line "$TMP/$v.err" 'sluice listening on' "${PID[$v]}" "$v")
  PORT[$v]=${line##*:}
}

for ((r = 1; r <= ROUNDS; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)  # alternate which goes first
  for v in "${order[@]}"; do
    start_variant "$v"  # fresh each round: the idle figure is a new process's
    t0=$(cpu_ticks "${PID[$v]}")
    line=$(timeout 150 "$STREAM_CLIENT" --url "http://127.0.0.1:${PORT[$v]}$CHAT_PATH" --n "$STREAMS" \
      --key "$KEY" --max-tokens "$STREAM_TOKENS" --rss-pid "${PID[$v]}" --label "$v")
    t1=$(cpu_ticks "${PID[$v]}")
    stop_pid "${PID[$v]}"
    printf '{"round":%d,"variant":"%s","cpu_ticks":%d,"result":%s}\n' "$r" "$v" $((t1 - t0)) "$line" >>"$RAW"
    log "round $r $v: cpu $((t1 - t0)) ticks; $line"
  done
done

node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const tck = Number(process.argv[2]), n = Number(process.argv[3]);
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const out = {};
for (const v of ["base", "new"]) {
  const rs = rows.filter((r) => r.variant === v);
  // The growth over a fresh process'"'"'s idle, per stream open at the peak.
  const kbPerStream = rs.map((r) => (r.result.rss_peak_kb - r.result.rss_idle_kb) / r.result.max_streaming);
  const usPerStream = rs.map((r) => (r.cpu_ticks / tck) * 1e6 / n);
  out[v] = { rss_kib_per_open_stream: +med(kbPerStream).toFixed(1), cpu_us_per_stream: +med(usPerStream).toFixed(0),
             max_streaming: rs.map((r) => r.result.max_streaming),
             errors: rs.reduce((s, r) => s + r.result.errors, 0), rounds: rs.length };
}
out.ratio_new_to_base = { rss: +(out.new.rss_kib_per_open_stream / out.base.rss_kib_per_open_stream).toFixed(2),
                          cpu: +(out.new.cpu_us_per_stream / out.base.cpu_us_per_stream).toFixed(2) };
console.log(JSON.stringify(out, null, 1));
' "$RAW" "$CLK_TCK" "$STREAMS"
