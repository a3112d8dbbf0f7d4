#pragma once
// Routing state: the backends with their breakers and health, and an immutable table of
// routes built from a configuration. A reload builds a new table and swaps it in; requests
// in flight keep the table they started with; backends whose settings did not change keep
// their state (breaker window, health, in-flight count). See docs/routing.md.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/text.hpp"
#include "config/config.hpp"
#include "http/client.hpp"
#include "tokenizer/tokenizer.hpp"
#include "upstream/balancer.hpp"
#include "upstream/breaker.hpp"
#include "upstream/canary.hpp"
#include "upstream/health.hpp"
#include "upstream/adaptive.hpp"
#include "upstream/load.hpp"
#include "upstream/model_load.hpp"

namespace sluice::sim {
class SimServer;
}
namespace sluice::telemetry {
class Metrics;
}

namespace sluice::gateway {

using sluice::StringHash;

// A provider endpoint's breaker (provider + host:port), shared by its backends.
struct ProviderRuntime {
  std::string key;  // e.g. "anthropic://api.anthropic.com:443"
  config::BreakerConfig cfg;
  std::unique_ptr<upstream::Breaker> breaker;  // null when provider breakers are off
};

// One backend: where to connect and how to speak to it, with its live state. Shared by
// every route that names it.
struct BackendRuntime {
  std::string name;
  config::Backend cfg;  // as configured; for `simulated`, host/port of the embedded server
  config::Provider wire = config::Provider::openai;  // protocol spoken: openai, ollama or anthropic
  http::Target target;
  http::HeaderList credentials;  // Authorization: Bearer, or x-api-key + anthropic-version
  std::string label;             // host:port it connects to (/infra "address")
  // `name` and `cfg.model` as request records hold them: interned by the router, so they
  // outlive this backend (a record may still be in the access log's queue after a reload).
  std::string_view record_name, record_model;
  int metrics_backend = -1;
  std::unique_ptr<upstream::Breaker> breaker;  // null when breakers are off
  config::BreakerConfig breaker_cfg;
  config::HealthConfig health_cfg;  // a change replaces the backend (its health starts afresh)
  std::shared_ptr<ProviderRuntime> provider;   // its breaker null when provider breakers are off
  upstream::Health health;
  std::atomic<std::int64_t> in_flight{0};
  // An operator took it out of service (/admin/backends: drain): no new request goes
  // here; those in flight finish. Kept by name across reloads (Router::set_drained).
  std::atomic<bool> drained{false};
  std::unique_ptr<sim::SimServer> sim;  // the embedded simulator behind a `simulated` backend
  upstream::Load load;                   // its own load signals (cfg.load), read by the monitor thread
  upstream::AdaptiveConcurrency adaptive;  // its in-flight limit following its TTFT (cfg.adaptive)
  upstream::ModelLoad model_load;          // Ollama: the load options it last got, the reloads seen
  // The in-flight limit now: the adaptive one, else cfg.max_in_flight (0 = none).
  int max_in_flight() const noexcept { return adaptive.on() ? adaptive.limit() : cfg.max_in_flight; }

  BackendRuntime(std::string n, upstream::HealthSettings hs);
  ~BackendRuntime();
  // Whether a request may go here now (health, ejection, breakers not open, room). With
  // `despite_ejection`, an ejected backend counts as usable (see dispatch: passive
  // ejection steers traffic away, it never leaves a set with nothing to try).
  bool usable(std::chrono::steady_clock::time_point now, bool despite_ejection = false) const;
  std::string_view state_word(std::chrono::steady_clock::time_point now) const;  // for logs and /infra
  // Its memory (KV cache) at or above cfg.load.max_kv by a fresh reading (younger than
  // three intervals: an old or missing one says nothing).
  bool saturated(std::chrono::steady_clock::time_point now) const;
};

// Counters of one alias, kept across reloads.
struct RouteStats {
  std::atomic<std::uint64_t> retries{0}, fallbacks{0}, exhausted{0}, canned{0};
  // Overload (models[].overload): requests sent to the light model, or given the canned reply.
  std::atomic<std::uint64_t> overload_light{0}, overload_canned{0};
  std::atomic<std::uint64_t> canary_requests{0}, stable_requests{0}, rollbacks{0};
  std::atomic<bool> degraded{false};  // some backend of the route is not usable (for notices)
  // An operator's canary weight (/admin/routes: 0..100), instead of the configured one;
  // < 0: none. Kept by alias across reloads (Router::set_canary_weights).
  std::atomic<double> canary_weight{-1};
  // The canary's share in force: the operator's, else the configured one.
  double canary_share(const config::CanaryConfig& c) const noexcept {
    const double w = canary_weight.load(std::memory_order_relaxed);
    return w >= 0 ? w : c.weight;
  }
};

struct RouteRuntime {
  const config::Route* route = nullptr;  // inside the table's config
  std::string_view record_alias;         // route->alias, interned (see BackendRuntime)
  int metrics_model = -1;
  tokenizer::Encoding encoding = tokenizer::Encoding::cl100k_base;  // of the primary's model, for token quotas
  std::vector<std::shared_ptr<BackendRuntime>> members;
  std::shared_ptr<upstream::Balancer> balancer;
  const RouteRuntime* canary = nullptr;             // the canary's backend set
  std::shared_ptr<upstream::CanaryJudge> judge;     // with a canary
  std::vector<const RouteRuntime*> fallbacks;
  std::shared_ptr<RouteStats> stats;
  // Every wire that may serve a request for it: its backends', canary's and fallbacks'
  // (token quotas reserve the largest output bound among them).
  std::vector<config::Provider> wires;
  // Those of them whose route does not drop the fields its wires cannot honour (drop_params).
  std::vector<config::Provider> strict_wires;
};

struct RoutingTable {
  std::shared_ptr<const config::Config> cfg;
  std::unordered_map<std::string, RouteRuntime, StringHash, std::equal_to<>> routes;
  std::uint64_t version = 0;
  std::int64_t loaded_unix_ms = 0;

