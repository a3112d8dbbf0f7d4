#include "gateway/gateway.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>
#include <iostream>

#include <boost/asio/thread_pool.hpp>

#include "common/reason.hpp"
#include "events/events.hpp"
#include "history/history.hpp"
#include "history/responses.hpp"
#include "cache/cache.hpp"
#include "guard/guard.hpp"
#include "conversations/store.hpp"
#include "common/text.hpp"
#include "gateway/embed_batch.hpp"
#include "gateway/control_store.hpp"
#include "gateway/live.hpp"
#include "history/audit_table.hpp"
#include "gateway/state.hpp"
#include "http/server.hpp"
#include "sim/sim.hpp"

namespace sluice::gateway {
namespace {

// What identifies the tls section's files as they are now (a change to any of them: read
// them again).
std::string tls_files_signature(const config::ListenerTls& t) {
  std::string sig;
  for (const std::string* f : {&t.cert_file, &t.key_file, &t.client_ca_file}) {
    struct stat st {};
    if (f->empty() || ::stat(f->c_str(), &st) != 0) {
      sig += "-;";
      continue;
    }
    sig += std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return sig;
}

// "CN=gw.example (expires 2027-03-01T00:00:00.000Z)": the certificate a context serves.
std::string certificate_words(const http::TlsContext& ctx) {
  const auto info = http::tls_info(ctx);
  std::string out = info.subject + " (expires ";
  append_iso8601(out, info.not_after * 1000);
  return out + ")";
}

// The tls section as the listener takes it.
std::shared_ptr<http::TlsContext> tls_context(const config::ListenerTls& t) {
  if (!t.enabled()) return nullptr;
  return http::make_tls_context({.cert_file = t.cert_file,
                                 .key_file = t.key_file,
                                 .client_ca_file = t.client_ca_file,
                                 .client_cert_required = t.client_certs == config::ClientCerts::require,
                                 .tls13_only = t.min_version == config::TlsMinVersion::v1_3});
}

// The history's database as the store of responses (responses.store: database).
class ResponseTableStore final : public conversations::Durable {
 public:
  explicit ResponseTableStore(std::unique_ptr<history::ResponseTable> t) : t_(std::move(t)) {}
  std::optional<std::optional<conversations::StoredResponse>> get(std::string_view tenant, std::string_view id) override {
    auto row = t_->get(tenant, id, now_ms());
    if (!row) return std::nullopt;
    if (!*row) return std::optional<conversations::StoredResponse>();
    auto& r = **row;
    return conversations::StoredResponse{.response = std::move(r.response),
                                         .items = std::move(r.items),
                                         .input_from = static_cast<std::size_t>(r.input_from),
                                         .input_count = static_cast<std::size_t>(r.input_count)};
  }
  bool put(std::string_view tenant, std::string_view id, const conversations::StoredResponse& r,
           std::chrono::milliseconds ttl) override {
    const std::int64_t now = now_ms();
    return t_->put(tenant, id,
                   {r.response, r.items, static_cast<std::int64_t>(r.input_from), static_cast<std::int64_t>(r.input_count)},
                   now + ttl.count(), now);
  }
  std::optional<bool> erase(std::string_view tenant, std::string_view id) override { return t_->erase(tenant, id); }
  bool up() const override { return t_->up(); }

 private:
  static std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::unique_ptr<history::ResponseTable> t_;
};

std::unique_ptr<conversations::Durable> response_table(const config::Config& c) {
  if (c.responses.store != config::ResponsesBackend::database) return nullptr;
  std::string err;
  auto t = history::ResponseTable::create(c.history, &err);
  if (!t) throw std::runtime_error("responses: " + err);
  return std::make_unique<ResponseTableStore>(std::move(t));
}

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "sluice";
  return buf;
}

// The rank files: tokenizer_dir, else where scripts/fetch-tokenizer.sh leaves them next to
// the binary's source tree (build/sluice -> data/...), else under the working directory.
std::pair<tokenizer::Counter, std::string> load_tokenizer(const config::Config& c) {
  std::vector<std::filesystem::path> dirs;
  if (!c.tokenizer_dir.empty()) {
    dirs.emplace_back(c.tokenizer_dir);
  } else {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) dirs.push_back(exe.parent_path().parent_path() / tokenizer::kDefaultRankDir);
    dirs.push_back(std::filesystem::current_path(ec) / tokenizer::kDefaultRankDir);
  }
  std::string tried;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) {
      tried += (tried.empty() ? "" : ", ") + d.string();
      continue;
    }
    std::string warnings;
    auto counter = tokenizer::Counter::load_dir(d.string(), &warnings);
    std::string info = "tokenizer: ";
    info += counter.exact(tokenizer::Encoding::cl100k_base) ? "cl100k_base exact" : "cl100k_base estimated";
    info += counter.exact(tokenizer::Encoding::o200k_base) ? ", o200k_base exact" : ", o200k_base estimated";
    info += " (" + d.string() + ")";
    if (!warnings.empty()) info += "; " + warnings;
    return {std::move(counter), info};
  }
  return {tokenizer::Counter{}, "tokenizer: estimator only (no rank files in " + tried +
                                    "; scripts/fetch-tokenizer.sh fetches them)"};
}

