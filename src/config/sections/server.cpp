// The top level of the file and the server section: instance, listen address, workers,
// access log, files, size limits, timeouts and the admin listener. The top-level table
// also names the section each other key belongs to.
#include <string>

#include "common/address.hpp"
#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Table<Config>& limits_table() {
  static const Table<Config> t{
      "limits",
      {
          integer("max_body_bytes", &Config::max_body_bytes, 1, kMaxI64, "Largest request body.")
              .with_default("1048576 (1 MiB)")
              .banner("body", " B"),
          integer("max_header_bytes", &Config::max_header_bytes, 1024, kMaxI64, "Largest request header block.")
              .banner("headers", " B"),
          integer("max_upstream_response_bytes", &Config::max_upstream_response_bytes, 1, kMaxI64,
                  "Largest non-streamed upstream answer.")
              .with_default("16777216 (16 MiB)")
              .banner("upstream response", " B"),
          integer("upstream_pool_per_host", &Config::upstream_pool_per_host, 0, 65536,
                  "Idle keep-alive upstream connections kept per host (per worker).")
              .banner("pool", " per host"),
          integer("max_connections", &Config::max_connections, 0, 10'000'000,
                  "Client connections open at once, over all workers; 0 = derived at start from the file "
                  "descriptor limit (see below).")
              .with_default("0 (auto)")
              .shown([](const Config& c) { return c.max_connections ? std::to_string(c.max_connections) : "auto"; })
              .banner("connections"),
          integer("max_messages", &Config::max_messages, 0, 100000,
                  "A chat request with more messages than this (system and developer messages aside; through "
                  "`/v1/messages`, each `tool_result` block is one) is refused with 400 `too_many_messages`; 0 = "
                  "no cap."),
      }};
  return t;
}

const Table<Timeouts>& timeouts_table() {
  const Millis positive{1};
  static const Table<Timeouts> t{
      "timeouts",
      {
          duration("connect", &Timeouts::connect, positive, "Connecting to an upstream.").banner("connect"),
          duration("first_token", &Timeouts::first_token, positive, "Request sent → first token.")
              .banner("first_token"),
          duration("idle", &Timeouts::idle, positive, "Gap between two upstream stream chunks.").banner("idle"),
          duration("total", &Timeouts::total, positive,
                   "Whole request, enforced also while an upstream keeps sending: the stream then ends with an "
                   "`upstream_timeout` error event; its last writes get 1 s more.")
              .banner("total"),
          duration("client_header", &Timeouts::client_header, positive, "Reading a request's headers and body.")
              .banner("client_header"),
          duration("keep_alive", &Timeouts::keep_alive, positive, "Idle client connection.").banner("keep_alive"),
          duration("client_first_byte", &Timeouts::client_first_byte, positive,
                   "A new client connection's first byte; a connection that sends nothing in that time is closed "
                   "without an answer (a shorter `keep_alive` wins).")
              .banner("client_first_byte"),
          duration("heartbeat", &Timeouts::heartbeat, positive, "`: keep-alive` comment while the upstream is silent.")
              .banner("heartbeat"),
          duration("client_write", &Timeouts::client_write, positive,
                   "A client that takes no byte of a reply for this long is dropped (its upstream request is "
                   "cancelled).")
              .banner("client_write"),
          duration("shutdown_grace", &Timeouts::shutdown_grace, Millis{0}, "Drain time at shutdown.")
              .banner("shutdown_grace"),
          duration("drain_delay", &Timeouts::drain_delay, Millis{0},
                   "On SIGTERM, before the listeners close: `/ready` answers 503 `draining` while requests are still "
                   "accepted and served, so that a load balancer or a Kubernetes endpoint controller takes the "
                   "instance out before a connection is refused; then `shutdown_grace` applies. SIGINT, or a second "
                   "SIGTERM, skips it.")
              .banner("drain_delay"),
      }};
  return t;
}

