#pragma once
// The validated, immutable configuration. Loaded once (YAML + environment overrides),
// validated as a whole, then shared read-only by every worker.
//
// This header gathers every section. Code that uses one section includes only that
// section's header (config/server.hpp, keys.hpp, models.hpp, backend.hpp, sim.hpp, params.hpp,
// routing.hpp, admission.hpp, records.hpp) and, where it takes the whole Config by
// reference, forward-declares it. Each key is declared once, in the table of its section
// (src/config/sections/*.cpp); docs/configuration.md's reference tables are generated
// from those tables (`sluice config-reference`).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/admission.hpp"
#include "config/cache.hpp"
#include "config/guardrails.hpp"
#include "config/keys.hpp"
#include "config/models.hpp"
#include "config/params.hpp"
#include "common/address.hpp"
#include "config/records.hpp"
#include "config/routing.hpp"
#include "config/server.hpp"

namespace sluice::config {

struct Config {
  std::string instance;        // x-sluice-instance; default: hostname:port
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  int workers = 0;             // 0 = number of cores
  // Proxies whose X-Forwarded-For names the client (common/address.hpp); none: the
  // connection's address is the client.
  std::vector<IpNetwork> trusted_proxies;
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_upstream_response_bytes = 16 << 20;
  int upstream_pool_per_host = 256;            // idle keep-alive connections kept per worker
  // Client connections open at once, over all workers; 0 = derived at start from the
  // file descriptor limit (gateway: auto_max_connections).
  std::size_t max_connections = 0;
  int max_messages = 0;  // a chat request's messages, system messages aside; 0 = no cap
  Timeouts timeouts;
  ListenerTls tls;  // TLS on the main listener (off by default)
  Cors cors;
  ResponsesStore responses;
  std::string access_log = "-";  // "-" = stdout, "" = off, else a file path
  // /metrics and /infra show backends, routes and the database's place: on the main
  // listener they need an admin key, unless public_status; an admin listener (a port of
  // its own, for Prometheus and operators) serves them and the probes without a key.
  bool public_status = false;
  bool console = true;  // the web console under /console/ (docs/console.md)
  std::string admin_listen_host;  // empty: no admin listener
  std::uint16_t admin_listen_port = 0;
  LiveRegistry live_registry = LiveRegistry::auto_;
  std::chrono::milliseconds live_interval{1000};  // how often the registry's snapshot is written
  std::vector<ApiKey> keys;
  KeyStoreSettings key_store;
  std::vector<Route> routes;
  // Top-level OpenAI parameters with a checked range (temperature, top_p, max_tokens...).
  Ranges params;
  // Keys allowed inside the Ollama-style "options" object, with ranges (num_ctx...).
  Ranges options;
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
  CacheSettings cache;
  std::vector<GuardPolicy> guardrails;  // named screening policies (routes and keys use them by name)

  const Route* find_route(std::string_view alias) const noexcept;
  const ApiKey* find_key(std::string_view secret) const noexcept;
  const GuardPolicy* find_guardrails(std::string_view name) const noexcept;
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
