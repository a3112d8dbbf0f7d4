#pragma once
// State shared read-only by every worker (plus a few atomics), and the per-worker handler.
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "conversations/store.hpp"
#include "http/client.hpp"
#include "http/server.hpp"
#include "keys/keys.hpp"
#include "limits/gate.hpp"
#include "gateway/router.hpp"
#include "limits/limiter.hpp"
#include "telemetry/access_log.hpp"
#include "telemetry/metrics.hpp"
#include "tokenizer/tokenizer.hpp"

namespace sluice::history {
class History;
class AuditTable;
}
namespace sluice::cache {
class Cache;
}
namespace sluice::guard {
class Guards;
}
namespace sluice::events {
class EventSink;
}

namespace sluice::gateway {

struct BatchCounters;
class ControlStore;
class LiveRequests;

struct Shared {
  std::shared_ptr<const config::Config> cfg;  // as started; routes and backends come from router's table
  Router* router = nullptr;
  // The API keys in force (the file's; replaced by a reload). Each worker reads it through
  // its own keys::Registry::Reader.
  keys::Registry* keys = nullptr;
  ControlStore* control = nullptr;  // keys and drains at runtime (null: key_store off)
  // Reloads the configuration file (SIGHUP, POST /admin/reload): whether it was taken, and
  // what was reloaded or why not. Set by the gateway.
  std::function<std::pair<bool, std::string>()> reload;
  std::string instance;
  telemetry::AccessLog* access_log = nullptr;
  telemetry::Metrics* metrics = nullptr;
  history::History* history = nullptr;  // null when history.backend is none
  history::AuditTable* audit = nullptr;  // the admin API's audit trail (null: history.backend none)
  LiveRequests* live = nullptr;          // the requests in flight, here and in the fleet
  events::EventSink* events = nullptr;   // null when no Kafka brokers are configured
  // Runs the history's blocking queries off the workers.
  boost::asio::any_io_executor query_executor;
  limits::Limiter* limiter = nullptr;  // rate limits and token quotas
  limits::Gate* gate = nullptr;        // requests in flight, priority queue
  conversations::Store* conversations = nullptr;  // stored responses (Responses API)
  cache::Cache* cache = nullptr;                  // the response cache (routes opt in)
  guard::Guards* guards = nullptr;                // the guardrails policies (null: none configured)
  BatchCounters* embed_batches = nullptr;         // embeddings micro-batching (embed_batch.hpp)
  tokenizer::Counter tokens;           // exact BPE where rank files were found, else estimates
  bool count_prompts = false;          // token quotas apply: count prompts exactly at admission
  std::atomic<bool> draining{false};
  // steady_clock ticks after which streams still open are ended with a `shutting_down`
  // error event (0 = not draining); set a little before the server's grace period ends.
  std::atomic<std::int64_t> cut_streams_at{0};
  // The client-facing server (its connection counts for /metrics); set once it started.
  std::atomic<const http::Server*> server{nullptr};
  std::size_t max_connections = 0;  // the cap in force (limits.max_connections or auto)
};

// `admin_listener`: the handler of the admin listener, which serves /health, /ready,
// /metrics, /infra and /admin/usage/reconcile without a key, and nothing else.
http::Handler make_handler(Shared& shared, boost::asio::any_io_executor ex, bool admin_listener = false);

// GET /metrics (Prometheus text format) and GET /infra (JSON): status.cpp.
std::string render_metrics(const Shared& shared);
std::string render_infra(const Shared& shared);
// GET /admin/backends (JSON): every backend of the table in force, its state, whether drained.
std::string render_backends(const Shared& shared);
// GET /admin/routes (JSON): every route, its backends and its canary's weight in force.
std::string render_routes(const Shared& shared);
// GET /ready: whether this instance should get traffic (not draining, and not refusing
// every limited request because Redis is down under on_redis_down: closed), with the
// state of each part.
std::pair<bool, std::string> render_ready(const Shared& shared);

}  // namespace sluice::gateway
