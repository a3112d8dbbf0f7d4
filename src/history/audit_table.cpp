// The audit trail (audit_table.hpp).
#include "history/audit_table.hpp"

#include <deque>

#include "common/text.hpp"
#include "history/own_connection.hpp"

namespace sluice::history {

struct AuditTable::Impl : OwnConnection {
  using OwnConnection::OwnConnection;
  std::deque<AuditRow> pending;  // not yet written (the database was down); under `mu`
  std::atomic<std::size_t> pending_n{0};
  std::atomic<std::uint64_t> dropped{0};

  // Writes what waits, oldest first; false when the database failed. Under `mu`.
  bool flush() {
    if (pending.empty()) return true;
    Connection* c = connection();
    if (!c) return false;
    const std::string sql = "INSERT INTO audit (unix_ms, instance, request_id, actor, action, target, status, detail) VALUES (" +
                            p(1) + ", " + p(2) + ", " + p(3) + ", " + p(4) + ", " + p(5) + ", " + p(6) + ", " + p(7) +
                            ", " + p(8) + ")";
    while (!pending.empty()) {
      const AuditRow& r = pending.front();
      auto e = c->query(sql,
                        {r.unix_ms, r.instance, r.request_id, r.actor, r.action, r.target, std::int64_t{r.status}, r.detail},
                        [](std::vector<Value>&) {});
      if (!e.empty()) {
        fail(std::move(e));
        return false;
      }
      pending.pop_front();
      pending_n.store(pending.size());
    }
    ok();
    return true;
  }
};

void append_json(std::string& out, const AuditRow& r) {
  out += R"({"unix_ms":)" + std::to_string(r.unix_ms);
  append_json_member(out, "instance", r.instance);
  append_json_member(out, "request_id", r.request_id);
  append_json_member(out, "actor", r.actor);
  append_json_member(out, "action", r.action);
  append_json_member(out, "target", r.target);
  out += R"(,"status":)" + std::to_string(r.status) + R"(,"detail":)";
  out += r.detail.empty() ? std::string_view("{}") : std::string_view(r.detail);  // (made by admin.cpp: a JSON object)
  out += "}";
}

AuditTable::AuditTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AuditTable::~AuditTable() = default;

std::unique_ptr<AuditTable> AuditTable::create(const config::HistorySettings& settings) {
  if (settings.backend == config::HistoryBackend::none) return nullptr;
  return std::unique_ptr<AuditTable>(new AuditTable(std::make_unique<Impl>(settings)));
}

bool AuditTable::write(AuditRow row) {
  std::lock_guard lock(impl_->mu);
  auto& q = impl_->pending;
  q.push_back(std::move(row));
  if (q.size() > kMaxPending) {
    q.pop_front();
    impl_->dropped.fetch_add(1);
  }
  impl_->pending_n.store(q.size());
  return impl_->flush();
}

Result AuditTable::list(const AuditQuery& q) {
  Result res;
  std::lock_guard lock(impl_->mu);
  impl_->flush();  // what waited goes in first, if it can
  Connection* c = impl_->connection();
  if (!c) {
    res.error = "history database unavailable: " + impl_->error();
    res.unavailable = true;
    return res;
  }
  std::string sql = "SELECT unix_ms, instance, request_id, actor, action, target, status, detail FROM audit WHERE unix_ms >= " +
                    impl_->p(1);
  std::vector<Value> params{q.since_ms};
  auto add = [&](std::string_view column, const std::string& v) {
    if (v.empty()) return;
    params.emplace_back(v);
    sql += " AND " + std::string(column) + " = " + impl_->p(static_cast<int>(params.size()));
  };
  if (q.until_ms > 0) {
    params.emplace_back(q.until_ms);
    sql += " AND unix_ms < " + impl_->p(static_cast<int>(params.size()));
  }
  add("actor", q.actor);
  add("action", q.action);
  add("target", q.target);
  sql += " ORDER BY unix_ms DESC LIMIT " + std::to_string(q.limit);
  std::string& body = res.body;
  body = R"({"audit":[)";
  bool first = true;
  auto e = c->query(sql, params, [&](std::vector<Value>& v) {
    auto text = [&v](std::size_t i) {
      auto* s = std::get_if<std::string>(&v[i]);
      return s ? std::move(*s) : std::string();
    };
    auto number = [&v](std::size_t i) {
      auto* n = std::get_if<std::int64_t>(&v[i]);
      return n ? *n : 0;
    };
    const AuditRow row{number(0), text(1), text(2), text(3), text(4), text(5), static_cast<int>(number(6)), text(7)};
    if (!first) body += ',';
    first = false;
    append_json(body, row);
  });
  if (!e.empty()) {
    impl_->fail(e);
    res.body.clear();
    res.error = "history database unavailable: " + e;
    res.unavailable = true;
    return res;
  }
  impl_->ok();
  body += "]}";
  return res;
}

std::size_t AuditTable::pending() const { return impl_->pending_n.load(); }
std::uint64_t AuditTable::dropped() const { return impl_->dropped.load(); }
bool AuditTable::up() const { return impl_->up.load(); }

}  // namespace sluice::history
