#pragma once
// Routes (`models`): an alias and its backends, balancing, retries, fallbacks, canary and
// breaker override. Declared in config/sections/models.cpp.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/backend.hpp"
#include "config/cache.hpp"
#include "config/routing.hpp"

namespace sluice::config {

// What a model's tokens cost, in USD per million (models[].price): the estimates of spend
// and savings in the metrics and records.
struct Price {
  double input = 0;   // prompt tokens
  double output = 0;  // completion tokens
};

// Embeddings requests to one backend within `window` of each other sent as one call, up
// to max_inputs inputs (models[].embedding_batch; off without it).
struct EmbeddingBatch {
  std::chrono::milliseconds window{5};
  std::size_t max_inputs = 256;
};

// What the route does instead of refusing when its queue is full or a request waited
// too long (models[].overload, docs/limits.md "Overload"): the request goes to a light
// model, or gets the route's canned reply.
struct Overload {
  std::string model;  // the light model's alias ("" = none)
  bool canned = false;  // the route's canned_reply when there is no light model or it is full too
  // A request degrades after waiting this long (0: when its class's max_wait ends it).
  std::chrono::milliseconds max_wait{0};
};

// Ollama's options that make it load the model again when they change (num_ctx, num_gpu,
// num_batch: seconds during which nobody on that server gets a token), and what a route
// does with a client's (docs/tuning.md): pin them to the route's values, allow only listed
// values, or steer each request to a backend already loaded with its values.
enum class LoadPolicy : std::uint8_t { pin, allow, steer };
inline constexpr std::string_view kLoadOptionKeys[] = {"num_ctx", "num_gpu", "num_batch"};
struct LoadOptionsPolicy {
  LoadPolicy policy = LoadPolicy::pin;
  std::map<std::string, std::int64_t, std::less<>> values;  // the route's own (a client's absent one: this)
  std::map<std::string, std::vector<std::int64_t>, std::less<>> allowed;  // allow: further values a client may ask
};

struct Route {
  // Bounds the data path relies on (a request's tried set is a 64-bit mask; its list of
  // sets to try is fixed-size).
  static constexpr std::size_t kMaxBackends = 64;
  static constexpr std::size_t kMaxFallbacks = 16;

  std::string alias;           // what clients put in "model"
  // One or more backends. A route written with provider/base_url/model at its top level
  // (the short form) has exactly one.
  std::vector<Backend> backends;
  Balance balance = Balance::least_connections;
  int max_in_flight = 0;          // requests in flight for this model (0 = unlimited)
  // Retries: further attempts after the first, on other backends of the set and then on
  // the fallbacks' backends, only before the first byte reached the client.
  int retries = 2;
  std::vector<std::string> fallbacks;       // aliases whose backends are tried next, in order
  // Request fields that bill or store on the operator's upstream account (service_tier,
  // store, web_search_options): refused (400 option_not_allowed) unless listed here.
  std::vector<std::string> allow_params;
  // Fields the route's Ollama/Anthropic backends cannot honour are dropped, not refused.
  bool drop_params = false;
  std::optional<std::string> canned_reply;  // answered (200) when every option failed; else 503
  std::optional<CanaryConfig> canary;
  std::optional<BreakerConfig> breaker;     // overrides routing.breaker for this route's backends
  std::optional<RouteCache> cache;          // the response cache (docs/cache.md); off without it
  std::string guardrails;                   // the guardrails policy screening its requests; "" = none
  std::optional<Price> price;
  std::optional<EmbeddingBatch> embedding_batch;
  std::optional<Overload> overload;
  std::optional<LoadOptionsPolicy> load_options;

  const Backend& primary() const noexcept { return backends.front(); }
};

}  // namespace sluice::config
