#pragma once
// GET /admin/usage/reconcile: per token limit, per counter and per period, what the
// request history says was charged next to what the limiter holds, so that an operator
// can bill from the history and see where the two disagree. See docs/limits.md,
// "Reconciliation".
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/reason.hpp"

namespace sluice::gateway {

struct Shared;
struct RoutingTable;

struct ReconcileQuery {
  std::int64_t at_ms = 0;   // the time whose period each limit reports (default: now)
  bool previous = false;    // the period before that one
  std::string key, tenant;  // only the counters this key's (this tenant's keys') requests count against
};

// `period` (current | previous), `at` (a time as /history's since takes it), `key`,
// `tenant`. On a bad query: nullopt, `error` says what is wrong and `param` names it.
std::optional<ReconcileQuery> parse_reconcile_query(std::string_view query_string, std::int64_t now_ms,
                                                    std::string& error, std::string& param);

struct ReconcileAnswer {
  Reason reason = Reason::ok;  // ok: `body` is the report; else `body` is the error message
  std::string body;
  std::string param;           // the parameter a 400 is about
  int status = 200;            // with reason ok: 200, or 201 for a thing created
};

// Builds the report. The history is read on the query executor and Redis on a worker's
// connection, so the calling worker is never blocked; it resumes on its own executor.
// `table`: the routing table in force (the model aliases a key may use).
boost::asio::awaitable<ReconcileAnswer> reconcile_usage(Shared& g, const RoutingTable& table,
                                                        std::string_view query_string);

}  // namespace sluice::gateway
