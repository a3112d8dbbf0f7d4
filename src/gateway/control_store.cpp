#include "gateway/control_store.hpp"

#include <openssl/rand.h>

#include <boost/json.hpp>
#include <chrono>
#include <iostream>
#include <stdexcept>

#include "common/text.hpp"
#include "config/checks.hpp"
#include "gateway/control_notify.hpp"
#include "history/control_table.hpp"

namespace sluice::gateway {

namespace json = boost::json;
namespace cfgd = config::detail;  // the configuration's own checks: a key here is checked as in the file

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "sk-" and 52 characters of base32 (lower case, no '-': the masked form shows only the
// last four): 256 random bits.
std::string new_secret() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) throw std::runtime_error("no random bytes for a key");
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string out = "sk-";
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : raw) {
    acc = acc << 8 | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += kAlphabet[(acc >> bits) & 31];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (5 - bits)) & 31];
  return out;
}

ReconcileAnswer fail(Reason r, std::string message, std::string param = {}) {
  return {r, std::move(message), std::move(param)};
}

ReconcileAnswer answer(json::object o, int status = 200) {
  ReconcileAnswer a{Reason::ok, json::serialize(o), {}};
  a.status = status;
  return a;
}

ReconcileAnswer store_down(const history::ControlTable& t) {
  return fail(Reason::store_unavailable, "the key store's database is unavailable: " + t.error());
}

json::value text_or_null(const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); }
json::value number_or_null(std::int64_t n) { return n < 0 ? json::value(nullptr) : json::value(n); }

json::array models_json(const std::vector<std::string>& models) {
  json::array a;
  for (const auto& m : models) a.emplace_back(m);
  return a;
}

std::optional<config::QuotaPeriod> period_from_name(std::string_view s) {
  for (auto p : {config::QuotaPeriod::minute, config::QuotaPeriod::hour, config::QuotaPeriod::day, config::QuotaPeriod::month}) {
    if (config::to_string(p) == s) return p;
  }
  return std::nullopt;
}

// (What is shown is what is enforced: to_stored() takes the same.)
json::value budget_json(std::int64_t tokens, std::string_view per) {
  if (tokens <= 0 || !period_from_name(per)) return nullptr;
  return json::object{{"tokens", tokens}, {"per", per}};
}

json::object row_json(const history::KeyRow& r) {
  return {{"name", r.name},
          {"source", "store"},
          {"key", r.masked},
          {"tenant", r.tenant},
          {"tier", r.tier},
          {"models", models_json(r.models)},
          {"role", r.role},
          {"max_in_flight", number_or_null(r.max_in_flight)},
          {"priority", text_or_null(r.priority)},
          {"max_priority", text_or_null(r.max_priority)},
          {"guardrails", text_or_null(r.guardrails)},
          {"budget", budget_json(r.budget_tokens, r.budget_per)},
          {"enabled", r.enabled},
          {"expires_ms", number_or_null(r.expires_ms)},
          {"created_ms", r.created_ms},
          {"updated_ms", r.updated_ms},
          {"created_by", text_or_null(r.created_by)},
          {"old_key_valid_until_ms", number_or_null(r.old_digest.empty() ? -1 : r.old_until_ms)},
          {"last_used_ms", number_or_null(r.last_used_ms)}};
}

json::object config_json(const keys::Entry& e) {
  const auto& k = e.key;
  return {{"name", k.name},
          {"source", "config"},
          {"read_only", true},
          {"key", e.masked},
          {"tenant", k.tenant},
          {"tier", k.tier},
          {"models", models_json(k.models)},
          {"role", k.admin ? "admin" : "user"},
          {"max_in_flight", number_or_null(k.max_in_flight)},
          {"priority", k.priority ? json::value(std::string(config::to_string(*k.priority))) : json::value(nullptr)},
          {"max_priority",
           k.max_priority ? json::value(std::string(config::to_string(*k.max_priority))) : json::value(nullptr)},
          {"guardrails", text_or_null(k.guardrails)},
          {"budget", budget_json(k.budget_tokens, config::to_string(k.budget_per))},
          {"enabled", true}};
}

