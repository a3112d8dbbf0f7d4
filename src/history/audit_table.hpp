#pragma once
// The audit trail in the history's database (migration 6): one row per change an operator
// made through /admin/ (docs/admin.md, "Audit"). Blocking calls on the table's own
// connection: the caller makes them off the workers. A row that cannot be written while
// the database is down waits in memory (at most kMaxPending, oldest dropped and counted)
// and goes in with the next write or read.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "history/history.hpp"  // Result

namespace sluice::config {
struct HistorySettings;
}

namespace sluice::history {

struct AuditRow {
  std::int64_t unix_ms = 0;
  std::string instance;    // where the change was made
  std::string request_id;  // the admin request's (the access log's line)
  std::string actor;       // the admin key's name, or "admin-listener"
  std::string action;      // "key.create", "backend.drain", "request.cancel"...
  std::string target;      // the thing changed: a key's, backend's or route's name, a request id
  int status = 0;          // the admin request's HTTP status
  std::string detail;      // a JSON object: what was asked (never a secret)
};

// The row as JSON: {"unix_ms":..,"instance":..,..,"detail":{...}} (the listing's and the
// admin.audit event's data).
void append_json(std::string& out, const AuditRow& r);

struct AuditQuery {
  std::int64_t since_ms = 0;  // rows at or after it
  std::int64_t until_ms = 0;  // rows before it (0: no bound): older pages
  std::string actor, action, target;  // "" = any
  int limit = 100;            // 1..1000, newest first
};

// `since`, `until` (Unix seconds or ms, or ISO-8601, as /history takes them), `actor`, `action`,
// `target`, `limit`. nullopt with `error` naming what is wrong.
std::optional<AuditQuery> parse_audit_query(std::string_view query_string, std::string& error);

class AuditTable {
 public:
  static constexpr std::size_t kMaxPending = 1000;
  // nullptr for history backend none (the events and the access log still carry audits).
  static std::unique_ptr<AuditTable> create(const config::HistorySettings& settings);
  ~AuditTable();

  // Written now, or kept for later when the database is down (false then).
  bool write(AuditRow row);
  // {"audit":[{...}, ...]}, newest first.
  Result list(const AuditQuery& q);

  std::size_t pending() const;
  std::uint64_t dropped() const;  // rows lost while the database was down too long
  bool up() const;

 private:
  struct Impl;
  explicit AuditTable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::history