// The section as a whole: a certificate needs its key and the other way round; client
// certificates need a certificate of the server's own.
void check_tls(Loader& l, const ListenerTls& t, const std::string& p, int line) {
  if (t.cert_file.empty() != t.key_file.empty()) {
    l.error(p, line, t.cert_file.empty() ? "key_file is set without cert_file" : "cert_file is set without key_file");
  } else if (!t.client_ca_file.empty() && t.cert_file.empty()) {
    l.error(p, line, "client_ca_file needs cert_file and key_file (the listener must speak TLS to ask for client certificates)");
  }
}

// A PEM file of the tls section: relative to the config file's directory (to the working
// directory from the environment), and there at load.
Key<ListenerTls> tls_file(std::string_view name, std::string ListenerTls::*m, std::string doc) {
  return text(name, m, std::move(doc)).with_default("none").then(
      [m](Loader& l, const YAML::Node& n, const std::string& p, ListenerTls& t) {
        std::string& f = t.*m;
        if (f.empty()) {
          l.fail(p, n, "must not be empty (omit it, or the whole tls section, for none)");
          return true;
        }
        f = l.resolve_path(f);
        if (!l.files().is_regular_file(f)) l.fail(p, n, "file not found: " + f);
        return true;
      });
}

const Enum<ClientCerts>& client_certs_enum() {
  static const Enum<ClientCerts> e{"client_certs", {{"require", ClientCerts::require}, {"optional", ClientCerts::optional}}};
  return e;
}

const Enum<TlsMinVersion>& tls_version_enum() {
  static const Enum<TlsMinVersion> e{"TLS version", {{"1.2", TlsMinVersion::v1_2}, {"1.3", TlsMinVersion::v1_3}}};
  return e;
}

const Table<ListenerTls>& tls_table() {
  static const Table<ListenerTls> t{
      "tls",
      {
          tls_file("cert_file", &ListenerTls::cert_file,
                   "PEM certificate chain of the main listener, its own certificate first; set, the listener "
                   "speaks only HTTPS. Read again at every reload (SIGHUP, `POST /admin/reload`): a renewed "
                   "certificate serves new connections, open ones keep theirs.")
              .from_env("SLUICE_TLS_CERT_FILE", "(relative to the working directory)"),
          tls_file("key_file", &ListenerTls::key_file, "PEM private key of `cert_file` (unencrypted).")
              .from_env("SLUICE_TLS_KEY_FILE", "(relative to the working directory)"),
          tls_file("client_ca_file", &ListenerTls::client_ca_file,
                   "PEM certificates of the CAs that sign client certificates: set, clients must present one "
                   "they signed (mutual TLS, e.g. between a load balancer and the instances).")
              .from_env("SLUICE_TLS_CLIENT_CA_FILE", "(relative to the working directory)"),
          choice("client_certs", &ListenerTls::client_certs, client_certs_enum(),
                 "With `client_ca_file`: `require` refuses a handshake without a valid client certificate; "
                 "`optional` asks for one and refuses only an invalid one."),
          choice("min_version", &ListenerTls::min_version, tls_version_enum(),
                 "The oldest TLS version accepted (`\"1.2\"` or `\"1.3\"`)."),
          duration("check_interval", &ListenerTls::check_interval, Millis{0},
                   "How often the three files are checked for a change (modification time, size, inode: a "
                   "Kubernetes Secret's volume swaps them by a symlink); a change reads them again, as a reload "
                   "would, so renewed certificates are served without a signal. 0 = only at reloads."),
      }};
  return t;
}

