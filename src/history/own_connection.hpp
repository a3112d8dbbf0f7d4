#pragma once
// Internal to the history library: a table's own connection to the history's database
// (stored responses, the key store), opened and migrated on first use, dropped on a
// failure and opened again by a later call, at most once per retry_interval. One call at a
// time (`mu`); the caller makes its blocking calls off the workers.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "config/records.hpp"
#include "history/db.hpp"

namespace sluice::history {

struct OwnConnection {
  explicit OwnConnection(const config::HistorySettings& s) : settings(s) {}

  config::HistorySettings settings;
  std::mutex mu;  // one call at a time on the connection
  std::unique_ptr<Connection> conn;
  std::chrono::steady_clock::time_point next_connect{};
  mutable std::mutex error_mu;  // (status reads do not wait for a call in progress)
  std::string last_error;
  std::atomic<bool> up{false};

  // The connection, opened (and the schema migrated) when there is none; null when the
  // database cannot be reached now. Under `mu`.
  Connection* connection();
  // The call failed: remember why (passwords scrubbed) and drop the connection. Under `mu`.
  void fail(std::string error);
  void ok();
  std::string error() const;
  std::string p(int n) const { return placeholder(conn->dialect(), n); }  // a parameter's placeholder
};

}  // namespace sluice::history
