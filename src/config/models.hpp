#pragma once
// Routes (`models`) and their backends. Declared in config/sections/models.cpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/routing.hpp"
#include "config/sim.hpp"

namespace sluice::config {

enum class Provider { simulated, openai, ollama, anthropic };
std::string_view to_string(Provider p) noexcept;

struct Backend {
  Provider provider = Provider::simulated;
  std::string base_url;        // e.g. http://127.0.0.1:11434 or https://api.openai.com/v1
  // Derived from base_url at validation time:
  bool tls = false;
  std::string host;
  std::uint16_t port = 0;
  std::string path_prefix;     // "" or "/v1" etc., without trailing '/'
  std::string model;           // real model name sent upstream
  std::string api_key;         // provider credential (resolved from env/file); never logged
  bool tls_verify = true;
  std::string ca_file;         // optional extra CA bundle (PEM)
  SimSettings sim;             // for Provider::simulated
  // Within a route's backend set:
  std::string name;            // label in metrics, logs and /infra; default host:port (host:port/model when the endpoint serves several models; simulated:<alias>[#i])
  int weight = 1;              // for the weighted policies (>= 1)
  int max_in_flight = 0;       // requests in flight to this backend, shared by every route using it (0 = unlimited)
  bool probe = true;           // whether the active health probe runs for it (when health.interval is set)

  bool operator==(const Backend&) const = default;
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
  // store): refused (400 option_not_allowed) unless listed here.
  std::vector<std::string> allow_params;
  std::optional<std::string> canned_reply;  // answered (200) when every option failed; else 503
  std::optional<CanaryConfig> canary;
  std::optional<BreakerConfig> breaker;     // overrides routing.breaker for this route's backends

  const Backend& primary() const noexcept { return backends.front(); }
};

}  // namespace sluice::config