const Table<Cors>& cors_table() {
  static const Table<Cors> t{
      "cors",
      {
          custom<Cors>("allowed_origins", "list of strings", "none (CORS off)",
                       "Origins whose browser clients may call the API: `scheme://host[:port]` exactly as the "
                       "browser sends it in `Origin`, or `\"*\"` for any. Preflights (`OPTIONS`) are then "
                       "answered, and replies to an allowed origin carry `Access-Control-Allow-Origin`.",
                       [](Loader& l, const YAML::Node& n, const std::string& p, Cors& c) {
                         if (!n.IsSequence()) {
                           l.fail(p, n, std::string("expected a list of origins, got ") + kind_of(n));
                           return false;
                         }
                         for (std::size_t i = 0; i < n.size(); ++i) {
                           std::string o;
                           if (!l.get_string(n[i], index(p, i), o)) continue;
                           const auto scheme = o.find("://");
                           const bool ok = o == "*" || ((o.starts_with("http://") || o.starts_with("https://")) &&
                                                        scheme + 3 < o.size() &&
                                                        o.find_first_of("/?#", scheme + 3) == std::string::npos &&
                                                        !has_space_or_ctl(o));
                           if (!ok) l.fail(index(p, i), n[i], "expected `scheme://host[:port]` without a path, or \"*\"");
                           else c.allowed_origins.push_back(std::move(o));
                         }
                         return true;
                       }),
          duration("max_age", &Cors::max_age, Millis{0}, "How long a browser may keep a preflight's answer."),
      }};
  return t;
}

const Enum<ResponsesBackend>& responses_backend_enum() {
  static const Enum<ResponsesBackend> e{"responses backend",
                                        {{"memory", ResponsesBackend::memory},
                                         {"redis", ResponsesBackend::redis},
                                         {"database", ResponsesBackend::database}}};
  return e;
}

const Table<ResponsesStore>& responses_table() {
  static const Table<ResponsesStore> t{
      "responses",
      {
          choice("store", &ResponsesStore::store, responses_backend_enum(),
                 "Where stored responses live: this instance's memory; Redis (the `redis` section) or the history's "
                 "database (`records.history`: SQLite, or PostgreSQL for a fleet), so that every instance sharing it "
                 "reads and continues them (with Redis and the database, this instance's memory also keeps them and "
                 "answers while that is down)."),
          duration("ttl", &ResponsesStore::ttl, Millis{1000},
                   "How long a stored response (`store`, the default) can be read back or continued with "
                   "`previous_response_id`."),
          integer("max_bytes", &ResponsesStore::max_bytes, 0, kMaxI64,
                  "Memory the stored responses may hold on this instance; beyond it the oldest go first. 0 = none "
                  "are kept in memory."),
      }};
  return t;
}

const Enum<LiveRegistry>& live_registry_enum() {
  static const Enum<LiveRegistry> e{
      "live registry", {{"auto", LiveRegistry::auto_}, {"redis", LiveRegistry::redis}, {"off", LiveRegistry::off}}};
  return e;
}

const Table<Config>& admin_table() {
  static const Table<Config> t{
      "admin",
      {
          custom<Config>("listen", "`host:port`", "none",
                         "A listener of its own serving `/metrics`, `/infra` and the probes without a key (for "
                         "Prometheus and operators); same syntax as `listen`.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           std::string s;
                           return l.get_string(n, p, s) &&
                                  l.report(check_host_port(trim(s), c.admin_listen_host, c.admin_listen_port), p, n);
                         })
              .from_env("SLUICE_ADMIN_LISTEN", "(`host:port`; one per instance on a shared host)"),
          boolean("public_status", &Config::public_status,
                  "Serve `/metrics` and `/infra` on the main listener without an admin key."),
          boolean("console", &Config::console,
                  "Serve the web console under `/console/` on every listener (`docs/console.md`). Its files hold "
                  "no data: what it shows it reads with the admin or viewer key signed in (none on the admin "
                  "listener)."),
          choice("live_registry", &Config::live_registry, live_registry_enum(),
                 "Where this instance registers its requests in flight, so that `GET /admin/requests` on any "
                 "instance lists the fleet's and a cancel reaches the instance running the request "
                 "(`docs/admin.md`): `redis` (`redis.url`, keys `<key_prefix>:live:*`), `off` (this instance's "
                 "only), `auto` = `redis` when the rate limits, the response cache, stored responses or the key "
                 "store's notices use Redis."),
          duration("live_interval", &Config::live_interval, Millis{100},
                   "How often the registry's snapshot of this instance's requests is written; an instance that "
                   "stopped drops out after three intervals."),
      }};
  return t;
}

