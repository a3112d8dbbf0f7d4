#pragma once
// The server section: timeouts and CORS (listen address, workers, size limits and the
// admin listener are top-level fields of Config). Declared in config/sections/server.cpp.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

using Millis = std::chrono::milliseconds;

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
  // On SIGTERM, before the listeners close: /ready answers 503 while requests are still
  // accepted and served, so a load balancer takes the instance out before anything is
  // refused. (SIGINT, or a second signal, skips it.)
  Millis drain_delay{5000};
  bool operator==(const Timeouts&) const = default;
};

// TLS on the main listener (off while cert_file is empty). The files are PEM; they are
// read again at every reload (SIGHUP), so a renewed certificate takes effect without a
// restart and without dropping a connection.
enum class ClientCerts : std::uint8_t { require, optional };
enum class TlsMinVersion : std::uint8_t { v1_2, v1_3 };
struct ListenerTls {
  std::string cert_file;       // the certificate chain, the server's own first
  std::string key_file;        // its private key
  std::string client_ca_file;  // set: clients present a certificate these CAs signed (mTLS)
  ClientCerts client_certs = ClientCerts::require;
  TlsMinVersion min_version = TlsMinVersion::v1_2;
  // How often the files are checked for a change (then read again, as at a reload);
  // 0 = only at reloads.
  Millis check_interval{30000};

  bool enabled() const noexcept { return !cert_file.empty(); }
  bool operator==(const ListenerTls&) const = default;
};

// Browser clients on other origins (off while allowed_origins is empty).
struct Cors {
  std::vector<std::string> allowed_origins;  // "https://app.example.com", or "*" for any
  Millis max_age{600000};                    // how long a browser keeps a preflight's answer

  bool enabled() const noexcept { return !allowed_origins.empty(); }
  bool allows(std::string_view origin) const noexcept {
    for (const auto& o : allowed_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }
};

// Stored responses of the Responses API (store, previous_response_id): in memory on this
// instance (the oldest dropped first beyond max_bytes), or in Redis for the whole fleet
// with this instance's memory behind it.
// Where each instance registers its requests in flight for the fleet's /admin/requests:
// auto = Redis when another part uses it (limits, cache, stored responses, key store
// notices); redis = always; off = this instance's only.
enum class LiveRegistry : std::uint8_t { auto_, redis, off };

enum class ResponsesBackend : std::uint8_t { memory, redis, database };
struct ResponsesStore {
  ResponsesBackend store = ResponsesBackend::memory;
  Millis ttl{24 * 3600 * 1000};
  std::size_t max_bytes = 64 << 20;
};

}  // namespace sluice::config