keys::Stored to_stored(const history::KeyRow& r) {
  keys::Stored s;
  s.key.name = r.name;
  s.key.tenant = r.tenant;
  s.key.tier = r.tier;
  s.key.models = r.models;
  s.key.admin = r.role == "admin";
  s.key.viewer = r.role == "viewer";
  s.key.max_in_flight = static_cast<int>(r.max_in_flight);
  s.key.priority = config::priority_from_name(r.priority);
  s.key.max_priority = config::priority_from_name(r.max_priority);
  s.key.guardrails = r.guardrails;
  if (const auto per = period_from_name(r.budget_per); per && r.budget_tokens > 0) {
    s.key.budget_tokens = r.budget_tokens;
    s.key.budget_per = *per;
  }
  s.masked = r.masked;
  s.enabled = r.enabled && keys::parse_digest(r.digest, s.digest);  // a digest that is not one finds nothing
  s.has_old = !r.old_digest.empty() && keys::parse_digest(r.old_digest, s.old_digest);
  s.old_until_ms = r.old_until_ms;
  s.expires_ms = r.expires_ms;
  return s;
}

// A duration as the configuration writes it (ms, s, m, h), or whole days ("30d"), at least
// `min`.
bool parse_span(std::string_view s, config::Millis min, config::Millis& out) {
  if (s.size() >= 2 && s.back() == 'd') {
    std::int64_t days = 0;
    for (char c : s.substr(0, s.size() - 1)) {
      if (c < '0' || c > '9' || days > 36500) return false;
      days = days * 10 + (c - '0');
    }
    if (days > 36500) return false;  // a century, as the configuration's bound
    out = config::Millis{days * 86'400'000};
    return out >= min;
  }
  return cfgd::check_duration(s, min, out).empty();
}

