#pragma once
// Client API keys (`keys`, `keys_file`, SLUICE_API_KEYS). Declared in
// config/sections/keys.cpp.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/admission.hpp"
#include "config/priority.hpp"

namespace sluice::config {

// Shortest API key secret accepted: a short secret can be guessed.
inline constexpr std::size_t kMinKeySecretLength = 16;

struct ApiKey {
  std::string name;            // key id shown in logs, e.g. "prod-app"
  std::string key;             // the secret; never logged
  std::string tenant;
  std::string tier = "standard";
  std::vector<std::string> models;  // aliases this key may use; "*" = all
  bool admin = false;
  // Reads what an admin key reads (/admin/keys, /infra...) and changes nothing: a role
  // of the key store's keys (role: viewer).
  bool viewer = false;
  int max_in_flight = -1;      // -1: concurrency.per_key
  std::optional<Priority> priority;  // highest queue class; default from the tier
  // The highest class a request of this key may ask for (X-Priority) or be raised to
  // (urgency); none: its own class.
  std::optional<Priority> max_priority;
  // The guardrails policy for this key's requests, instead of the route's; "none": none.
  std::string guardrails;
  // A token budget of its own (the key store's keys): tokens per period, counted like a
  // token quota of scope key (rate_limits' backend); 0: none.
  std::int64_t budget_tokens = 0;
  QuotaPeriod budget_per = QuotaPeriod::month;

  bool may_use(std::string_view alias) const noexcept {
    for (const auto& m : models) {
      if (m == "*" || m == alias) return true;
    }
    return false;
  }
};

// Keys managed at runtime (`key_store`, docs/admin.md): kept in the history's database,
// hashed with `secret`, created and changed through /admin/keys, seen by every instance
// within `poll`.
// How an instance learns that another changed the store: by polling its version only, or
// also by Redis pub/sub (the `redis` section), at once.
enum class ControlNotify : std::uint8_t { poll, redis };

struct KeyStoreSettings {
  bool enabled = false;
  ControlNotify notify = ControlNotify::poll;
  // The HMAC key the stored digests are made with: one for the whole fleet, at least 16
  // bytes. Changing it makes every stored key unusable.
  std::string secret;
  std::chrono::milliseconds poll{1000};  // how often the store's version is read
};

}  // namespace sluice::config
