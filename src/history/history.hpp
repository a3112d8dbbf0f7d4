#pragma once
// The request history: one row per finished request in SQLite or PostgreSQL, written in
// batches by its own thread from a bounded queue, and the two queries the gateway serves
// (GET /history, GET /history/stats). The database being down never blocks a request:
// rows queue up to a bound (then are dropped and counted) and the writer reconnects by
// itself. See docs/history.md.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/records.hpp"
#include "telemetry/record.hpp"

namespace sluice::history {

// GET /history: newest first (by id), cursor paging with before_id.
struct ListQuery {
  std::string model, key, tenant;  // exact matches; "" = any (key is the key name)
  int status = 0;                  // exact HTTP status; 0 = any
  int status_class = 0;            // 1..5 for "1xx".."5xx"; 0 = any
  std::int64_t since_ms = 0;       // unix_ms >= since_ms; 0 = no bound
  std::int64_t until_ms = 0;       // unix_ms < until_ms; 0 = no bound
  int limit = 100;                 // 1..1000
  std::int64_t before_id = 0;      // id < before_id; 0 = from the newest
};

// GET /history/stats: aggregates over [since_ms, until_ms), optionally per group.
struct StatsQuery {
  std::int64_t since_ms = 0, until_ms = 0;
  std::string group_by;            // "" = one group; else one of group_by_names()
  std::string model, key, tenant;
  std::size_t max_rows = 1'000'000;  // rows read at most (percentiles are computed in memory)
};

// Query strings as they follow '?' (percent-encoded key=value&...). Empty values count as
// not given. Times: unix seconds, unix milliseconds (values >= 1e11) or ISO-8601 UTC
// ("2026-11-29T20:00:00Z", ".123" fraction optional, or just "2026-11-29"). On a bad
// query: nullopt and `error` names the parameter. `now_ms` (0 = the clock) anchors the
// stats window (default: the last hour).
std::optional<ListQuery> parse_list_query(std::string_view query_string, std::string& error);
std::optional<StatsQuery> parse_stats_query(std::string_view query_string, std::string& error,
                                            std::int64_t now_ms = 0);
std::string_view group_by_names();  // "model, tier, ..." for error messages and docs

// The same reader for other endpoints' query strings: percent-decoded name=value pairs,
// each a name of `allowed` given at most once, UTF-8; empty values are left out. On a bad
// query: nullopt and `error` names the parameter.
struct QueryParam {
  std::string name, value;
};
std::optional<std::vector<QueryParam>> parse_query_params(std::string_view query_string,
                                                          std::span<const std::string_view> allowed,
                                                          std::string& error);
// A time as `since` and `until` take it (unix seconds, unix milliseconds, ISO-8601 UTC), in
// unix ms; false with `error` naming the parameter.
bool parse_time_param(const QueryParam& p, std::int64_t& ms, std::string& error);

// What the token quotas were charged, per key, tenant, tier and model alias (the limiter
// counts a request under its alias), over [since_ms, until_ms): the rows of requests that
// reserved tokens (reserved_tokens is set), each counted by settlement's rule: prompt +
// completion tokens when the request answered 200 or relayed output, else 0 (each count
// and the sum at most 99,999,999,999,999, as one settlement charges at most).
struct UsageQuery {
  std::int64_t since_ms = 0, until_ms = 0;
};
struct Usage {
  std::string key_name, tenant, tier, alias;  // NULL reads as ""
  std::int64_t tokens = 0;                    // charged by settlement's rule
  std::int64_t requests = 0;                  // rows
};

struct Result {
  std::string body;          // the JSON answer when ok()
  std::string error;         // else what went wrong (no secrets)
  bool unavailable = false;  // the database failed: answer 503 (else a bad query: 400)
  bool ok() const noexcept { return error.empty(); }
};

struct Status {
  std::string backend;       // "sqlite" or "postgres"
  std::string target;        // the SQLite path, or the URL with its password as ***
  bool up = false;           // the last connect or write succeeded
  std::uint64_t queued = 0;  // consumed, not yet written (includes the batch in flight)
  std::uint64_t written = 0, dropped = 0, write_errors = 0, batches = 0;
  std::uint64_t reconnects = 0;  // connections opened after the first one
  std::string last_error;    // of the latest failure ("" if none yet); never a password
  int schema_version = 0;    // 0 until the first successful connect
};
void append_json(std::string& out, const Status& s);  // one JSON object

class History final : public telemetry::RecordSink {
 public:
  // nullptr without error for backend none; nullptr with `error` for settings that can
  // never work. A database that is unreachable now is not an error: the writer starts
  // down and keeps retrying every retry_interval.
  static std::unique_ptr<History> create(const config::HistorySettings& settings, std::string* error);
  // A final flush of at most 2 s, then the writer stops (after the statement in progress,
  // which a hung database can make last up to its timeout).
  ~History() override;
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // Copies the record into the queue, or drops and counts it when the queue is full.
  void consume(const telemetry::RequestRecord& r) override;
  // The same for each record, under one lock and with at most one wake-up of the writer.
  void consume_batch(std::span<const telemetry::RequestRecord> records,
                     std::span<const std::string_view> json) override;
  // Waits until every row consumed before the call is written (true) or max_wait passed.
  bool flush(std::chrono::milliseconds max_wait);
  Status status() const;

  // Blocking reads on their own connection (one at a time); call them off the workers.
  Result list(const ListQuery& q) const;
  Result stats(const StatsQuery& q) const;
  // One group list per range, in `out` (Result.body stays empty). The ranges are read in
  // one transaction: one snapshot of the table, so a batch written meanwhile is in all of
  // them or in none.
  Result usage(std::span<const UsageQuery> ranges, std::vector<std::vector<Usage>>& out) const;

 private:
  struct Impl;  // queue, writer thread, read connection (history.cpp)
  explicit History(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::history