// The fields a request body may set, read into `row`. `creating`: name is needed.
ReconcileAnswer read_fields(const json::object& body, history::KeyRow& row, bool creating,
                            const ControlStore::Names& names) {
  static constexpr std::string_view kKnown[] = {"name",         "tenant",     "tier",       "models",
                                                "role",         "max_in_flight", "priority", "max_priority",
                                                "guardrails",   "expires_ms", "expires_in", "enabled",
                                                "budget"};
  for (const auto& [k, v] : body) {
    if (std::find(std::begin(kKnown), std::end(kKnown), std::string_view(k)) == std::end(kKnown)) {
      return fail(Reason::invalid_request, "unknown field " + cfgd::q(k), std::string(k));
    }
    (void)v;
  }
  const auto ident = [&](std::string_view field, std::string& out) -> std::optional<ReconcileAnswer> {
    const auto* v = body.if_contains(field);
    if (!v) return std::nullopt;
    if (!v->is_string()) return fail(Reason::invalid_request, std::string(field) + ": expected a string", std::string(field));
    std::string s(v->get_string());
    if (auto e = cfgd::check_ident(s); !e.empty()) return fail(Reason::invalid_request, std::string(field) + ": " + e, std::string(field));
    // A stored key's name is a path segment of /admin/keys/<name>.
    if (field == "name" && s.find('/') != std::string::npos) {
      return fail(Reason::invalid_request, "name: a key's name may not hold '/'", "name");
    }
    out = std::move(s);
    return std::nullopt;
  };
  if (creating) {
    if (!body.if_contains("name")) return fail(Reason::invalid_request, "name: required", "name");
    if (auto e = ident("name", row.name)) return *e;
  } else if (body.if_contains("name")) {
    return fail(Reason::invalid_request, "name: a key's name does not change (create another)", "name");
  }
  if (auto e = ident("tenant", row.tenant)) return *e;
  if (auto e = ident("tier", row.tier)) return *e;
  if (const auto* v = body.if_contains("models")) {
    if (!v->is_array() || v->get_array().empty()) {
      return fail(Reason::invalid_request, "models: expected a non-empty list of model aliases (or \"*\")", "models");
    }
    row.models.clear();
    for (const auto& m : v->get_array()) {
      if (!m.is_string()) return fail(Reason::invalid_request, "models: expected strings", "models");
      std::string alias(m.get_string());
      if (alias != "*" && !names.alias(alias)) {
        return fail(Reason::invalid_request, "models: unknown model alias " + cfgd::q(alias), "models");
      }
      row.models.push_back(std::move(alias));
    }
  }
  if (const auto* v = body.if_contains("role")) {
    if (!v->is_string() || (v->get_string() != "user" && v->get_string() != "admin" && v->get_string() != "viewer")) {
      return fail(Reason::invalid_request, "role: expected user, admin or viewer", "role");
    }
    row.role = std::string(v->get_string());
  }
  if (const auto* v = body.if_contains("budget")) {
    // {"tokens": N, "per": "month"}: the key's own token quota; null: none.
    constexpr std::string_view kWhat = R"(budget: expected {"tokens": 1 to 99999999999999, "per": "minute", "hour", "day" or "month"}, or null)";
    if (v->is_null()) {
      row.budget_tokens = -1;
      row.budget_per.clear();
    } else {
      const auto* o = v->if_object();
      const auto* tokens = o ? o->if_contains("tokens") : nullptr;
      const auto* per = o ? o->if_contains("per") : nullptr;
      const bool ok = o && o->size() == 2 && tokens && per && tokens->is_int64() && tokens->get_int64() >= 1 &&
                      tokens->get_int64() <= 99'999'999'999'999 && per->is_string() &&
                      period_from_name(per->get_string());
      if (!ok) return fail(Reason::invalid_request, std::string(kWhat), "budget");
      row.budget_tokens = tokens->get_int64();
      row.budget_per = std::string(per->get_string());
    }
  }
  if (const auto* v = body.if_contains("max_in_flight")) {
    if (v->is_null()) row.max_in_flight = -1;
    else if (!v->is_int64() || v->get_int64() < 0 || v->get_int64() > 1'000'000) {
      return fail(Reason::invalid_request, "max_in_flight: expected an integer from 0 to 1000000, or null",
                  "max_in_flight");
    } else {
      row.max_in_flight = v->get_int64();
    }
  }
  for (auto [field, out] : {std::pair{"priority", &row.priority}, std::pair{"max_priority", &row.max_priority}}) {
    const auto* v = body.if_contains(field);
    if (!v) continue;
    if (v->is_null()) out->clear();
    else if (!v->is_string() || !config::priority_from_name(v->get_string())) {
      return fail(Reason::invalid_request, std::string(field) + ": expected vip, premium, standard or null", field);
    } else {
      *out = std::string(v->get_string());
    }
  }
  if (const auto* v = body.if_contains("guardrails")) {
    if (v->is_null()) row.guardrails.clear();
    else if (!v->is_string() || (v->get_string() != "none" && !names.guardrails(v->get_string()))) {
      return fail(Reason::invalid_request, "guardrails: expected a configured policy, none or null", "guardrails");
    } else {
      row.guardrails = std::string(v->get_string());
    }
  }
  const std::int64_t now = now_ms();
  if (body.if_contains("expires_ms") && body.if_contains("expires_in")) {
    return fail(Reason::invalid_request, "expires_ms and expires_in: one or the other", "expires_in");
  }
  if (const auto* v = body.if_contains("expires_ms")) {
    if (v->is_null()) row.expires_ms = -1;
    else if (!v->is_int64() || v->get_int64() <= now) {
      return fail(Reason::invalid_request, "expires_ms: expected a Unix time in ms in the future, or null", "expires_ms");
    } else {
      row.expires_ms = v->get_int64();
    }
  }
  if (const auto* v = body.if_contains("expires_in")) {
    config::Millis d{};
    if (!v->is_string() || !parse_span(v->get_string(), config::Millis{1000}, d)) {
      return fail(Reason::invalid_request, "expires_in: expected a duration of at least 1s (\"30d\", \"12h\")",
                  "expires_in");
    }
    row.expires_ms = now + d.count();
  }
  if (const auto* v = body.if_contains("enabled")) {
    if (!v->is_bool()) return fail(Reason::invalid_request, "enabled: expected true or false", "enabled");
    row.enabled = v->get_bool();
  }
  return {};
}

