// The fleet's runtime state in the database (control_table.hpp).
#include "history/control_table.hpp"

#include "history/own_connection.hpp"

namespace sluice::history {

namespace {

constexpr std::string_view kColumns =
    "name, digest, masked, tenant, tier, models, role, max_in_flight, priority, max_priority, guardrails, "
    "expires_ms, enabled, created_ms, updated_ms, created_by, old_digest, old_until_ms, revision, budget_tokens, "
    "budget_per";
constexpr int kColumnCount = 21;

// Aliases hold no newline (config: an alias is an identifier).
std::string join_models(const std::vector<std::string>& models) {
  std::string out;
  for (const auto& m : models) out += (out.empty() ? "" : "\n") + m;
  return out;
}

std::vector<std::string> split_models(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto nl = s.find('\n');
    out.emplace_back(s.substr(0, nl));
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return out;
}

Value text_or_null(const std::string& s) { return s.empty() ? Value{} : Value{s}; }
Value number_or_null(std::int64_t n) { return n < 0 ? Value{} : Value{n}; }

// The row's values in kColumns order.
std::vector<Value> values(const KeyRow& r) {
  return {r.name,          r.digest,
          r.masked,        r.tenant,
          r.tier,          join_models(r.models),
          r.role,          r.max_in_flight,
          text_or_null(r.priority), text_or_null(r.max_priority),
          text_or_null(r.guardrails), number_or_null(r.expires_ms),
          std::int64_t{r.enabled ? 1 : 0}, r.created_ms,
          r.updated_ms,    text_or_null(r.created_by),
          text_or_null(r.old_digest), number_or_null(r.old_until_ms),
          r.revision,      number_or_null(r.budget_tokens),
          text_or_null(r.budget_per)};
}

KeyRow row_of(std::vector<Value>& v) {
  auto text = [&v](std::size_t i) {
    auto* s = std::get_if<std::string>(&v[i]);
    return s ? std::move(*s) : std::string();
  };
  auto number = [&v](std::size_t i, std::int64_t none) {
    auto* n = std::get_if<std::int64_t>(&v[i]);
    return n ? *n : none;
  };
  KeyRow r;
  r.name = text(0);
  r.digest = text(1);
  r.masked = text(2);
  r.tenant = text(3);
  r.tier = text(4);
  r.models = split_models(text(5));
  r.role = text(6);
  r.max_in_flight = number(7, -1);
  r.priority = text(8);
  r.max_priority = text(9);
  r.guardrails = text(10);
  r.expires_ms = number(11, -1);
  r.enabled = number(12, 0) != 0;
  r.created_ms = number(13, 0);
  r.updated_ms = number(14, 0);
  r.created_by = text(15);
  r.old_digest = text(16);
  r.old_until_ms = number(17, -1);
  r.revision = number(18, 0);
  r.budget_tokens = number(19, -1);
  r.budget_per = text(20);
  if (v.size() > kColumnCount) r.last_used_ms = number(kColumnCount, -1);  // (read, never written by insert or update)
  return r;
}

}  // namespace

struct ControlTable::Impl : OwnConnection {
  using OwnConnection::OwnConnection;

  std::string placeholders(int from, int n) const {
    std::string out;
    for (int i = 0; i < n; ++i) out += (i ? ", " : "") + p(from + i);
    return out;
  }

