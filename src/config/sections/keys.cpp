// Client API keys: `keys`, `keys_file` and SLUICE_API_KEYS. Each entry's keys are declared
// once, in keys_table(); the secret (literal or from a variable) and the uniqueness of
// names and secrets are code.
#include <string>

#include "common/text.hpp"
#include "config/records.hpp"
#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

// A name (key, tenant, tier): letters, digits and . _ - : @ /.
Key<ApiKey> ident(std::string_view name, std::string ApiKey::*m, std::string doc) {
  return text(name, m, std::move(doc)).then([m](Loader& l, const YAML::Node& n, const std::string& p, ApiKey& k) {
    return l.report(check_ident(k.*m), p, n);
  });
}

const Table<ApiKey>& keys_table() {
  static const Table<ApiKey> t{
      "keys[]",
      {
          ident("name", &ApiKey::name, "Key id shown in logs. Unique across all keys.").needed(),
          ident("tenant", &ApiKey::tenant, "").with_default("`default`"),
          ident("tier", &ApiKey::tier, "Any name; not checked against a list."),
          custom<ApiKey>("models", "list of strings", "`[\"*\"]`",
                         "Aliases this key may use; `\"*\"` = all. Must not be empty; each entry must be `*` or a "
                         "configured alias.",
                         [](Loader& l, const YAML::Node& v, const std::string& p, ApiKey& k) {
                           if (!v.IsSequence()) {
                             l.fail(p, v, std::string("expected a list of model aliases, got ") + kind_of(v));
                             return false;
                           }
                           if (v.size() == 0) {
                             l.fail(p, v, "must list at least one model alias (or \"*\" for all)");
                             return false;
                           }
                           k.models.clear();
                           for (size_t i = 0; i < v.size(); ++i) {
                             const YAML::Node m = v[i];
                             const std::string mp = index(p, i);
                             std::string alias;
                             if (!l.get_string(m, mp, alias)) continue;
                             if (alias.empty()) {
                               l.fail(mp, m, "must not be empty");
                               continue;
                             }
                             k.models.push_back(alias);
                             l.key_origins_.back().models.push_back({mp, l.line_of(m)});
                           }
                           return true;
                         }),
          boolean("admin", &ApiKey::admin, "Sees `/metrics`, `/infra` and every tenant's `/history` (`docs/security.md`)."),
          custom<ApiKey>("key", "secret", "—",
                         "The secret, literally; at least 16 characters (a shorter one is an error naming the key, "
                         "never showing the secret). Exactly one of `key` and `key_env`."),
          custom<ApiKey>("key_env", "env var name", "—",
                         "Name of an environment variable holding the secret; it must be set and non-empty."),
          text("guardrails", &ApiKey::guardrails,
               "The `guardrails[]` policy screening this key's requests, instead of the route's; `none`: none.")
              .with_default("the route's"),
          integer("max_in_flight", &ApiKey::max_in_flight, 0, 1'000'000,
                  "Requests in flight for this key (0 = unlimited).")
              .with_default("`concurrency.per_key`"),
          custom<ApiKey>("priority", "`vip`, `premium` or `standard`",
                         "from `concurrency.tier_priority`, else `standard`", "The highest queue class of this key.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, ApiKey& k) {
                           Priority pr{};
                           if (!l.get_priority(n, p, pr)) return false;
                           k.priority = pr;
                           return true;
                         }),
          custom<ApiKey>("max_priority", "`vip`, `premium` or `standard`", "the key's own class",
                         "The highest class a request of this key may ask for (`X-Priority`) or be raised to by "
                         "urgency (`concurrency.urgent_keywords`); at least its own class.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, ApiKey& k) {
                           Priority pr{};
                           if (!l.get_priority(n, p, pr)) return false;
                           k.max_priority = pr;
                           return true;
                         }),
      }};
  return t;
}

const Enum<ControlNotify>& control_notify_enum() {
  static const Enum<ControlNotify> e{"notify", {{"poll", ControlNotify::poll}, {"redis", ControlNotify::redis}}};
  return e;
}