// A top-level key read by another section's function.
Key<Config> delegate(std::string_view name, std::string type, std::string dflt, std::string doc,
                     void (*read)(Loader&, const YAML::Node&, Config&)) {
  return custom<Config>(name, std::move(type), std::move(dflt), std::move(doc),
                        [read](Loader& l, const YAML::Node& n, const std::string&, Config& c) {
                          read(l, n, c);
                          return true;
                        });
}

const Table<Config>& root_table() {
  static const Table<Config> t{
      "top level",
      {
          text("instance", &Config::instance,
               "Instance name (`x-sluice-instance`). Must not be empty or contain control characters. The default "
               "uses the machine's host name and the final listen port (after environment overrides).")
              .with_default("`<hostname>:<port>`")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                if (c.instance.empty()) l.fail(p, n, "must not be empty (omit it for the default)");
                else if (has_ctl(c.instance)) l.fail(p, n, "must not contain control characters");
                return true;
              })
              .from_env("SLUICE_INSTANCE"),
          custom<Config>("listen", "`host:port`", "`127.0.0.1:8080`",
                         "The host is an IP address literal (`127.0.0.1`, `0.0.0.0`, `[::1]`, `[::]`) or `localhost` "
                         "(taken as `127.0.0.1`); a host name is an error (it is not resolved). IPv6 as "
                         "`[addr]:port`. Port 0–65535; 0 = any free port.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           std::string s;
                           return l.get_string(n, p, s) &&
                                  l.report(check_host_port(trim(s), c.listen_host, c.listen_port), p, n);
                         })
              .from_env("SLUICE_LISTEN", "(`host:port`, IPv6 as `[addr]:port`)"),
          custom<Config>("trusted_proxies", "list of strings", "none",
                         "Networks of the proxies in front of the gateway (`10.0.0.0/8`, `2001:db8::/32`, or one "
                         "address): from a connection of theirs, the client's address is read from "
                         "`X-Forwarded-For`, right to left, as far as trusted proxies added it. The access log, the "
                         "history and the events record it as `client`. Without it the connection's own address "
                         "is the client and the header is ignored. Needs a restart.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           if (!n.IsSequence()) {
                             l.fail(p, n, std::string("expected a list of networks, got ") + kind_of(n));
                             return false;
                           }
                           for (std::size_t i = 0; i < n.size(); ++i) {
                             std::string s;
                             if (!l.get_string(n[i], index(p, i), s)) continue;
                             IpNetwork net;
                             if (auto e = IpNetwork::parse(s, net); !e.empty()) l.fail(index(p, i), n[i], e);
                             else c.trusted_proxies.push_back(net);
                           }
                           return true;
                         }),
          integer("workers", &Config::workers, 0, 1024, "Event-loop threads; 0 = one per CPU core.")
              .from_env("SLUICE_WORKERS", "(0–1024)"),
          group("limits", limits_table(), "Size limits and connection caps."),
          section("timeouts", &Config::timeouts, timeouts_table(), "Timeouts, all durations."),
          section("tls", &Config::tls, tls_table(),
                  "TLS on the main listener (`docs/deploy.md`); off unless `cert_file` is set. The admin listener "
                  "stays plain HTTP.")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                check_tls(l, c.tls, p, l.line_of(n));
                return true;
              }),
          section("cors", &Config::cors, cors_table(), "Browser clients on other origins; off by default."),
          section("responses", &Config::responses, responses_table(),
                  "Stored responses of the Responses API (`POST /v1/responses` with `store`)."),
          custom<Config>("access_log", "string", "`\"-\"`",
                         "`\"-\"` = stdout, `\"\"` = off, anything else is a file path (used as given, not relative "
                         "to the config file).",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           if (n.IsNull()) {
                             l.fail(p, n, "expected a string (\"-\" = stdout, \"\" = off, or a path), got nothing (null)");
                             return false;
                           }
                           return l.get_string(n, p, c.access_log);
                         })
              .from_env("SLUICE_ACCESS_LOG", "(empty = off)")
              .env_empty_counts(),
          custom<Config>("keys", "list of maps", "none", "Client API keys, see `keys[]`.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           read_keys(l, n, p, c);
                           return true;
                         }),
          delegate("keys_file", "string", "none",
                   "A YAML file holding a list of key entries (relative to the config file's directory).",
                   read_keys_file),
          delegate("models", "list of maps", "— (required)", "Routes, see `models[]`. At least one is required.",
                   read_models),
          custom<Config>("params", "map of ranges", "built-in list",
                         "Range-checked top-level request parameters, see `params.<name>`.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           read_ranges(l, n, p, c.params);
                           return true;
                         }),
          custom<Config>("options", "map of ranges", "built-in list",
                         "Keys allowed in an Ollama-style `options` object, see `params.<name>`.",
                         [](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                           read_ranges(l, n, p, c.options);
                           return true;
                         }),
          delegate("redis", "map", "see `redis`", "The Redis shared by the rate limits (`docs/limits.md`).",
                   read_redis),
          delegate("rate_limits", "map", "see `rate_limits`", "Request rate limits and token quotas (`docs/limits.md`).",
                   read_rate_limits),
          delegate("concurrency", "map", "see `concurrency`", "The concurrency gate (`docs/limits.md`).",
                   read_concurrency),
          text("tokenizer_dir", &Config::tokenizer_dir,
               "Where the BPE rank files are (`cl100k_base.json`, `o200k_base.json`); relative to the config file. "
               "`\"\"` = the places `scripts/fetch-tokenizer.sh` fills; missing files: token counts are estimated.")
              .with_default("`\"\"`")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                if (c.tokenizer_dir.empty()) return true;
                fs::path d(c.tokenizer_dir);
                if (d.is_relative()) d = l.base_dir() / d;
                if (!l.files().is_directory(d.string())) l.fail(p, n, "not a directory: " + d.string());
                else c.tokenizer_dir = d.string();
                return true;
              })
              .from_env("SLUICE_TOKENIZER_DIR", "(relative to the working directory)"),
          text("data_dir", &Config::data_dir,
               "Where the gateway writes its files (`history.db`, `events-fallback.jsonl`), created if missing. "
               "The default is relative to the working directory; a value in the file is relative to the file's "
               "directory.")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, Config& c) {
                if (c.data_dir.empty()) l.fail(p, n, "must not be empty (omit it for the default, ./data)");
                else c.data_dir = l.resolve_path(c.data_dir);
                return true;
              })
              .from_env("SLUICE_DATA_DIR", "(relative to the working directory)"),
          delegate("history", "map", "see `history`", "The request history (`docs/history.md`).", read_history),
          delegate("events", "map", "see `events`", "Kafka events (`docs/events.md`).", read_events),
          delegate("guardrails", "list of maps", "none",
                   "Screening policies, see `guardrails[]` (`docs/guardrails.md`); routes and keys use them by name.",
                   read_guardrails),
          delegate("key_store", "map", "see `key_store`",
                   "Keys managed at runtime through `/admin/keys` (`docs/admin.md`).", read_key_store),
          delegate("cache", "map", "see `cache`", "The response cache (`docs/cache.md`); routes opt in with `models[].cache`.",
                   read_cache),
          delegate("routing", "map", "see `routing`",
                   "Health probes, ejection, circuit breakers and the webhook, shared by every route.", read_routing)
              .read_at(-1),  // before models: a route's breaker override starts from routing.breaker
          group("admin", admin_table(), "The admin listener and who may see the status pages."),
      }};
  return t;
}

}  // namespace