  // `change` in one write transaction with the version's bump; `changed` says whether it
  // touched a row (false: exists / not_found, as the caller says, and nothing is bumped).
  Write write(Write when_untouched, const std::function<std::string(Connection&, bool& changed)>& change) {
    std::lock_guard lock(mu);
    Connection* c = connection();
    if (!c) return Write::failed;
    const bool pg = c->dialect() == Dialect::postgres;
    bool changed = false;
    std::string e = c->exec(pg ? "BEGIN" : "BEGIN IMMEDIATE");
    if (e.empty()) e = change(*c, changed);
    if (e.empty() && changed) e = c->exec("UPDATE control_version SET version = version + 1 WHERE id = 1");
    if (e.empty()) e = c->exec("COMMIT");
    if (!e.empty()) {
      c->exec("ROLLBACK");
      fail(std::move(e));
      return Write::failed;
    }
    ok();
    return changed ? Write::ok : when_untouched;
  }
};

ControlTable::ControlTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlTable::~ControlTable() = default;

std::unique_ptr<ControlTable> ControlTable::create(const config::HistorySettings& settings, std::string* error) {
  if (settings.backend == config::HistoryBackend::none) {
    if (error) *error = "the key store needs the history's database (history.backend sqlite or postgres)";
    return nullptr;
  }
  return std::unique_ptr<ControlTable>(new ControlTable(std::make_unique<Impl>(settings)));
}

std::optional<std::int64_t> ControlTable::version() {
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return std::nullopt;
  std::int64_t v = -1;
  auto e = c->query("SELECT version FROM control_version WHERE id = 1", {}, [&v](std::vector<Value>& row) {
    if (auto* n = std::get_if<std::int64_t>(&row[0])) v = *n;
  });
  if (!e.empty()) {
    impl_->fail(std::move(e));
    return std::nullopt;
  }
  impl_->ok();
  return v;
}

std::optional<ControlState> ControlTable::read() {
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return std::nullopt;
  const bool pg = c->dialect() == Dialect::postgres;
  ControlState st;
  // One snapshot: the version and the rows it counts.
  std::string e = c->exec(pg ? "BEGIN ISOLATION LEVEL REPEATABLE READ" : "BEGIN");
  if (e.empty()) {
    e = c->query("SELECT version FROM control_version WHERE id = 1", {}, [&st](std::vector<Value>& row) {
      if (auto* n = std::get_if<std::int64_t>(&row[0])) st.version = *n;
    });
  }
  if (e.empty()) {
    e = c->query("SELECT " + std::string(kColumns) + ", last_used_ms FROM api_keys ORDER BY name", {},
                 [&st](std::vector<Value>& row) { st.keys.push_back(row_of(row)); });
  }
  if (e.empty()) {
    e = c->query("SELECT name, drained_by, since_ms FROM backend_drains ORDER BY name", {},
                 [&st](std::vector<Value>& row) {
                   DrainRow d;
                   if (auto* s = std::get_if<std::string>(&row[0])) d.name = std::move(*s);
                   if (auto* s = std::get_if<std::string>(&row[1])) d.by = std::move(*s);
                   if (auto* n = std::get_if<std::int64_t>(&row[2])) d.since_ms = *n;
                   st.drains.push_back(std::move(d));
                 });
  }
  if (e.empty()) {
    e = c->query("SELECT alias, weight, set_by, since_ms FROM canary_weights ORDER BY alias", {},
                 [&st](std::vector<Value>& row) {
                   CanaryRow r;
                   if (auto* s = std::get_if<std::string>(&row[0])) r.alias = std::move(*s);
                   if (auto* d = std::get_if<double>(&row[1])) r.weight = *d;
                   else if (auto* n = std::get_if<std::int64_t>(&row[1])) r.weight = static_cast<double>(*n);
                   if (auto* s = std::get_if<std::string>(&row[2])) r.by = std::move(*s);
                   if (auto* n = std::get_if<std::int64_t>(&row[3])) r.since_ms = *n;
                   st.canaries.push_back(std::move(r));
                 });
  }
  if (e.empty()) e = c->exec("COMMIT");
  if (!e.empty()) {
    c->exec("ROLLBACK");
    impl_->fail(std::move(e));
    return std::nullopt;
  }
  impl_->ok();
  return st;
}

ControlTable::Write ControlTable::insert(const KeyRow& row) {
  return impl_->write(Write::exists, [&](Connection& c, bool& changed) {
    const std::string sql = "INSERT INTO api_keys (" + std::string(kColumns) + ") VALUES (" +
                            impl_->placeholders(1, kColumnCount) + ") ON CONFLICT DO NOTHING RETURNING name";
    return c.query(sql, values(row), [&changed](std::vector<Value>&) { changed = true; });
  });
}

ControlTable::Write ControlTable::update(const KeyRow& row) {
  bool exists = false;
  const auto w = impl_->write(Write::not_found, [&](Connection& c, bool& changed) {
    const auto& p = [this](int n) { return impl_->p(n); };
    // Every column but created_ms and created_by (values() indexes 13 and 15), by name and
    // revision.
    auto all = values(row);
    std::vector<Value> v;
    v.reserve(19);
    for (int i : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 17, 18, 19, 20}) v.push_back(std::move(all[i]));  // 18: revision
    const std::string sql =
        "UPDATE api_keys SET digest = " + p(2) + ", masked = " + p(3) + ", tenant = " + p(4) + ", tier = " + p(5) +
        ", models = " + p(6) + ", role = " + p(7) + ", max_in_flight = " + p(8) + ", priority = " + p(9) +
        ", max_priority = " + p(10) + ", guardrails = " + p(11) + ", expires_ms = " + p(12) + ", enabled = " + p(13) +
        ", updated_ms = " + p(14) + ", old_digest = " + p(15) + ", old_until_ms = " + p(16) +
        ", budget_tokens = " + p(18) + ", budget_per = " + p(19) +
        ", revision = revision + 1 WHERE name = " + p(1) + " AND revision = " + p(17) + " RETURNING name";
    std::string e = c.query(sql, v, [&changed](std::vector<Value>&) { changed = true; });
    if (e.empty() && !changed) {  // gone, or changed by someone else meanwhile?
      e = c.query("SELECT 1 FROM api_keys WHERE name = " + p(1), {row.name},
                  [&exists](std::vector<Value>&) { exists = true; });
    }
    return e;
  });
  return w == Write::not_found && exists ? Write::conflict : w;
}