// The file descriptor limit, raised first from the soft to the hard limit (as nginx's
// worker_rlimit_nofile or Go's runtime do): systemd and most shells start services with a
// soft limit of 1024 and leave raising it to the programs that need more.
struct FdLimit {
  std::uint64_t soft = 0;
  bool raised = false;
};

FdLimit raise_fd_limit() {
  FdLimit out;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return out;
  constexpr rlim_t kCeiling = 1u << 20;  // beyond this the kernel's nr_open usually refuses
  const rlim_t want = rl.rlim_max == RLIM_INFINITY ? kCeiling : std::min(rl.rlim_max, kCeiling);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rlimit raised = rl;
    raised.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      rl = raised;
      out.raised = true;
    }
  }
  out.soft = rl.rlim_cur == RLIM_INFINITY ? kCeiling : rl.rlim_cur;
  return out;
}

// limits.max_connections when it is 0 (auto): what the fd limit leaves after a fixed
// reserve (listeners, event loops, timers, Redis, the database, Kafka's sockets and pipes,
// log files: 128 + 16 per worker), halved, because a proxied request holds a second
// descriptor upstream for each client connection; then the idle upstream pool a worker
// keeps is also covered by the half that is not given to clients.
std::size_t auto_max_connections(std::uint64_t soft_limit, int workers) {
  const std::uint64_t reserve = 128 + 16 * static_cast<std::uint64_t>(std::max(workers, 1));
  if (soft_limit <= reserve + 32) return 16;  // a tiny limit: a few connections, not none
  return static_cast<std::size_t>((soft_limit - reserve) / 2);
}

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(std::shared_ptr<const config::Config> cfg, bool takeover, std::string config_path) {
    if (!config_path.empty()) {
      shared_.reload = [this, path = std::move(config_path)] { return reload_file(path); };
    }
    shared_.cfg = std::move(cfg);
    const auto& c = *shared_.cfg;
    // The sinks first: the access log's thread hands them every record.
    std::vector<telemetry::RecordSink*> sinks;
    std::string err;
    history_ = history::History::create(c.history, &err);
    if (!history_ && !err.empty()) throw std::runtime_error("history: " + err);
    if (history_) sinks.push_back(history_.get());
    shared_.history = history_.get();
    events_ = events::EventSink::create(c.events, instance_name(c), hostname(), &err);
    if (!events_ && !err.empty()) throw std::runtime_error("events: " + err);
    if (events_) sinks.push_back(events_.get());
    shared_.events = events_.get();
    shared_.query_executor = queries_.get_executor();
    audit_ = history::AuditTable::create(c.history);
    shared_.audit = audit_.get();
    access_log_ = std::make_unique<telemetry::AccessLog>(c.access_log, 65536, std::move(sinks));
    shared_.access_log = access_log_.get();
    metrics_ = make_metrics(c);
    shared_.metrics = metrics_.get();
    // Keys are found by a keyed hash of their secret: with the key store, the fleet's
    // key_store.secret (the store keeps those digests); else this process's own (random).
    auto hasher = std::make_shared<const keys::Hasher>(c.key_store.enabled ? c.key_store.secret : std::string());
    keys_cfg_ = shared_.cfg;
    hasher_ = hasher;
    keys_ = std::make_unique<keys::Registry>(key_set(c, *hasher), hasher);
    shared_.keys = keys_.get();
    limiter_ = std::make_unique<limits::Limiter>(shared_.cfg);
    shared_.limiter = limiter_.get();
    gate_ = std::make_unique<limits::Gate>(c);
    shared_.gate = gate_.get();
    conversations_ = std::make_unique<conversations::Store>(c, response_table(c));
    shared_.conversations = conversations_.get();
    cache_ = std::make_unique<cache::Cache>(c);
    shared_.cache = cache_.get();
    shared_.embed_batches = &embed_batches_;
    // Even without policies: a reload may bring some.
    guards_ = std::make_unique<guard::Guards>(c.guardrails);
    shared_.guards = guards_.get();
    // Prompts counted exactly for token limits (the key store's keys may carry budgets).
    if (!c.rate_limits.tokens.empty() || c.key_store.enabled) {
      auto [counter, info] = load_tokenizer(c);
      shared_.tokens = std::move(counter);
      shared_.count_prompts = true;
      tokenizer_info_ = std::move(info);
    }

    router_ = std::make_unique<Router>(shared_.cfg, metrics_.get());
    shared_.router = router_.get();
    // A model whose every backend reports its memory full: its requests wait in the gate.
    router_->on_hold([gate = gate_.get()](const std::string& alias, bool held) { gate->hold(alias, held); });
    router_->on_limit([gate = gate_.get()](const std::string& backend, int limit) { gate->limit_backend(backend, limit); });
    router_->start();
    start_control(c);
    live_ = std::make_unique<LiveRequests>(live_settings(c, instance_name(c), limiter_->wants_redis()));
    shared_.live = live_.get();

    http::ServerOptions so;
    so.host = c.listen_host;
    so.port = c.listen_port;
    so.workers = c.workers;
    so.max_header_bytes = c.max_header_bytes;
    so.max_body_bytes = c.max_body_bytes;
    so.read_timeout = c.timeouts.client_header;
    so.keep_alive = c.timeouts.keep_alive;
    so.write_timeout = c.timeouts.client_write;
    so.takeover = takeover;
    so.first_byte_timeout = c.timeouts.client_first_byte;
    tls_files_sig_ = tls_files_signature(c.tls);  // (before reading them: a change meanwhile is seen)
    so.tls = tls_context(c.tls);                 // (throws naming the file that does not do)
    {
      const auto fd = raise_fd_limit();
      const int workers = c.workers > 0 ? c.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      const auto fit = auto_max_connections(fd.soft, workers);
      so.max_connections = c.max_connections > 0 ? c.max_connections : fit;
      connections_info_ = "connections: at most " + std::to_string(so.max_connections) +
                          (c.max_connections > 0 ? " (limits.max_connections)" : " (auto)") + "; file descriptor limit " +
                          std::to_string(fd.soft) + (fd.raised ? " (soft limit raised to the hard limit)" : "");
      if (c.max_connections > fit) {
        connections_info_ += "; warning: more than the " + std::to_string(fit) +
                             " the descriptor limit leaves room for (past it, new connections are shed)";
      }
      connections_info_ += "\n";
    }
    so.local_reply = [](int status, std::string_view message) {
      http::Response r;
      r.status = status;
      Reason reason = status == 413   ? Reason::body_too_large
                      : status == 431 ? Reason::headers_too_large
                      : status == 503 ? Reason::too_many_connections
                                      : Reason::invalid_request;
      r.body = error_body(reason, message);
      return r;
    };
    shared_.instance = instance_name(c);
    so.extra_headers.emplace_back("x-sluice-instance", shared_.instance);
    shared_.max_connections = so.max_connections;
    // At shutdown, once a worker's requests are gone: its queued settlements and unused
    // token leases go to Redis before its loop stops (bounded: see Limiter::drain_worker).
    // (Limits a reload removed may have left some.)
    so.on_drained = [this](int) -> boost::asio::awaitable<void> { co_await limiter_->drain_worker(); };
    server_ = http::Server::start(so, [this](int, boost::asio::any_io_executor ex) {
      return make_handler(shared_, std::move(ex));
    });
    shared_.server.store(server_.get(), std::memory_order_release);
    if (!c.admin_listen_host.empty()) {
      http::ServerOptions ao = so;
      ao.on_drained = nullptr;  // the admin listener admits no request
      ao.tls = nullptr;         // plain HTTP, for probes and Prometheus on a private port
      ao.host = c.admin_listen_host;
      ao.port = c.admin_listen_port;
      ao.workers = 1;
      admin_server_ = http::Server::start(ao, [this](int, boost::asio::any_io_executor ex) {
        return make_handler(shared_, std::move(ex), /*admin_listener=*/true);
      });
    }
  }

  std::uint16_t port() const override { return server_->port(); }
  std::uint16_t admin_port() const { return admin_server_ ? admin_server_->port() : 0; }
  const std::string& instance() const { return shared_.instance; }

  // For the banner: which limiter backend is active and why. Waits for the workers'
  // first Redis connection attempts (at most the connect timeout).
  std::string limiter_banner() const {
    if (!limiter_->active()) return "rate limiter: no limits configured\n";
    auto st = limiter_->status();
    if (limiter_->wants_redis()) {
      const auto until = std::chrono::steady_clock::now() + shared_.cfg->redis.connect_timeout + std::chrono::milliseconds(200);
      while (std::chrono::steady_clock::now() < until && st.connections_up < st.connections && st.last_error.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        st = limiter_->status();
      }
    }
    std::string s = "rate limiter: configured " + st.configured + ", active " + st.active;
    if (!st.reason.empty() && st.reason != "configured") s += " (" + st.reason + ")";
    s += "\n";
    if (!tokenizer_info_.empty()) s += tokenizer_info_ + "\n";
    return s;
  }

  // For the banner: the connection cap and where it comes from.
  const std::string& connections_banner() const { return connections_info_; }

  // For the banner: where requests are recorded.
  std::string records_banner() const {
    std::string s = "history: ";
    if (history_) {
      const auto h = history_->status();
      s += h.backend + " " + h.target + (h.up ? "" : " (down: " + h.last_error + "; rows queue until it is back)");
    } else {
      s += "off";
    }
    s += "\nevents: ";
    if (events_) {
      const auto e = events_->status();
      s += "kafka " + e.brokers + " topic " + e.topic + ", fallback file " + e.fallback_file;
    } else {
      s += "off (no events.brokers)";
    }
    return s + "\n";
  }

  // Phase 1 of a shutdown: /ready says draining, the listeners still serve.
  void begin_drain() {
    shared_.draining.store(true);
    server_->begin_drain();
  }

  void shutdown() override {
    const auto grace = shared_.cfg->timeouts.shutdown_grace;
    const auto margin = std::min<std::chrono::milliseconds>(grace / 2, std::chrono::milliseconds(1000));
    shared_.cut_streams_at.store((std::chrono::steady_clock::now() + grace - margin).time_since_epoch().count());
    shared_.draining.store(true);
    server_->shutdown(shared_.cfg->timeouts.shutdown_grace);
    if (admin_server_) admin_server_->shutdown(shared_.cfg->timeouts.shutdown_grace);
  }

  bool forced_stop() const override {
    return server_->forced_stop() || (admin_server_ && admin_server_->forced_stop());
  }

  // Keys, routes, backends and routing settings from the file again; the rest stays as
  // started. A file that does not load is refused with its errors and nothing changes.
  bool reload(const std::string& path) override { return reload_file(path).first; }

  std::pair<bool, std::string> reload_file(const std::string& path) {
    std::lock_guard lock(reload_mu_);  // SIGHUP and POST /admin/reload, one at a time
    auto res = config::load_file(path);
    std::string message;
    if (!res.ok()) {
      for (const auto& e : res.errors) message += (message.empty() ? "" : "; ") + e.to_string();
    }
    std::shared_ptr<const keys::KeySet> next_keys;
    std::unique_lock keys_lock(keys_mu_);  // (held until the swap: the stored keys checked are those in force)
    if (message.empty()) {
      // The file's routes and keys name only its own policies (the loader checks); the key
      // store's keys must find theirs too, or they would be refused (guard_unavailable).
      for (const auto& k : stored_) {
        const std::string& g = k.key.guardrails;
        if (g.empty() || g == "none") continue;
        const bool kept = std::any_of(res.config->guardrails.begin(), res.config->guardrails.end(),
                                      [&](const config::GuardPolicy& p) { return p.name == g; });
        if (!kept) {
          message += (message.empty() ? "" : "; ") + std::string("stored key '") + k.key.name +
                     "' names guardrails policy '" + g + "', which the file no longer has";
        }
      }
    }
    if (message.empty()) {
      // What the rate limits resolved from the file must hold for the running gateway: their
      // backend (the workers' connections) and timeouts.total (reservation_ttl) are its own.
      const auto& run = *shared_.cfg;
      const auto& rl = res.config->rate_limits;
      if (rl.backend != run.rate_limits.backend) {
        message = "rate_limits.backend changes only with a restart (running " +
                  std::string(config::to_string(run.rate_limits.backend)) + ", the file says " +
                  std::string(config::to_string(rl.backend)) + "): the limits' on_redis_down follows it";
      } else if (rl.reservation_ttl < run.timeouts.total) {
        message = "rate_limits.reservation_ttl (" + std::to_string(rl.reservation_ttl.count()) +
                  " ms) is below the running timeouts.total (" + std::to_string(run.timeouts.total.count()) +
                  " ms; timeouts change only with a restart): a running request's reservation would expire under it";
      }
    }
    // The listener's certificate is read again (renewed files); a file that does not do
    // refuses the reload like any other error.
    std::shared_ptr<http::TlsContext> next_tls;
    std::string next_tls_sig;
    if (message.empty() && res.config->tls.enabled() && shared_.cfg->tls.enabled()) {
      try {
        next_tls_sig = tls_files_signature(res.config->tls);
        next_tls = tls_context(res.config->tls);
      } catch (const std::exception& e) {
        message = e.what();
      }
    }
    if (message.empty()) {
      bool swapped = false;
      try {
        next_keys = key_set(*res.config, keys_->hasher());  // before anything changes
        // The policies and the gate's slots before the routes that name them (a request on
        // a new route finds its policy and its slot), put back if the routes fail.
        swapped = true;
        guards_->reconfigure(res.config->guardrails);
        gate_->reconfigure(res.config);
        if (limiter_) limiter_->reconfigure(res.config);
        router_->install(res.config);
      } catch (const std::exception& e) {
        message = e.what();
        if (swapped) {
          guards_->reconfigure(keys_cfg_->guardrails);
          gate_->reconfigure(keys_cfg_);
          if (limiter_) limiter_->reconfigure(keys_cfg_);
        }
      }
    }
    router_->note_reload(message.empty(), message);
    if (!message.empty()) {
      std::cerr << "sluice: reload of " << path << " refused, the running configuration stays: " << message << std::endl;
      return {false, message};
    }
    keys_cfg_ = res.config;
    if (next_tls) {
      server_->set_tls(next_tls);
      tls_files_sig_ = std::move(next_tls_sig);
    }
    install_keys(next_keys);  // (after the gate: the keys' slots take its per_key)
    keys_lock.unlock();
    const auto t = router_->table();
    const std::string tls_note = next_tls ? ", and the listener's certificate: " + certificate_words(*next_tls) : "";
    std::string done = std::to_string(next_keys->size()) + " keys, " + std::to_string(t->routes.size()) +
                       " routes, routing table version " + std::to_string(t->version) +
                       " (keys, models, routing, rate limits, the concurrency gate and the guardrails policies are reloaded" +
                       tls_note + "; other sections need a restart)";
    // What the file changed that a reload does not apply: said, not silently ignored.
    const config::Config& was = *shared_.cfg;
    std::string later;
    auto unapplied = [&](bool changed, std::string_view section) {
      if (changed) later += (later.empty() ? "" : ", ") + std::string(section);
    };
    unapplied(!res.config->rate_limits.tokens.empty() && !shared_.count_prompts,
              "exact prompt counting for token limits (prompts are bounded by their bytes until then)");
    unapplied(!(res.config->timeouts == was.timeouts), "timeouts");
    unapplied(res.config->key_store.enabled != was.key_store.enabled, "key_store");
    unapplied(!(res.config->redis == was.redis), "redis");
    unapplied(res.config->listen_host != was.listen_host || res.config->listen_port != was.listen_port, "listen");
    unapplied(res.config->workers != was.workers, "workers");
    unapplied(res.config->trusted_proxies != was.trusted_proxies, "trusted_proxies");
    unapplied(res.config->tls.enabled() != was.tls.enabled(), res.config->tls.enabled() ? "tls (turned on)" : "tls (turned off)");
    if (!later.empty()) done += "; changed in the file but in force only after a restart: " + later;
    std::cerr << "sluice: reloaded " << path << ": " << done << std::endl;
    return {true, std::move(done)};
  }

  // The listener's certificate files changed since they were last read (a renewal by
  // cert-manager, certbot...): they are read again, as a reload would, and a set that does
  // not do is reported and tried again at its next change.
  void check_tls_files() {
    std::lock_guard lock(reload_mu_);
    const config::ListenerTls& t = keys_cfg_->tls;  // (the file as last loaded)
    if (!server_->tls() || !t.enabled()) return;
    auto sig = tls_files_signature(t);
    if (sig == tls_files_sig_) return;
    tls_files_sig_ = std::move(sig);
    try {
      auto next = tls_context(t);
      server_->set_tls(next);
      std::cerr << "sluice: tls: the certificate files changed; new connections get " << certificate_words(*next)
                << std::endl;
    } catch (const std::exception& e) {
      std::cerr << "sluice: tls: the certificate files changed but do not do; the certificate in force stays: "
                << e.what() << std::endl;
    }
  }

  void join() override {
    server_->join();
    if (admin_server_) admin_server_->join();
    live_->stop();  // (it posts to the workers, which are gone)
    router_->stop();
    access_log_->flush();
    queries_.join();
    control_.reset();  // its poll thread
  }

 private:
  static std::string instance_name(const config::Config& c) {
    return !c.instance.empty()  ? c.instance
           : c.listen_port != 0 ? hostname() + ":" + std::to_string(c.listen_port)
                                : hostname() + ":pid" + std::to_string(::getpid());
  }

  // The live registry: with Redis when configured so, or when another part uses it.
  static LiveRequests::Fleet live_settings(const config::Config& c, std::string instance, bool limiter_redis) {
    LiveRequests::Fleet f;
    f.instance = std::move(instance);
    f.interval = c.live_interval;
    f.key_prefix = c.redis.key_prefix;
    const bool others = limiter_redis || c.cache.store == config::CacheStore::redis ||
                        c.responses.store == config::ResponsesBackend::redis ||
                        (c.key_store.enabled && c.key_store.notify == config::ControlNotify::redis);
    if (c.live_registry == config::LiveRegistry::redis || (c.live_registry == config::LiveRegistry::auto_ && others)) {
      f.redis = parse_redis_url(c.redis.url);
    }
    return f;
  }

  // The file's keys (of `c`) with the store's last read. Under keys_mu_.
  std::shared_ptr<const keys::KeySet> key_set(const config::Config& c, const keys::Hasher& h) const {
    std::vector<std::string> shadowed;
    auto set = keys::KeySet::build(
        c.keys, stored_, h, [this](std::string_view tier) { return metrics_->tier_index(tier); }, &shadowed);
    for (const auto& name : shadowed) {
      std::cerr << "sluice: key_store: key '" << name << "' is also in the configuration file; the file's is used"
                << std::endl;
    }
    return set;
  }

  // The key store read anew: its keys with the file's in force.
  void install_stored(std::vector<keys::Stored> stored) {
    std::lock_guard lock(keys_mu_);
    stored_ = std::move(stored);
    install_keys(key_set(*keys_cfg_, keys_->hasher()));
  }

  // A new set of keys in force, and the gate's key slots following their limits.
  void install_keys(std::shared_ptr<const keys::KeySet> set) {
    std::vector<const config::ApiKey*> limits;
    bool budgets = false;
    for (const auto& e : set->entries()) {
      limits.push_back(&e->key);
      budgets = budgets || e->key.budget_tokens > 0;
    }
    limiter_->set_budgets(budgets);  // (before the keys: a new budgeted key finds it on)
    keys_->install(set);
    gate_->update_keys(limits);
  }

  // The fleet's runtime state in the database (keys, drains), with the key store.
  void start_control(const config::Config& c) {
    if (!c.key_store.enabled) return;
    ControlStore::Names names{
        .alias = [this](std::string_view a) { return router_->table()->find(a) != nullptr; },
        .guardrails = [this](std::string_view p) { return shared_.guards && shared_.guards->find(p); },
        .in_force = [this] { return keys_->current(); },
    };
    ControlStore::Install install{
        .keys = [this](std::vector<keys::Stored> s) { install_stored(std::move(s)); },
        .drains = [this](std::unordered_set<std::string> d) { router_->set_drained(std::move(d)); },
        .canaries = [this](std::unordered_map<std::string, double> w) { router_->set_canary_weights(std::move(w)); },
    };
    control_ = std::make_unique<ControlStore>(c, hasher_, std::move(install), std::move(names));
    shared_.control = control_.get();
  }

  static std::unique_ptr<telemetry::Metrics> make_metrics(const config::Config& c) {
    std::vector<std::string> models, tiers, backends;
    auto add = [](std::vector<std::string>& v, std::string s) {
      if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
    };
    for (const auto& r : c.routes) {
      add(models, r.alias);
      for (const auto& b : r.backends) add(backends, b.name);  // the backend's name labels it
    }
    for (const auto& k : c.keys) add(tiers, k.tier);
    telemetry::load_gpu_library();
    return std::make_unique<telemetry::Metrics>(std::move(models), std::move(tiers), std::move(backends));
  }

  Shared shared_;
  std::unique_ptr<telemetry::Metrics> metrics_;
  std::unique_ptr<keys::Registry> keys_;
  std::mutex reload_mu_;
  std::string tls_files_sig_;  // of the listener's certificate files as last read (under reload_mu_)
  mutable std::mutex keys_mu_;  // what the key set is built from:
  std::shared_ptr<const config::Config> keys_cfg_;  // the file's keys (as last loaded)
  std::vector<keys::Stored> stored_;                // the store's (as last read)
  std::shared_ptr<const keys::Hasher> hasher_;
  std::unique_ptr<ControlStore> control_;  // stopped in join(), after the queries (its calls)
  std::unique_ptr<history::AuditTable> audit_;
  std::unique_ptr<LiveRequests> live_;  // before the server (its workers register), stopped in join()
  // Destroyed after the access log (which feeds them) and after the query thread.
  std::unique_ptr<history::History> history_;
  std::unique_ptr<events::EventSink> events_;
  boost::asio::thread_pool queries_{1};
  std::unique_ptr<telemetry::AccessLog> access_log_;
  std::unique_ptr<limits::Limiter> limiter_;
  std::unique_ptr<limits::Gate> gate_;
  std::unique_ptr<conversations::Store> conversations_;  // stored responses
  std::unique_ptr<cache::Cache> cache_;                  // the response cache
  std::unique_ptr<guard::Guards> guards_;
  BatchCounters embed_batches_;                // the guardrails policies, compiled
  std::string tokenizer_info_;
  std::string connections_info_;
  std::unique_ptr<Router> router_;  // before the server: the workers use it
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<http::Server> admin_server_;  // admin.listen: probes and status pages
};

