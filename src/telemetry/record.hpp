#pragma once
// What sluice remembers of one request: the access-log line (and later the history row
// and the event) are all made from this. It never holds a secret.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/reason.hpp"

namespace sluice::telemetry {

// Not set, for a field whose values may be negative (num_gpu: -1 is "every layer").
inline constexpr std::int64_t kUnsetSigned = INT64_MIN;

// Fields declared as string_view point into state that outlives the access log (the
// immutable configuration and the gateway's tables), so recording a request copies no
// configuration strings; the rest are owned.
struct RequestRecord {
  std::int64_t unix_ms = 0;        // when the request arrived (wall clock)
  std::string request_id;
  std::string method;
  std::string client;              // the client's address (its proxies' X-Forwarded-For when trusted)
  std::string path;
  std::string_view key_name;       // configured key id, e.g. "prod-app"
  std::string key_masked;          // e.g. "sk-prod-***1a2b"
  std::string_view tenant;
  std::string_view tier;
  std::string alias;               // model as the client asked
  std::string_view model;          // real model sent upstream
  std::string_view provider;
  std::string_view backend;        // name of the backend (default host:port) that answered last
  int attempts = 0;                // upstream exchanges tried (more than 1: retries or fallbacks)
  std::string_view served_by;      // the alias whose backends answered, when not the one asked (canary, fallback)
  int status = 0;
  Reason reason = Reason::ok;
  std::string error;               // short message for local replies / failures
  int upstream_status = 0;
  bool stream = false;
  bool client_cancelled = false;
  double wall_ms = 0;
  double ttft_ms = -1;             // -1 = not applicable / no token
  double tokens_per_s = -1;
  std::int64_t prompt_tokens = -1;
  std::int64_t completion_tokens = -1;
  std::string_view instance;
  // Admission (empty / -1 when the request did not get that far or nothing applied).
  std::string_view limiter;        // where limits were counted: "redis" or "local"
  std::string_view priority;       // queue class the request was served in
  double queue_ms = -1;            // time waited in the concurrency gate's queue
  std::int64_t reserved_tokens = -1;
  // The response cache (filters/cache.cpp): "hit", "semantic" (a kept answer to a prompt
  // alike), "coalesced" (a shared generation), "miss", "refresh" (Cache-Control:
  // no-cache), "bypass" (a caching route, a request it does not take); empty: no cache.
  std::string_view cache;
  std::int64_t saved_tokens = -1;  // a hit: the tokens generating its answer cost
  std::int64_t saved_prompt_tokens = -1;  // of which prompt tokens
  // Estimated money at the route's price (models[].price; -1 without one): what the tokens
  // charged cost, and what the saved tokens would have.
  double cost_usd = -1;
  double saved_usd = -1;
  // Guardrails (filters/guardrails.cpp): what they found and did, guard::Verdict::summary
  // ("block:injection", "redact:email,phone"); empty when nothing was found.
  std::string guard;
  // Request options worth grouping by in the history (-1 = not set by the client).
  double temperature = -1;
  double top_p = -1;
  std::int64_t max_tokens = -1;    // max_completion_tokens / max_tokens / options.num_predict
  std::int64_t num_ctx = -1;       // Ollama-style options
  std::int64_t num_gpu = kUnsetSigned;  // (-1 is a value: every layer on the GPU)
  std::int64_t num_batch = -1;
  // False for a query of the records themselves (/history): the access log keeps its line,
  // the sinks (history, events) never see it. A failed authentication stays a record.
  bool to_sinks = true;
};

// The fields above, by event type: what the event stream sends.
enum class EventType : std::uint8_t { completed, rate_limited, auth_failed, error };
std::string_view to_string(EventType) noexcept;  // "request.completed"...
EventType event_type(const RequestRecord& r) noexcept;

// A consumer of finished requests besides the access log (history, events). consume()
// runs on the access log's thread, never on a worker; it must not block for long: it
// queues (or drops and counts) and returns.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void consume(const RequestRecord& r) = 0;
  // The same, with the record's JSON object (append_json) that the access log already
  // made: a sink that sends JSON need not make it again.
  virtual void consume(const RequestRecord& r, std::string_view json) {
    (void)json;
    consume(r);
  }
  // What the access log's thread took from its queue at once, in order; json[i] is
  // records[i]'s JSON (same size). A sink that queues can take its lock and wake its
  // thread once per batch instead of once per record.
  virtual void consume_batch(std::span<const RequestRecord> records, std::span<const std::string_view> json) {
    for (std::size_t i = 0; i < records.size(); ++i) consume(records[i], json[i]);
  }
};

// One JSON object, no trailing newline.
std::string to_json(const RequestRecord& r);
void append_json(std::string& out, const RequestRecord& r);

}  // namespace sluice::telemetry
