#pragma once
// The one list of request filters, in the order they run (registry.cpp), and what they
// may use of the worker they serve.
#include <memory>

#include "filters/filter.hpp"

namespace sluice::config {
struct Config;
}
namespace sluice::limits {
class WorkerLimiter;
class Gate;
}  // namespace sluice::limits
namespace sluice::tokenizer {
class Counter;
}
namespace sluice::conversations {
class WorkerStore;
}
namespace sluice::http {
class Client;
}
namespace sluice::guard {
class Guards;
}
namespace sluice::cache {
class WorkerCache;
struct Counters;
class Flights;
}  // namespace sluice::cache

namespace sluice::filters {

struct Deps {
  const config::Config& cfg;
  limits::WorkerLimiter* limiter = nullptr;  // this worker's; null when no limit applies
  limits::Gate* gate = nullptr;              // shared by the workers; null when off
  const tokenizer::Counter* tokens = nullptr;
  bool count_prompts = false;  // token quotas apply: count prompts exactly when a bound is refused
  // This worker's view of the stored responses (shared: a pass may outlive the handler).
  std::shared_ptr<conversations::WorkerStore> conversations;
  // This worker's view of the response cache and the process's counters (null when no
  // route caches).
  std::shared_ptr<cache::WorkerCache> cache;
  cache::Counters* cache_counters = nullptr;
  cache::Flights* flights = nullptr;  // the generations in flight (coalescing), shared by the workers
  guard::Guards* guards = nullptr;    // the guardrails policies, compiled (shared by the workers)
  http::Client* client = nullptr;     // this worker's upstream client (a guard model's calls)
};

// A worker's chain: every filter whose policy is configured, in the order of the list.
Chain make_chain(const Deps& deps);

}  // namespace sluice::filters
