#include "history/own_connection.hpp"

namespace sluice::history {

namespace {
constexpr auto kStatementTimeout = std::chrono::milliseconds(5000);
}

Connection* OwnConnection::connection() {
  if (conn) return conn.get();
  const auto now = std::chrono::steady_clock::now();
  if (now < next_connect) return nullptr;
  next_connect = now + settings.retry_interval;
  std::string error;
  auto c = settings.backend == config::HistoryBackend::postgres
               ? open_postgres(settings.url, settings.connect_timeout, kStatementTimeout, error)
               : open_sqlite(settings.sqlite_path, false, error);
  int version = 0;
  if (c && error.empty()) error = migrate(*c, version);
  if (!c || !error.empty()) {
    fail(error.empty() ? "cannot open the database" : error);
    return nullptr;
  }
  conn = std::move(c);
  return conn.get();
}

void OwnConnection::fail(std::string error) {
  if (settings.backend == config::HistoryBackend::postgres) error = scrub_password(std::move(error), settings.url);
  {
    std::lock_guard lock(error_mu);
    last_error = std::move(error);
  }
  up = false;
  conn.reset();  // opened again by a later call, after retry_interval: the calls queued
  next_connect = std::chrono::steady_clock::now() + settings.retry_interval;  // behind this one fail at once
}

void OwnConnection::ok() {
  std::lock_guard lock(error_mu);
  last_error.clear();
  up = true;
}

std::string OwnConnection::error() const {
  std::lock_guard lock(error_mu);
  return last_error;
}

}  // namespace sluice::history
