// Stored responses in the history's database (responses.hpp).
#include "history/responses.hpp"

#include <atomic>
#include <mutex>

#include "config/records.hpp"
#include "history/db.hpp"

namespace sluice::history {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStatementTimeout = std::chrono::milliseconds(5000);
// Expired rows are deleted every this many writes, this many at a time: the table stays
// near what the TTL holds without a sweep that takes the database for long.
constexpr int kSweepEvery = 64;
constexpr int kSweepRows = 256;

}  // namespace

struct ResponseTable::Impl {
  config::HistorySettings settings;
  std::mutex mu;  // one call at a time on the connection
  std::unique_ptr<Connection> conn;
  Clock::time_point next_connect{};
  mutable std::mutex error_mu;  // (status reads do not wait for a call in progress)
  std::string last_error;
  std::atomic<bool> up{false};
  int writes = 0;

  // The connection, opened (and the schema migrated) when there is none; null when the
  // database cannot be reached now.
  Connection* connection() {
    if (conn) return conn.get();
    if (Clock::now() < next_connect) return nullptr;
    next_connect = Clock::now() + settings.retry_interval;
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

  void fail(std::string error) {
    if (settings.backend == config::HistoryBackend::postgres) error = scrub_password(std::move(error), settings.url);
    {
      std::lock_guard lock(error_mu);
      last_error = std::move(error);
    }
    up = false;
    conn.reset();  // opened again by a later call, after retry_interval: the calls queued
    next_connect = Clock::now() + settings.retry_interval;  // behind this one fail at once
  }

  void ok() {
    std::lock_guard lock(error_mu);
    last_error.clear();
    up = true;
  }

  std::string p(int n) const { return placeholder(conn->dialect(), n); }
};

ResponseTable::ResponseTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResponseTable::~ResponseTable() = default;

std::unique_ptr<ResponseTable> ResponseTable::create(const config::HistorySettings& settings, std::string* error) {
  if (settings.backend == config::HistoryBackend::none) {
    if (error) *error = "responses.store database needs the history's database (records.history)";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->settings = settings;
  return std::unique_ptr<ResponseTable>(new ResponseTable(std::move(impl)));
}

std::optional<std::optional<StoredRow>> ResponseTable::get(std::string_view tenant, std::string_view id,
                                                          std::int64_t now_ms) {
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return std::nullopt;
  std::optional<StoredRow> found;
  const std::string sql = "SELECT response, items, input_from, input_count FROM responses WHERE tenant = " +
                          impl_->p(1) + " AND id = " + impl_->p(2) + " AND expires_ms > " + impl_->p(3);
  auto e = c->query(sql, {std::string(tenant), std::string(id), now_ms}, [&](std::vector<Value>& row) {
    auto text = [&row](std::size_t i) {
      auto* s = std::get_if<std::string>(&row[i]);
      return s ? std::move(*s) : std::string();
    };
    auto number = [&row](std::size_t i) {
      auto* n = std::get_if<std::int64_t>(&row[i]);
      return n ? *n : 0;
    };
    found = StoredRow{text(0), text(1), number(2), number(3)};
  });
  if (!e.empty()) {
    impl_->fail(std::move(e));
    return std::nullopt;
  }
  impl_->ok();
  return found;
}

bool ResponseTable::put(std::string_view tenant, std::string_view id, const StoredRow& row, std::int64_t expires_ms,
                        std::int64_t now_ms) {
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return false;
  const auto& p = [this](int n) { return impl_->p(n); };
  const std::string sql =
      "INSERT INTO responses (tenant, id, expires_ms, response, items, input_from, input_count) VALUES (" + p(1) +
      ", " + p(2) + ", " + p(3) + ", " + p(4) + ", " + p(5) + ", " + p(6) + ", " + p(7) +
      ") ON CONFLICT (tenant, id) DO UPDATE SET expires_ms = excluded.expires_ms, response = excluded.response, "
      "items = excluded.items, input_from = excluded.input_from, input_count = excluded.input_count";
  auto e = c->query(sql,
                    {std::string(tenant), std::string(id), expires_ms, row.response, row.items, row.input_from,
                     row.input_count},
                    {});
  if (e.empty() && ++impl_->writes % kSweepEvery == 0) {
    e = c->query("DELETE FROM responses WHERE (tenant, id) IN (SELECT tenant, id FROM responses WHERE expires_ms <= " +
                     p(1) + " LIMIT " + std::to_string(kSweepRows) + ")",
                 {now_ms}, {});
  }
  if (!e.empty()) {
    impl_->fail(std::move(e));
    return false;
  }
  impl_->ok();
  return true;
}

std::optional<bool> ResponseTable::erase(std::string_view tenant, std::string_view id) {
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return std::nullopt;
  bool found = false;
  const std::string sql =
      "DELETE FROM responses WHERE tenant = " + impl_->p(1) + " AND id = " + impl_->p(2) + " RETURNING id";
  auto e = c->query(sql, {std::string(tenant), std::string(id)}, [&found](std::vector<Value>&) { found = true; });
  if (!e.empty()) {
    impl_->fail(std::move(e));
    return std::nullopt;
  }
  impl_->ok();
  return found;
}

bool ResponseTable::up() const { return impl_->up; }

std::string ResponseTable::error() const {
  std::lock_guard lock(impl_->error_mu);
  return impl_->last_error;
}

}  // namespace sluice::history