void read_root(Loader& l, const YAML::Node& root, Config& c) {
  Fields f;
  if (!root.IsNull()) {
    if (!root.IsMap()) {
      l.error("", l.line_of(root), std::string("expected a map of settings at the top level, got ") + kind_of(root));
    } else {
      root_table().read(l, root, "", c, &f);
    }
  }
  // Absent: the built-in lists. Present, even empty: exactly what is written.
  if (!Loader::get(f, "params")) c.params = default_params();
  if (!Loader::get(f, "options")) c.options = default_options();
}

void server_env(Loader& l, Config& c) {
  root_table().apply_env(l, c);
  admin_table().apply_env(l, c);
  const bool tls_from_env = l.getenv("SLUICE_TLS_CERT_FILE") || l.getenv("SLUICE_TLS_KEY_FILE") ||
                            l.getenv("SLUICE_TLS_CLIENT_CA_FILE");
  tls_table().apply_env(l, c.tls);
  if (tls_from_env) check_tls(l, c.tls, "env SLUICE_TLS_*", 0);
  // HOST and PORT, for platforms that set them (after SLUICE_LISTEN).
  if (auto v = l.getenv("HOST")) {
    std::string_view h = trim(*v);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    const bool v6 = h.find(':') != std::string_view::npos;
    // An IPv6 literal is fine here: HOST holds only the host, so there is no port to confuse.
    auto e = v6 ? (has_space_or_ctl(h) || h.find_first_of("/?#@[]") != std::string_view::npos
                       ? "invalid host " + q(h)
                       : std::string())
                : check_host(h);
    std::string host(h);
    if (e.empty()) e = check_listen_host(host);
    if (!e.empty()) l.error("env HOST", 0, e);
    else c.listen_host = std::move(host);
  }
  if (auto v = l.getenv("PORT")) {
    long long port = 0;
    if (auto e = check_int(trim(*v), 0, 65535, port); !e.empty()) l.error("env PORT", 0, e);
    else c.listen_port = static_cast<std::uint16_t>(port);
  }
}