const Table<KeyStoreSettings>& key_store_table() {
  static const Table<KeyStoreSettings> t{
      "key_store",
      {
          boolean("enabled", &KeyStoreSettings::enabled,
                  "Keys managed at runtime through `/admin/keys`, kept in the history's database (SQLite or "
                  "PostgreSQL; `history.backend` must not be `none`) and seen by every instance sharing it "
                  "(`docs/admin.md`). The file's keys keep working and are read-only there."),
          text("secret", &KeyStoreSettings::secret,
               "The key of the HMAC-SHA256 the stored keys are kept under (never the secrets themselves): the same "
               "on every instance of a fleet, at least 16 characters. Changing it makes every stored key unusable. "
               "Prefer the environment variable to the file.")
              .with_default("none")
              .from_env("SLUICE_KEY_STORE_SECRET"),
          choice("notify", &KeyStoreSettings::notify, control_notify_enum(),
                 "How an instance learns of a change made on another: `poll` reads the store's version every "
                 "`poll`; `redis` also listens on Redis pub/sub (`redis.url`, channel `<key_prefix>:control`), on "
                 "which the instance that made a change publishes, so it is in force everywhere at once; polling "
                 "stays the fallback while Redis is down."),
          duration("poll", &KeyStoreSettings::poll, Millis{100},
                   "How often each instance reads the store's version (one small query); a change made on another "
                   "instance is in force here within this time."),
      }};
  return t;
}

void read_key(Loader& l, const YAML::Node& n, const std::string& path, ApiKey& k) {
  KeyOrigin& o = l.key_origins_.back();
  o.entry = {path, l.line_of(n)};
  k.tenant = "default";
  k.models = {"*"};
  Fields f;
  if (!keys_table().read(l, n, path, k, &f)) return;
  if (auto v = Loader::get(f, "name")) o.name = {join(path, "name"), l.line_of(*v)};

  const YAML::Node* lit = Loader::get(f, "key");
  const YAML::Node* var = Loader::get(f, "key_env");
  if (lit && var) {
    l.fail(path, n, "set only one of 'key' and 'key_env'");
  } else if (!lit && !var) {
    l.fail(path, n, "missing the secret: set 'key' or 'key_env'");
  } else if (lit) {
    const std::string p = join(path, "key");
    std::string s;
    if (l.get_string(*lit, p, s) && l.report(check_key_secret(s, k.name), p, *lit)) k.key = std::move(s);
    o.secret = {p, l.line_of(*lit)};
  } else {
    const std::string p = join(path, "key_env");
    std::string name;
    o.secret = {p, l.line_of(*var)};
    if (l.get_string(*var, p, name) && l.report(check_env_name(name), p, *var)) {
      auto val = l.getenv(name);
      if (!val) {
        l.fail(p, *var, "environment variable " + env_name_for_error(name) + " is not set");
      } else if (auto e = check_key_secret(*val, k.name); !e.empty()) {
        l.fail(p, *var, "environment variable " + env_name_for_error(name) + ": " + e);
      } else {
        k.key = *val;
      }
    }
  }
}

}  // namespace

void read_keys(Loader& l, const YAML::Node& n, const std::string& path, Config& c) {
  if (n.IsNull()) return;
  if (!n.IsSequence()) {
    l.fail(path, n, std::string("expected a list of keys, got ") + kind_of(n));
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    ApiKey k;
    l.key_origins_.emplace_back();
    read_key(l, n[i], index(path, i), k);
    c.keys.push_back(std::move(k));
  }
}

void read_keys_file(Loader& l, const YAML::Node& n, Config& c) {
  std::string rel;
  if (!l.get_string(n, "keys_file", rel)) return;
  if (rel.empty()) {
    l.error("keys_file", l.line_of(n), "must not be empty");
    return;
  }
  fs::path p(rel);
  if (p.is_relative()) p = l.base_dir() / p;
  std::string why;
  auto text = l.files().read(p.string(), why);
  if (!text) {
    l.error("keys_file", l.line_of(n), "cannot read " + p.string() + ": " + why);
    return;
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    l.error("keys_file", e.mark.line < 0 ? 0 : e.mark.line + 1, "invalid YAML in " + p.string() + ": " + e.msg);
    return;
  }
  const std::string suffix = " (in " + p.string() + ")";
  l.suffix_ = suffix;
  read_keys(l, root, "keys_file", c);
  l.suffix_ = {};
}

