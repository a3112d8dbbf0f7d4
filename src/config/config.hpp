#pragma once
// The validated, immutable configuration. Loaded once (YAML + environment overrides),
// validated as a whole, then shared read-only by every worker.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/admission.hpp"
#include "config/records.hpp"
#include "config/routing.hpp"

namespace sluice::config {

using Millis = std::chrono::milliseconds;

enum class Provider { simulated, openai, ollama, anthropic };
std::string_view to_string(Provider p) noexcept;

// Timing model and fault injection of the simulator (both faces: `sluice sim` and the
// in-process `simulated` provider).
struct SimSettings {
  Millis ttft{200};                 // fixed part of time to first token
  double ttft_per_prompt_token_ms = 0.0;  // prefill cost, added per prompt token
  Millis inter_token{20};           // inter-token latency
  double jitter = 0.1;              // +/- fraction applied to each delay
  int max_in_flight = 64;           // sequences decoding at once ("GPU slots")
  int max_waiting = 1024;           // queue beyond that; past it -> 503
  int default_output_tokens = 32;   // when the request sets no max_tokens/num_predict
  int max_output_tokens = 4096;
  // Fault injection, each a probability in [0,1] per request.
  double error_rate_429 = 0, error_rate_500 = 0, error_rate_503 = 0;
  double abort_rate = 0;            // stream aborted mid-way (connection dropped)
  double hang_rate = 0;             // accepts, then never answers
  double slow_first_token_rate = 0; // first token delayed by slow_first_token
  Millis slow_first_token{5000};
  std::uint64_t seed = 0;           // 0 = random

  bool operator==(const SimSettings&) const = default;
};

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

// Shortest API key secret accepted: a short secret can be guessed.
inline constexpr std::size_t kMinKeySecretLength = 16;

struct ApiKey {
  std::string name;            // key id shown in logs, e.g. "prod-app"
  std::string key;             // the secret; never logged
  std::string tenant;
  std::string tier = "standard";
  std::vector<std::string> models;  // aliases this key may use; "*" = all
  bool admin = false;
  int max_in_flight = -1;      // -1: concurrency.per_key
  std::optional<Priority> priority;  // highest queue class; default from the tier
};

// Allowed numeric range of a request option.
struct Range {
  double min = 0;
  double max = 0;
  bool integer = false;
};

struct Timeouts {
  Millis connect{5000};
  Millis first_token{60000};
  Millis idle{60000};          // gap between upstream stream chunks
  Millis total{600000};
  Millis client_header{30000}; // reading a request's headers and body
  Millis keep_alive{75000};    // idle client connection
  Millis client_first_byte{10000};  // a new connection's first byte (then keep_alive applies)
  Millis heartbeat{15000};     // ": keep-alive" comment while the upstream is silent
  Millis client_write{30000};  // a client that takes no byte of a reply for this long is dropped
  Millis shutdown_grace{30000};
};

struct Config {
  std::string instance;        // x-sluice-instance; default: hostname:port
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  int workers = 0;             // 0 = number of cores
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_upstream_response_bytes = 16 << 20;
  int upstream_pool_per_host = 256;            // idle keep-alive connections kept per worker
  // Client connections open at once, over all workers; 0 = derived at start from the
  // file descriptor limit (gateway: auto_max_connections).
  std::size_t max_connections = 0;
  Timeouts timeouts;
  std::string access_log = "-";  // "-" = stdout, "" = off, else a file path
  // /metrics and /infra show backends, routes and the database's place: on the main
  // listener they need an admin key, unless public_status; an admin listener (a port of
  // its own, for Prometheus and operators) serves them and the probes without a key.
  bool public_status = false;
  std::string admin_listen_host;  // empty: no admin listener
  std::uint16_t admin_listen_port = 0;
  std::vector<ApiKey> keys;
  std::vector<Route> routes;
  // Top-level OpenAI parameters with a checked range (temperature, top_p, max_tokens...).
  std::map<std::string, Range, std::less<>> params;
  // Keys allowed inside the Ollama-style "options" object, with ranges (num_ctx...).
  std::map<std::string, Range, std::less<>> options;
  // Where the BPE rank files are (cl100k_base.json, o200k_base.json); "" = look in the
  // places scripts/fetch-tokenizer.sh fills. Missing files: the estimator counts instead.
  std::string tokenizer_dir;
  RateLimits rate_limits;
  RedisSettings redis;
  Concurrency concurrency;
  // Files the gateway writes (history.db, the events fallback file); created if missing.
  std::string data_dir = "data";
  HistorySettings history;
  EventSettings events;
  RoutingSettings routing;

  const Route* find_route(std::string_view alias) const noexcept;
  const ApiKey* find_key(std::string_view secret) const noexcept;
};

// Error with the YAML key path, the line (1-based, 0 if unknown) and what is wrong.
struct ConfigError {
  std::string key;
  int line = 0;
  std::string message;
  std::string to_string() const;  // "config error at line 12, key models[0].provider: ..."
};

struct LoadResult {
  std::shared_ptr<const Config> config;  // set on success
  std::vector<ConfigError> errors;       // every problem found, not just the first
  bool ok() const { return config != nullptr; }
};

// Environment lookup, injectable for tests.
using EnvLookup = std::optional<std::string> (*)(const char* name);
std::optional<std::string> process_env(const char* name);

// File system access, injectable like the environment (tests, the fuzzer): the loader
// reads keys_file and checks that ca_file and tokenizer_dir exist; it writes nothing.
// real_files() reads regular files only, of at most kMaxReadFileBytes (a keys_file naming
// /dev/zero or a FIFO is an error, not a hang).
inline constexpr std::size_t kMaxReadFileBytes = 16 << 20;
struct FileAccess {
  // The file's bytes, or nullopt with `error` saying why.
  std::optional<std::string> (*read)(const std::string& path, std::string& error);
  bool (*is_regular_file)(const std::string& path);
  bool (*is_directory)(const std::string& path);
};
const FileAccess& real_files();

LoadResult load_file(const std::string& path, EnvLookup env = process_env);
LoadResult load_string(const std::string& yaml, EnvLookup env = process_env,
                       const std::string& base_dir = ".", const FileAccess& files = real_files());

// Human-readable summary for the startup banner: listeners, routes, backends, keys
// (names and masked secrets only).
std::string describe(const Config& c);

}  // namespace sluice::config