ControlTable::Write ControlTable::erase(std::string_view name) {
  return impl_->write(Write::not_found, [&](Connection& c, bool& changed) {
    return c.query("DELETE FROM api_keys WHERE name = " + impl_->p(1) + " RETURNING name", {std::string(name)},
                   [&changed](std::vector<Value>&) { changed = true; });
  });
}

bool ControlTable::touch(const std::vector<std::pair<std::string, std::int64_t>>& used) {
  if (used.empty()) return true;
  std::lock_guard lock(impl_->mu);
  Connection* c = impl_->connection();
  if (!c) return false;
  const bool pg = c->dialect() == Dialect::postgres;
  const std::string sql = "UPDATE api_keys SET last_used_ms = " + impl_->p(1) + " WHERE name = " + impl_->p(2) +
                          " AND (last_used_ms IS NULL OR last_used_ms < " + impl_->p(1) + ")";
  std::string e = c->exec(pg ? "BEGIN" : "BEGIN IMMEDIATE");
  for (std::size_t i = 0; e.empty() && i < used.size(); ++i) e = c->query(sql, {used[i].second, used[i].first}, {});
  if (e.empty()) e = c->exec("COMMIT");
  if (!e.empty()) {
    c->exec("ROLLBACK");
    impl_->fail(std::move(e));
    return false;
  }
  impl_->ok();
  return true;
}

ControlTable::Write ControlTable::drain(const DrainRow& row) {
  return impl_->write(Write::exists, [&](Connection& c, bool& changed) {
    return c.query("INSERT INTO backend_drains (name, drained_by, since_ms) VALUES (" + impl_->placeholders(1, 3) +
                       ") ON CONFLICT DO NOTHING RETURNING name",
                   {row.name, row.by.empty() ? Value{} : Value{row.by}, row.since_ms},
                   [&changed](std::vector<Value>&) { changed = true; });
  });
}

ControlTable::Write ControlTable::undrain(std::string_view name) {
  return impl_->write(Write::not_found, [&](Connection& c, bool& changed) {
    return c.query("DELETE FROM backend_drains WHERE name = " + impl_->p(1) + " RETURNING name", {std::string(name)},
                   [&changed](std::vector<Value>&) { changed = true; });
  });
}

ControlTable::Write ControlTable::set_canary(const CanaryRow& row) {
  return impl_->write(Write::ok, [&](Connection& c, bool& changed) {
    return c.query("INSERT INTO canary_weights (alias, weight, set_by, since_ms) VALUES (" + impl_->placeholders(1, 4) +
                       ") ON CONFLICT (alias) DO UPDATE SET weight = excluded.weight, set_by = excluded.set_by, "
                       "since_ms = excluded.since_ms RETURNING alias",
                   {row.alias, row.weight, row.by.empty() ? Value{} : Value{row.by}, row.since_ms},
                   [&changed](std::vector<Value>&) { changed = true; });
  });
}

ControlTable::Write ControlTable::clear_canary(std::string_view alias) {
  return impl_->write(Write::not_found, [&](Connection& c, bool& changed) {
    return c.query("DELETE FROM canary_weights WHERE alias = " + impl_->p(1) + " RETURNING alias", {std::string(alias)},
                   [&changed](std::vector<Value>&) { changed = true; });
  });
}

bool ControlTable::up() const { return impl_->up; }

std::string ControlTable::error() const { return impl_->error(); }

}  // namespace sluice::history