std::optional<json::object> parse_object(std::string_view body, ReconcileAnswer& error) {
  if (body.empty()) return json::object{};
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    error = fail(Reason::bad_json, "the body must be a JSON object");
    return std::nullopt;
  }
  return std::move(v.get_object());
}

}  // namespace

ControlStore::ControlStore(const config::Config& cfg, std::shared_ptr<const keys::Hasher> hasher, Install install, Names names)
    : cfg_(cfg), hasher_(std::move(hasher)), install_(std::move(install)), names_(std::move(names)) {
  std::string err;
  table_ = history::ControlTable::create(cfg.history, &err);
  if (!table_) throw std::runtime_error("key_store: " + err);
  if (cfg.key_store.notify == config::ControlNotify::redis) {
    auto ep = parse_redis_url(cfg.redis.url, &err);
    if (!ep) throw std::runtime_error("key_store.notify: redis: " + err);
    notify_ = std::make_unique<ControlNotify>(std::move(*ep), cfg.redis.key_prefix + ":control");
  }
  sync();  // the store's keys before the first request, if it can be read now
  thread_ = std::thread([this] { run(); });
}

ControlStore::~ControlStore() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (notify_) notify_->stop();
  if (thread_.joinable()) thread_.join();
}

void ControlStore::run() {
  for (;;) {
    if (notify_) {
      notify_->wait(cfg_.key_store.poll);  // a notice, or the poll's time
      std::lock_guard lock(stop_mu_);
      if (stop_) return;
    } else {
      std::unique_lock lock(stop_mu_);
      if (stop_cv_.wait_for(lock, cfg_.key_store.poll, [this] { return stop_; })) return;
    }
    sync();
    report_use();
  }
}

void ControlStore::report_use() {
  const auto set = names_.in_force();
  std::vector<std::pair<std::string, std::int64_t>> used;
  std::vector<const keys::Entry*> told;
  for (const auto& e : set->entries()) {
    if (e->from_config) continue;
    const auto at = e->last_used_ms.load(std::memory_order_relaxed);
    if (at > e->reported_ms.load(std::memory_order_relaxed)) {
      used.emplace_back(e->key.name, at);
      told.push_back(e.get());
    }
  }
  if (used.empty() || !table_->touch(used)) return;  // (down: told at a later poll)
  for (std::size_t i = 0; i < told.size(); ++i) told[i]->reported_ms.store(used[i].second, std::memory_order_relaxed);
}

void ControlStore::committed() {
  sync();
  if (notify_) notify_->publish();
}

void ControlStore::sync() {
  std::lock_guard lock(sync_mu_);
  const auto v = table_->version();
  if (!v) return;  // down: the keys in force stay
  last_sync_ms_ = now_ms();
  if (*v == version_) return;
  auto st = table_->read();
  if (!st) return;
  std::vector<keys::Stored> stored;
  stored.reserve(st->keys.size());
  for (const auto& r : st->keys) stored.push_back(to_stored(r));
  install_.keys(std::move(stored));
  std::unordered_set<std::string> drained;
  for (const auto& d : st->drains) drained.insert(d.name);
  install_.drains(std::move(drained));
  std::unordered_map<std::string, double> weights;
  for (const auto& c : st->canaries) weights.emplace(c.alias, c.weight);
  install_.canaries(std::move(weights));
  version_ = st->version;
  installed_version_ = st->version;
  keys_ = static_cast<std::int64_t>(st->keys.size());
  drains_ = static_cast<std::int64_t>(st->drains.size());
  ++syncs_;
}

ReconcileAnswer ControlStore::drain(std::string_view name, bool drain, const config::ApiKey& by) {
  // (exists: it already was drained; not_found: it was not: the same end state.)
  const auto w = drain ? table_->drain({std::string(name), by.name, now_ms()}) : table_->undrain(name);
  if (w == history::ControlTable::Write::failed) return store_down(*table_);
  committed();
  return {};
}