void keys_env_reference(std::vector<EnvDoc>& out) {
  out.push_back({"SLUICE_API_KEYS",
                 "adds keys: comma-separated `name:secret` pairs (split at the first `:`, spaces around items trimmed, "
                 "empty items skipped). Each gets tenant `default`, tier `standard`, models `[\"*\"]`, admin `false`."});
}

void keys_env(Loader& l, Config& c) {
  auto v = l.getenv("SLUICE_API_KEYS");
  if (!v) return;
  std::string_view rest = *v;
  size_t n = 0;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    if (!entry.empty()) {
      ++n;
      const auto colon = entry.find(':');
      ApiKey k;
      k.tenant = "default";
      k.models = {"*"};
      if (colon == std::string_view::npos) {
        l.error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + " is not name:secret");
      } else {
        k.name = std::string(trim(entry.substr(0, colon)));
        k.key = std::string(trim(entry.substr(colon + 1)));
        if (auto e = check_ident(k.name); !e.empty()) {
          l.error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + " name: " + e);
        } else if (auto e2 = check_key_secret(k.key, k.name); !e2.empty()) {
          l.error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + ": " + e2);
        } else {
          KeyOrigin o;
          o.entry = o.name = o.secret = {"env SLUICE_API_KEYS", 0};
          c.keys.push_back(std::move(k));
          l.key_origins_.push_back(std::move(o));
        }
      }
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

void check_keys(Loader& l, const Config& c, const std::unordered_map<std::string_view, size_t>& aliases,
                std::unordered_map<std::string_view, size_t>& names) {
  std::unordered_map<std::string_view, size_t> secrets;
  const auto& origins = l.key_origins_;
  for (size_t i = 0; i < c.keys.size(); ++i) {
    const ApiKey& k = c.keys[i];
    const KeyOrigin& o = origins[i];
    if (!k.name.empty()) {
      auto [it, fresh] = names.emplace(k.name, i);
      if (!fresh) {
        l.error(o.name.path, o.name.line,
                "duplicate key name " + q(k.name) + " (first used at " + origins[it->second].name.path + ")");
      }
    }
    if (!k.key.empty()) {
      auto [it, fresh] = secrets.emplace(k.key, i);
      if (!fresh) {
        // Never print the secret itself: name the other key instead.
        l.error(o.secret.path, o.secret.line,
                "duplicate secret: key " + q(k.name) + " has the same secret as key " + q(c.keys[it->second].name));
      }
    }
    for (size_t m = 0; m < k.models.size() && m < o.models.size(); ++m) {
      if (k.models[m] != "*" && !aliases.count(k.models[m])) {
        l.error(o.models[m].path, o.models[m].line, "unknown model alias " + q(k.models[m]));
      }
    }
  }
}

std::string describe_keys(const Config& c) {
  std::string out = "keys (" + std::to_string(c.keys.size()) + "):\n";
  for (const auto& k : c.keys) {
    out += "  " + k.name + " tenant=" + k.tenant + " tier=" + k.tier + " models=";
    for (size_t i = 0; i < k.models.size(); ++i) out += (i ? "," : "") + k.models[i];
    if (k.admin) out += " admin";
    out += " key=" + sluice::mask_key(k.key) + "\n";
  }
  return out;
}

void read_key_store(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  key_store_table().read(l, n, "key_store", c.key_store);
}

void key_store_env(Loader& l, Config& c) { key_store_table().apply_env(l, c.key_store); }

void check_key_store(Loader& l, const Config& c) {
  const auto& ks = c.key_store;
  if (!ks.enabled) return;
  if (c.history.backend == HistoryBackend::none) {
    l.error("key_store.enabled", 0, "the key store lives in the history's database: history.backend must not be none");
  }
  if (ks.secret.size() < kMinKeySecretLength) {
    l.error("key_store.secret", 0,
            "must be at least " + std::to_string(kMinKeySecretLength) +
                " characters (set it in the file or SLUICE_KEY_STORE_SECRET; the same on every instance)");
  }
}

void keys_reference(std::vector<TableDoc>& out) {
  out.push_back(keys_table().doc());
  out.push_back(key_store_table().doc());
}

}  // namespace sluice::config::detail
