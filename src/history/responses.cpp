// Stored responses in the history's database (responses.hpp).
#include "history/responses.hpp"

#include "config/records.hpp"
#include "history/own_connection.hpp"

namespace sluice::history {

namespace {

// Expired rows are deleted every this many writes, this many at a time: the table stays
// near what the TTL holds without a sweep that takes the database for long.
constexpr int kSweepEvery = 64;
constexpr int kSweepRows = 256;

}  // namespace

struct ResponseTable::Impl : OwnConnection {
  using OwnConnection::OwnConnection;
  int writes = 0;
};

ResponseTable::ResponseTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ResponseTable::~ResponseTable() = default;

std::unique_ptr<ResponseTable> ResponseTable::create(const config::HistorySettings& settings, std::string* error) {
  if (settings.backend == config::HistoryBackend::none) {
    if (error) *error = "responses.store database needs the history's database (records.history)";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>(settings);
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

std::string ResponseTable::error() const { return impl_->error(); }

}  // namespace sluice::history
