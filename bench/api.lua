-- wrk script of bench/api.sh: POST the JSON body in BENCH_BODY (one fixed body per run) on
-- every request; the URL given to wrk carries the path (/v1/chat/completions,
-- /v1/responses or /v1/embeddings). BENCH_KEY, when set, is sent as a bearer token (the
-- simulator and nginx ignore it; sluice checks it). done() prints the same machine-readable
-- line as bench/chat.lua, which bench/lib.sh parses (err_status = non-2xx answers).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
local body = os.getenv("BENCH_BODY")
if not body or body == "" then
  error("bench/api.lua: set BENCH_BODY to the JSON request body")
end
wrk.body = body

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