config::LoadResult load_or_report(const std::string& path) {
  auto res = config::load_file(path);
  if (!res.ok()) {
    std::cerr << "sluice: " << path << " is not valid:\n";
    for (const auto& e : res.errors) std::cerr << "  " << e.to_string() << "\n";
  }
  return res;
}

}  // namespace

std::unique_ptr<Gateway> Gateway::start(std::shared_ptr<const config::Config> cfg, bool takeover,
                                        std::string config_path) {
  return std::make_unique<GatewayImpl>(std::move(cfg), takeover, std::move(config_path));
}

int run_check_config(const std::string& path) {
  auto res = load_or_report(path);
  if (!res.ok()) return 1;
  std::cout << config::describe(*res.config) << "config OK\n";
  return 0;
}

int run_serve(const std::string& path, bool takeover) {
  auto res = load_or_report(path);
  if (!res.ok()) return 1;

  // Signals are taken synchronously by this thread; workers never see them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<Gateway> gw;
  try {
    gw = Gateway::start(res.config, takeover, path);
  } catch (const std::exception& e) {
    std::cerr << "sluice: cannot start: " << e.what() << "\n";
    return 1;
  }
  auto* impl = static_cast<GatewayImpl*>(gw.get());
  if (takeover) {
    // The old process's listeners close after its drain delay; what the kernel queued on
    // them then is moved to ours only with this setting (docs/deploy.md, "In-place upgrade").
    std::ifstream migrate{"/proc/sys/net/ipv4/tcp_migrate_req"};
    int on = 0;
    if (migrate >> on && on == 0) {
      std::cerr << "sluice: sharing the port; net.ipv4.tcp_migrate_req is 0, so a connection queued on the old "
                   "process's listener as it closes may be reset (sysctl -w net.ipv4.tcp_migrate_req=1)\n";
    }
  }
  std::cerr << "sluice " << "serving as " << impl->instance() << "\n" << config::describe(*res.config)
            << impl->limiter_banner() << impl->records_banner() << impl->connections_banner();
  if (impl->admin_port() != 0) {
    std::cerr << "sluice admin listening on " << res.config->admin_listen_host << ":" << impl->admin_port() << "\n";
  }
  std::cerr << "sluice listening on " << res.config->listen_host << ":" << gw->port() << std::endl;

  int sig = 0;
  const auto tls_check = res.config->tls.enabled() ? res.config->tls.check_interval : std::chrono::milliseconds(0);
  for (;;) {
    if (tls_check.count() > 0) {
      // Waking up every check_interval to look at the certificate files.
      timespec ts{static_cast<time_t>(tls_check.count() / 1000), static_cast<long>(tls_check.count() % 1000) * 1'000'000};
      siginfo_t info{};
      sig = sigtimedwait(&set, &info, &ts);
      if (sig < 0) {
        impl->check_tls_files();
        continue;
      }
    } else {
      sigwait(&set, &sig);
    }
    if (sig != SIGHUP) break;
    gw->reload(path);  // SIGHUP: keys, routes and backends from the file again
  }
  // Phase 1 (SIGTERM): /ready answers 503 while the listeners still accept and serve, for
  // drain_delay, so that a load balancer stops sending first; SIGINT or a second signal
  // ends it at once (a SIGHUP meanwhile is ignored).
  if (const auto delay = res.config->timeouts.drain_delay; sig == SIGTERM && delay.count() > 0) {
    std::cerr << "sluice: signal " << sig << ", /ready answers 503 for " << delay.count()
              << " ms before the listeners close" << std::endl;
    impl->begin_drain();
    const auto until = std::chrono::steady_clock::now() + delay;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timespec ts{static_cast<time_t>(left.count() / 1'000'000'000), static_cast<long>(left.count() % 1'000'000'000)};
      siginfo_t info{};
      const int got = sigtimedwait(&set, &info, &ts);
      if (got == SIGTERM || got == SIGINT) break;
    }
  }
  std::cerr << "sluice: signal " << sig << ", draining (grace "
            << res.config->timeouts.shutdown_grace.count() << " ms)" << std::endl;
  gw->shutdown();
  gw->join();
  std::cerr << "sluice: stopped" << std::endl;
  if (gw->forced_stop()) {
    // Abandoned coroutines still reference the loops: skip the destructors.
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;
}

}  // namespace sluice::gateway
