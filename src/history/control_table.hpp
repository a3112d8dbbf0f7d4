#pragma once
// The fleet's runtime state in the history's database (migration 5): the key store's keys
// (by name, found by the HMAC of their secret, never the secret itself), the backends
// operators drained and the canary weights they set. Blocking calls on the table's own connection: the caller makes them
// off the workers. Every write bumps one version in the same transaction, which every
// instance polls.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::config {
struct HistorySettings;
}

namespace sluice::history {

struct KeyRow {
  std::string name;
  std::string digest;  // lower-case hex HMAC-SHA256 of the secret under key_store.secret
  std::string masked;  // "sk-live-***1a2b": shown in logs and lists
  std::string tenant, tier;
  std::vector<std::string> models;  // aliases, or "*"
  std::string role;                 // "user", "admin" or "viewer"
  std::int64_t max_in_flight = -1;  // -1: concurrency.per_key
  std::string priority, max_priority, guardrails;  // "" = unset
  std::int64_t expires_ms = -1;     // -1: never
  std::int64_t budget_tokens = -1;  // tokens per budget_per; -1: no budget (migration 7)
  std::string budget_per;           // "minute", "hour", "day" or "month"; "" with no budget
  bool enabled = true;
  std::int64_t created_ms = 0, updated_ms = 0;
  std::string created_by;          // the admin key's name
  std::string old_digest;          // a rotated key's previous secret, valid until old_until_ms
  std::int64_t old_until_ms = -1;
  // Bumped by every update: an update of a row read at another revision is refused
  // (conflict), so that two changes made at once never silently undo one another.
  std::int64_t revision = 0;
  // When a request last used it (Unix ms; -1: never), as the instances report it now and
  // then (touch()): not a change of the key (no revision, no version).
  std::int64_t last_used_ms = -1;
};

struct DrainRow {
  std::string name;  // the backend's name
  std::string by;    // the admin key's name
  std::int64_t since_ms = 0;
};

struct CanaryRow {
  std::string alias;  // the route with the canary
  double weight = 0;  // percent, 0..100
  std::string by;
  std::int64_t since_ms = 0;
};

// What the table holds, read in one snapshot.
struct ControlState {
  std::int64_t version = -1;
  std::vector<KeyRow> keys;  // by name
  std::vector<DrainRow> drains;
  std::vector<CanaryRow> canaries;
};

class ControlTable {
 public:
  // nullptr with `error` for settings that can never work (history backend none).
  static std::unique_ptr<ControlTable> create(const config::HistorySettings& settings, std::string* error);
  ~ControlTable();

  // The store's version (bumped by every write); nullopt when the database failed.
  std::optional<std::int64_t> version();
  // Everything, with the version, in one transaction; nullopt when the database failed.
  std::optional<ControlState> read();

  enum class Write { ok, exists, not_found, conflict, failed };
  // A new key (its name and digest unused).
  Write insert(const KeyRow& row);
  // The key of row.name, every field replaced (created_ms and created_by kept), if it is
  // still at row.revision (else conflict: read it again); its revision is then bumped.
  Write update(const KeyRow& row);
  Write erase(std::string_view name);
  // When keys were last used (name, Unix ms): each row's last_used_ms raised to it, in one
  // transaction, without a version bump (nobody need read the keys again for it).
  bool touch(const std::vector<std::pair<std::string, std::int64_t>>& used);
  // A backend drained (exists: it already was) or undrained (not_found: it was not).
  Write drain(const DrainRow& row);
  Write undrain(std::string_view name);
  // A route's canary weight set (replacing one set before), or cleared (not_found: none was).
  Write set_canary(const CanaryRow& row);
  Write clear_canary(std::string_view alias);

  bool up() const;
  std::string error() const;  // the last failure's ("" when the last call succeeded)

 private:
  struct Impl;
  explicit ControlTable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::history