std::string describe_server(const Config& c) {
  std::string out;
  out += "instance:   " + c.instance + "\n";
  out += "listen:     " + host_for_display(c.listen_host) + ":" + std::to_string(c.listen_port) +
         (c.listen_port == 0 ? " (any free port)" : "") + "\n";
  out += "workers:    " + (c.workers == 0 ? std::string("auto (one per core)") : std::to_string(c.workers)) + "\n";
  out += "status:     /metrics and /infra ";
  out += c.public_status ? "public" : "need an admin key";
  if (!c.admin_listen_host.empty()) {
    out += "; admin listener " + host_for_display(c.admin_listen_host) + ":" + std::to_string(c.admin_listen_port) +
           " (no key)";
  }
  out += "\n";
  out += "access log: " + (c.access_log == "-" ? std::string("stdout") : c.access_log.empty() ? std::string("off") : c.access_log) + "\n";
  out += "limits:     " + limits_table().banner(c) + "\n";
  out += "timeouts:   " + timeouts_table().banner(c.timeouts) + "\n";
  if (c.tls.enabled()) {
    out += "tls:        " + c.tls.cert_file + (c.tls.client_ca_file.empty() ? "" : ", client certificates " +
           std::string(c.tls.client_certs == ClientCerts::require ? "required" : "optional") + " (" +
           c.tls.client_ca_file + ")") + ", TLS " + (c.tls.min_version == TlsMinVersion::v1_3 ? "1.3" : "1.2+") + "\n";
  }
  return out;
}

void server_env_reference(std::vector<EnvDoc>& out) {
  std::vector<EnvDoc> declared;
  root_table().env_doc(declared, "");
  for (auto& d : declared) {
    out.push_back(std::move(d));
    if (out.back().var != "SLUICE_LISTEN") continue;
    out.push_back({"HOST",
                   "the listen host only (applied after `SLUICE_LISTEN`; an IP address or `localhost`, like `listen`; "
                   "an IPv6 address may be given with or without brackets)"});
    out.push_back({"PORT", "the listen port only, 0–65535 (applied after `SLUICE_LISTEN`)"});
  }
  admin_table().env_doc(out, "admin");
  tls_table().env_doc(out, "tls");
}

void server_reference(std::vector<TableDoc>& out) {
  out.push_back(root_table().doc());
  out.push_back(limits_table().doc());
  out.push_back(timeouts_table().doc());
  out.push_back(tls_table().doc());
  out.push_back(cors_table().doc());
  out.push_back(responses_table().doc());
  out.push_back(admin_table().doc());
}

}  // namespace sluice::config::detail
