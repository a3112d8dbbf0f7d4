-- wrk script: POST a small non-streaming chat completion (max_tokens 8) on every request.
-- The URL given to wrk carries the path (/v1/chat/completions). BENCH_KEY, when set, is
-- sent as a bearer token (the simulator and nginx ignore it; sluice checks it).
-- done() prints one machine-readable line that bench/run.sh parses.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
wrk.body = '{"model":"sluice-sim","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}'

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
