#pragma once
// The gateway: wires configuration, the HTTP server, upstream clients, the embedded
// simulator and telemetry together. `sluice serve` is run_serve().
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "config/config.hpp"

namespace sluice::gateway {

class Gateway {
 public:
  virtual ~Gateway() = default;
  // Starts everything (throws std::runtime_error with a reason on failure).
  // `takeover`: share the listen ports with a process already serving them (see
  // http::ServerOptions::takeover); without it such a port is refused.
  // `config_path`: the file a reload reads (SIGHUP, POST /admin/reload; empty: none).
  static std::unique_ptr<Gateway> start(std::shared_ptr<const config::Config> cfg, bool takeover = false,
                                        std::string config_path = {});
  virtual std::uint16_t port() const = 0;
  // Stops accepting, lets in-flight requests finish within the configured grace period.
  virtual void shutdown() = 0;
  virtual void join() = 0;
  virtual bool forced_stop() const = 0;
  // Loads the file again and swaps in its keys, routes and backends (SIGHUP); false, with
  // the reason logged, when it is refused.
  virtual bool reload(const std::string& config_path) = 0;
};

// `sluice serve --config FILE`: loads and validates the config, prints the banner, serves
// until SIGTERM/SIGINT (SIGHUP reloads the routes), drains, exits 0.
int run_serve(const std::string& config_path, bool takeover = false);
// `sluice check-config FILE`: validates, prints every error (exit 1) or the banner (exit 0).
int run_check_config(const std::string& config_path);

}  // namespace sluice::gateway