ReconcileAnswer ControlStore::set_canary(std::string_view alias, double weight, const config::ApiKey& by) {
  const auto w = weight >= 0 ? table_->set_canary({std::string(alias), weight, by.name, now_ms()})
                             : table_->clear_canary(alias);
  if (w == history::ControlTable::Write::failed) return store_down(*table_);
  committed();
  return {};
}

ReconcileAnswer ControlStore::handle(std::string_view method, std::string_view rest, std::string_view body,
                                     const keys::KeySet& current, const config::ApiKey& by) {
  // rest: "", "/", "/<name>" or "/<name>/<action>"; a stored key's name holds no '/'.
  std::string_view name, action;
  if (!rest.empty() && rest != "/") {
    rest.remove_prefix(1);
    const auto slash = rest.find('/');
    name = rest.substr(0, slash);
    if (slash != std::string_view::npos) {
      action = rest.substr(slash + 1);
      if (action.empty() || action.find('/') != std::string_view::npos) name = {};  // "x/", "x/a/b"
    }
    if (name.empty()) return fail(Reason::not_found, "use /admin/keys, /admin/keys/<name> or /admin/keys/<name>/<action>");
  }
  const bool read = method == "GET" || method == "HEAD";
  const bool known = read || method == "POST" || method == "PATCH" || method == "DELETE";
  if (!known) return fail(Reason::method_not_allowed, "use GET, POST, PATCH or DELETE for /admin/keys");
  if (!read && !by.admin) return fail(Reason::forbidden, "only a key with role admin may change keys");

  if (name.empty()) {  // the collection
    if (read) {
      auto st = table_->read();
      if (!st) return store_down(*table_);
      json::array list;
      for (const auto& e : current.entries()) {
        if (e->from_config) list.push_back(config_json(*e));
      }
      for (const auto& r : st->keys) {
        auto o = row_json(r);
        // A file key of the same name wins: this one is not in force (and may be deleted).
        if (const auto* e = current.find_name(r.name); e && e->from_config) o["shadowed_by_file"] = true;
        list.push_back(std::move(o));
      }
      return answer({{"keys", std::move(list)}, {"version", st->version}});
    }
    if (method != "POST") return fail(Reason::method_not_allowed, "use GET or POST for /admin/keys");
    ReconcileAnswer err;
    auto obj = parse_object(body, err);
    if (!obj) return err;
    history::KeyRow row;
    row.tenant = "default";
    row.tier = "standard";
    row.models = {"*"};
    row.role = "user";
    if (auto e = read_fields(*obj, row, true, names_); e.reason != Reason::ok) return e;
    if (const auto* e = current.find_name(row.name); e && e->from_config) {
      return fail(Reason::conflict, "a key named " + cfgd::q(row.name) + " is in the configuration file", "name");
    }
    const std::string secret = new_secret();
    row.digest = hasher_->hex(secret);
    row.masked = mask_key(secret);
    row.created_ms = row.updated_ms = now_ms();
    row.created_by = by.name;
    switch (table_->insert(row)) {
      case history::ControlTable::Write::ok: break;
      case history::ControlTable::Write::exists:
        return fail(Reason::conflict, "a key named " + cfgd::q(row.name) + " exists", "name");
      default: return store_down(*table_);
    }
    committed();
    auto o = row_json(row);
    o["secret"] = secret;  // this once
    return answer(std::move(o), 201);
  }

  // One key: the stored one of that name (even when a file key of the name shadows it: it
  // can be read and deleted), else the file's (read-only).
  if (!action.empty() && method != "POST") {
    return fail(Reason::method_not_allowed, "use POST for /admin/keys/<name>/" + std::string(action));
  }
  if (action.empty() && method == "POST") return fail(Reason::method_not_allowed, "use GET, PATCH or DELETE for a key");
  if (!action.empty() && action != "disable" && action != "enable" && action != "rotate") {
    return fail(Reason::not_found, "no action " + cfgd::q(action) + " (disable, enable, rotate)");
  }
  std::optional<json::object> patch;  // the body, read once
  if (method == "PATCH" || action == "rotate") {
    ReconcileAnswer err;
    patch = parse_object(body, err);
    if (!patch) return err;
  }
  // A change is made on the row as read and written only if nobody changed it meanwhile
  // (its revision): else it is read and made again.
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto st = table_->read();
    if (!st) return store_down(*table_);
    auto it = std::find_if(st->keys.begin(), st->keys.end(), [&](const history::KeyRow& r) { return r.name == name; });
    if (it == st->keys.end()) {
      if (const auto* e = current.find_name(name); e && e->from_config) {
        if (read) return answer(config_json(*e));
        return fail(Reason::forbidden, "key " + cfgd::q(name) + " is in the configuration file: change it there");
      }
      return fail(Reason::not_found, "no key named " + cfgd::q(name));
    }
    history::KeyRow row = *it;
    if (read) {
      auto o = row_json(row);
      if (const auto* e = current.find_name(row.name); e && e->from_config) o["shadowed_by_file"] = true;
      return answer(std::move(o));
    }
    if (method == "DELETE") {
      switch (table_->erase(name)) {
        case history::ControlTable::Write::ok: break;
        case history::ControlTable::Write::not_found: return fail(Reason::not_found, "no key named " + cfgd::q(name));
        default: return store_down(*table_);
      }
      committed();
      return answer({{"deleted", std::string(name)}});
    }
    json::object out;
    const std::int64_t now = now_ms();
    if (method == "PATCH") {
      if (auto e = read_fields(*patch, row, false, names_); e.reason != Reason::ok) return e;
    } else if (action == "disable" || action == "enable") {
      row.enabled = action == "enable";
    } else {  // rotate
      config::Millis grace{3600 * 1000};
      for (const auto& [k, v] : *patch) {
        if (k != "grace") return fail(Reason::invalid_request, "unknown field " + cfgd::q(k), std::string(k));
        if (!v.is_string() || !parse_span(v.get_string(), config::Millis{0}, grace)) {
          return fail(Reason::invalid_request, "grace: expected a duration (\"0s\", \"10m\", \"24h\", \"7d\")",
                      "grace");
        }
      }
      // One previous secret at a time: a second rotation within the first one's grace would
      // end that grace for the clients still on the first secret.
      if (!row.old_digest.empty() && row.old_until_ms > now && grace.count() > 0) {
        return fail(Reason::conflict,
                    "key " + cfgd::q(name) + " was rotated and its previous secret works until " +
                        std::to_string(row.old_until_ms) +
                        " (Unix ms): rotate again after that, or with {\"grace\":\"0s\"} to end it now",
                    "grace");
      }
      const std::string secret = new_secret();
      row.old_digest = grace.count() > 0 ? row.digest : std::string();
      row.old_until_ms = grace.count() > 0 ? now + grace.count() : -1;
      row.digest = hasher_->hex(secret);
      row.masked = mask_key(secret);
      out["secret"] = secret;
    }
    row.updated_ms = now;
    switch (table_->update(row)) {
      case history::ControlTable::Write::ok: break;
      case history::ControlTable::Write::conflict: continue;  // changed meanwhile: again
      case history::ControlTable::Write::not_found: return fail(Reason::not_found, "no key named " + cfgd::q(name));
      default: return store_down(*table_);
    }
    ++row.revision;
    committed();
    auto o = row_json(row);
    for (auto& [k, v] : out) o[k] = v;
    return answer(std::move(o));
  }
  return fail(Reason::conflict, "key " + cfgd::q(name) + " kept changing meanwhile; try again");
}

std::string ControlStore::status_json() const {
  json::object o{{"up", table_->up()},
                 {"version", installed_version_.load()},
                 {"keys", keys_.load()},
                 {"drained_backends", drains_.load()},
                 {"reads", syncs_.load()},
                 {"last_sync_ms", number_or_null(last_sync_ms_.load() > 0 ? last_sync_ms_.load() : -1)},
                 {"last_error", table_->error()}};
  return json::serialize(o);
}

}  // namespace sluice::gateway