  const RouteRuntime* find(std::string_view alias) const {
    auto it = routes.find(alias);
    return it == routes.end() ? nullptr : &it->second;
  }
};

class Router {
 public:
  // Builds the first table (starting embedded simulators); throws std::runtime_error.
  Router(std::shared_ptr<const config::Config> cfg, telemetry::Metrics* metrics);
  ~Router();

  std::shared_ptr<const RoutingTable> table() const;
  std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }

  // Builds a table from `cfg` and swaps it in. Throws std::runtime_error (the old table
  // stays) when it cannot be built (an embedded simulator fails to start).
  void install(std::shared_ptr<const config::Config> cfg);

  // Active probes, the monitor (logs transitions, webhook notices): a thread of its own.
  void start();
  void stop();

  // Reload bookkeeping for /infra.
  void note_reload(bool ok, std::string message);
  // The backends drained by name (every other one undrained); names of no backend are
  // kept, for a table that has them later.
  void set_drained(std::unordered_set<std::string> names);
  std::unordered_set<std::string> drained() const;
  // Operators' canary weights by alias (every other route back to its configured weight).
  void set_canary_weights(std::unordered_map<std::string, double> weights);
  std::unordered_map<std::string, double> canary_weights() const;
  struct ReloadStatus {
    std::uint64_t ok = 0, failed = 0;
    std::string last_error;
    std::int64_t last_unix_ms = 0;
  };
  ReloadStatus reload_status() const;

  // Writes a notice to the log and, with routing.webhook_url, POSTs it (JSON).
  void notify(std::string event, std::string json_fields);
  std::vector<std::shared_ptr<BackendRuntime>> backends() const;  // by name
  // The routing families of GET /metrics, and the "routing" section of GET /infra.
  void render_metrics(std::string& out) const;
  void render_infra(std::string& out) const;
  std::vector<std::shared_ptr<ProviderRuntime>> providers() const;
  // Called (on the monitor thread) when every backend of a route becomes saturated, and
  // when one has room again: the concurrency gate then holds or releases the route's
  // requests. Set before start().
  void on_hold(std::function<void(const std::string& alias, bool held)> fn) { on_hold_ = std::move(fn); }
  // Called (monitor thread) when a backend's adaptive in-flight limit changes.
  void on_limit(std::function<void(const std::string& backend, int limit)> fn) { on_limit_ = std::move(fn); }

 private:
  void monitor_tick();
  void hold_tick();  // the routes whose every backend is saturated
  std::function<void(const std::string&, bool)> on_hold_;
  std::function<void(const std::string&, int)> on_limit_;
  using ProviderMap = std::unordered_map<std::string, std::shared_ptr<ProviderRuntime>>;
  std::shared_ptr<BackendRuntime> backend_for(const config::Config& cfg, const config::Route& route,
                                              const config::Backend& b, ProviderMap& providers);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  telemetry::Metrics* metrics_;
  mutable std::mutex mu_;
  std::shared_ptr<const RoutingTable> table_;
  std::atomic<std::uint64_t> version_{0};
  std::unordered_map<std::string, std::shared_ptr<BackendRuntime>> backends_;   // by name
  std::unordered_map<std::string, std::shared_ptr<ProviderRuntime>> providers_;  // by key
  std::unordered_map<std::string, std::shared_ptr<RouteStats>> stats_;          // by alias
  ReloadStatus reload_;
  std::unordered_set<std::string> interned_;  // never shrinks: strings records point to
  std::unordered_set<std::string> drained_;   // backend names (set_drained)
  std::unordered_map<std::string, double> canary_weights_;  // by alias (set_canary_weights)
};

upstream::BreakerSettings breaker_settings(const config::BreakerConfig& c);

}  // namespace sluice::gateway
