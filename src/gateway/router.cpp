#include "gateway/router.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <algorithm>
#include <iostream>
#include <optional>
#include <cstdio>
#include <stdexcept>

#include "common/clock.hpp"
#include "common/text.hpp"
#include "common/thread_name.hpp"
#include "llm/chat.hpp"
#include "llm/wire.hpp"
#include "sim/sim.hpp"
#include "telemetry/metrics.hpp"

namespace sluice::gateway {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

// A weight (percent) as JSON: "10", "2.5".
std::string fmt_weight(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}


upstream::HealthSettings health_settings(const config::HealthConfig& h) {
  return {.unhealthy_after = h.unhealthy_after,
          .healthy_after = h.healthy_after,
          .eject_after = h.eject_after,
          .eject_for = h.eject_for};
}

upstream::Policy policy_of(config::Balance b) {
  switch (b) {
    case config::Balance::round_robin: return upstream::Policy::round_robin;
    case config::Balance::weighted: return upstream::Policy::weighted;
    case config::Balance::least_connections: return upstream::Policy::least_connections;
    case config::Balance::latency: return upstream::Policy::latency;
  }
  return upstream::Policy::least_connections;
}

bool same_health(const config::HealthConfig& a, const config::HealthConfig& b) {
  return a.interval == b.interval && a.timeout == b.timeout && a.unhealthy_after == b.unhealthy_after &&
         a.healthy_after == b.healthy_after && a.eject_after == b.eject_after && a.eject_for == b.eject_for;
}

bool same_breaker(const config::BreakerConfig& a, const config::BreakerConfig& b) {
  return a.enabled == b.enabled && a.window == b.window && a.min_requests == b.min_requests &&
         a.error_rate == b.error_rate && a.p95_ttft == b.p95_ttft && a.open_for == b.open_for &&
         a.half_open_probes == b.half_open_probes && a.recover_for == b.recover_for &&
         a.p95_ttft_recover == b.p95_ttft_recover && a.half_open_share == b.half_open_share;
}

constexpr auto nothrow = net::as_tuple(net::use_awaitable);

// http[s]://host[:port][/path] (validated at load) -> where to connect, and the path.
std::optional<std::pair<http::Target, std::string>> parse_webhook(std::string_view url) {
  http::Target t;
  if (url.starts_with("https://")) {
    t.tls = true;
    t.port = 443;
    url.remove_prefix(8);
  } else if (url.starts_with("http://")) {
    url.remove_prefix(7);
  } else {
    return std::nullopt;
  }
  const auto slash = url.find('/');
  std::string path = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  std::string_view hostport = url.substr(0, slash);
  std::string_view port;
  if (hostport.starts_with('[')) {
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    t.host = std::string(hostport.substr(1, close - 1));
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') port = hostport.substr(close + 2);
  } else if (const auto colon = hostport.rfind(':'); colon != std::string_view::npos) {
    t.host = std::string(hostport.substr(0, colon));
    port = hostport.substr(colon + 1);
  } else {
    t.host = std::string(hostport);
  }
  if (!port.empty()) {
    int p = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return std::nullopt;
      p = p * 10 + (c - '0');
      if (p > 65535) return std::nullopt;
    }
    t.port = static_cast<std::uint16_t>(p);
  }
  if (t.host.empty()) return std::nullopt;
  return std::pair{std::move(t), std::move(path)};
}

}  // namespace

upstream::BreakerSettings breaker_settings(const config::BreakerConfig& c) {
  return {.window = c.window,
          .min_requests = static_cast<std::uint32_t>(c.min_requests),
          .error_rate = c.error_rate,
          .p95_latency_ms = static_cast<double>(c.p95_ttft.count()),
          .open_for = c.open_for,
          .half_open_probes = static_cast<std::uint32_t>(c.half_open_probes),
          .recover_for = c.recover_for,
          .p95_recover_ms = static_cast<double>(c.p95_ttft_recover.count()),
          .half_open_share = c.half_open_share};
}

BackendRuntime::BackendRuntime(std::string n, upstream::HealthSettings hs) : name(std::move(n)), health(hs) {}

BackendRuntime::~BackendRuntime() {
  if (sim) {
    sim->shutdown(Ms(100));
    sim->join();
  }
}

bool BackendRuntime::saturated(Clock::time_point now) const {
  if (cfg.load.source == config::LoadSource::none) return false;
  const auto r = load.get(now, 3 * cfg.load.interval);
  return r && r->kv >= cfg.load.max_kv;
}

bool BackendRuntime::usable(Clock::time_point now, bool despite_ejection) const {
  if (drained.load(std::memory_order_relaxed)) return false;  // even as a last resort
  if (despite_ejection ? !health.healthy() : !health.usable(now)) return false;
  // A backend whose memory is full takes no new request while another can (when none
  // can, the gate holds the route's requests; one let through goes anyway).
  if (!despite_ejection && saturated(now)) return false;
  // (Relaxed, the adaptive limit gives way to the ceiling: the gate let the request in on
  // a limit the monitor had not yet told it was lowered.)
  if (const int limit = despite_ejection ? cfg.max_in_flight : max_in_flight();
      limit > 0 && in_flight.load(std::memory_order_relaxed) >= limit) {
    return false;
  }
  if (breaker && breaker->state(now) == upstream::Breaker::State::open) return false;
  if (provider && provider->breaker && provider->breaker->state(now) == upstream::Breaker::State::open) return false;
  return true;
}

std::string_view BackendRuntime::state_word(Clock::time_point now) const {
  if (drained.load(std::memory_order_relaxed)) return "drained";
  const auto h = health.snapshot(now);
  if (!h.healthy) return "unhealthy";
  if (h.ejected) return "ejected";
  if (breaker) {
    const auto s = breaker->state(now);
    if (s == upstream::Breaker::State::open) return "breaker_open";
    if (s == upstream::Breaker::State::half_open) return "breaker_half_open";
  }
  if (provider && provider->breaker) {
    const auto s = provider->breaker->state(now);
    if (s == upstream::Breaker::State::open) return "provider_breaker_open";
    if (s == upstream::Breaker::State::half_open) return "provider_breaker_half_open";
  }
  return "up";
}

// The probe and monitor thread: one event loop with its own HTTP client.
struct Router::Impl {
  net::io_context io;
  std::unique_ptr<http::Client> client = http::Client::create(io.get_executor(), 4);
  net::steady_timer probe_timer{io}, monitor_timer{io};
  std::thread thread;
  std::atomic<bool> started{false}, stopping{false};
  static constexpr int kMaxWebhookPosts = 64;
  std::atomic<int> webhook_posts{0};  // notices being sent
  std::unordered_map<std::string, std::string> last_state;  // backend name -> state word (monitor)
  std::unordered_map<std::string, bool> probing;            // backend name -> probe in flight
  std::unordered_map<std::string, Clock::time_point> load_due;  // backend name -> next load read
  std::unordered_map<std::string, bool> held;               // route alias -> held (hold_tick)
  std::unordered_map<std::string, int> told_limit;          // backend -> adaptive limit the gate knows
  net::steady_timer load_timer{io};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  // A backend nobody uses any more is destroyed on this thread, not on the worker that
  // dropped the last reference: an embedded simulator takes a while to stop.
  void dispose(BackendRuntime* b) {
    if (started.load() && !stopping.load()) {
      net::post(io, [b] { delete b; });
    } else {
      delete b;
    }
  }
};

Router::Router(std::shared_ptr<const config::Config> cfg, telemetry::Metrics* metrics)
    : impl_(std::make_unique<Impl>()), metrics_(metrics) {
  install(std::move(cfg));
}

Router::~Router() { stop(); }

std::shared_ptr<const RoutingTable> Router::table() const {
  std::lock_guard lock(mu_);
  return table_;
}

std::shared_ptr<BackendRuntime> Router::backend_for(const config::Config& cfg, const config::Route& route,
                                                    const config::Backend& b, ProviderMap& providers) {
  const config::BreakerConfig& bc = route.breaker ? *route.breaker : cfg.routing.breaker;
  if (auto it = backends_.find(b.name); it != backends_.end()) {
    const auto& old = *it->second;
    // Unchanged: keep its state. (For `simulated`, the embedded server's own address
    // replaced host and port: compare what was configured.)
    config::Backend configured = old.cfg;
    if (b.provider == config::Provider::simulated) {
      configured.host = b.host;
      configured.port = b.port;
      configured.tls = b.tls;
      configured.path_prefix = b.path_prefix;
    }
    if (configured == b && same_breaker(old.breaker_cfg, bc) && same_health(old.health_cfg, cfg.routing.health) &&
        old.provider && same_breaker(old.provider->cfg, cfg.routing.provider_breaker)) {
      return it->second;
    }
  }
  std::shared_ptr<BackendRuntime> be(new BackendRuntime(b.name, health_settings(cfg.routing.health)),
                                     [impl = impl_.get()](BackendRuntime* p) { impl->dispose(p); });
  be->health_cfg = cfg.routing.health;
  be->cfg = b;
  be->breaker_cfg = bc;
  if (b.adaptive.target_ttft.count() > 0 && b.max_in_flight > 0) {
    be->adaptive.configure(b.adaptive.target_ttft, b.adaptive.min, b.max_in_flight, b.adaptive.interval, Clock::now());
  }
  if (bc.enabled) be->breaker = std::make_unique<upstream::Breaker>(breaker_settings(bc));
  if (b.provider == config::Provider::simulated) {
    // The demo provider: the simulator's HTTP face, embedded in this process on a loopback
    // port, so the demo exercises the same path as a real upstream.
    sim::SimServerOptions so;
    so.settings = b.sim;
    so.models = {b.model};
    so.workers = 1;
    try {
      be->sim = sim::SimServer::start(so);
    } catch (const std::exception& e) {
      throw std::runtime_error("backend " + b.name + ": the embedded simulator did not start: " + e.what());
    }
    be->cfg.tls = false;
    be->cfg.host = "127.0.0.1";
    be->cfg.port = be->sim->port();
    be->cfg.path_prefix = "";
    be->wire = config::Provider::openai;
  } else {
    be->wire = b.provider;
  }
  be->target.tls = be->cfg.tls;
  be->target.host = be->cfg.host;
  be->target.port = be->cfg.port;
  be->target.verify = be->cfg.tls_verify;
  be->target.ca_file = be->cfg.ca_file;
  if (be->wire == config::Provider::anthropic) {
    if (!b.api_key.empty()) be->credentials.emplace_back("x-api-key", b.api_key);
    be->credentials.emplace_back("anthropic-version", "2023-06-01");
  } else if (!b.api_key.empty()) {
    be->credentials.emplace_back("Authorization", "Bearer " + b.api_key);
  }
  be->label = be->cfg.host + ":" + std::to_string(be->cfg.port);
  be->record_name = *interned_.insert(b.name).first;
  be->record_model = *interned_.insert(b.model).first;
  if (metrics_) be->metrics_backend = metrics_->add_backend(b.name);
  // The provider endpoint: every backend on one provider's host shares its fate (an API
  // outage, an account's rate limit).
  const std::string pkey = b.provider == config::Provider::simulated
                               ? "simulated://" + b.name
                               : std::string(config::to_string(b.provider)) + "://" + b.host + ":" + std::to_string(b.port);
  auto& prov = providers[pkey];
  const auto& pc = cfg.routing.provider_breaker;
  if (!prov || !same_breaker(prov->cfg, pc)) {
    prov = std::make_shared<ProviderRuntime>();
    prov->key = pkey;
    prov->cfg = pc;
    if (pc.enabled) prov->breaker = std::make_unique<upstream::Breaker>(breaker_settings(pc));
  }
  be->provider = prov;
  return be;
}

void Router::install(std::shared_ptr<const config::Config> cfg) {
  std::lock_guard lock(mu_);
  auto t = std::make_shared<RoutingTable>();
  t->cfg = cfg;
  t->version = version_.load() + 1;
  t->loaded_unix_ms = unix_ms_now();
  const auto old = table_;
  // Built aside and committed at the end: a failure leaves everything as it was.
  std::unordered_map<std::string, std::shared_ptr<BackendRuntime>> fresh;
  ProviderMap providers = providers_;
  auto stats = stats_;
  // First every route's backends (a failure here leaves everything as it was).
  for (const auto& route : cfg->routes) {
    RouteRuntime rr;
    rr.route = &route;
    rr.record_alias = *interned_.insert(route.alias).first;
    if (metrics_) rr.metrics_model = metrics_->add_model(route.alias);
    rr.encoding = tokenizer::encoding_for_model(route.primary().model);
    std::vector<int> weights;
    for (const auto& b : route.backends) {
      auto it = fresh.find(b.name);
      std::shared_ptr<BackendRuntime> be = it != fresh.end() ? it->second : backend_for(*cfg, route, b, providers);
      fresh[b.name] = be;
      rr.members.push_back(be);
      weights.push_back(b.weight);
    }
    // Keep the balancer (its in-flight counts and TTFT averages) and the canary judge when
    // the route's members and policy did not change.
    const RouteRuntime* before = old ? old->find(route.alias) : nullptr;
    bool same_members = before && before->members.size() == rr.members.size() &&
                        before->route->balance == route.balance;
    for (std::size_t i = 0; same_members && i < rr.members.size(); ++i) {
      same_members = before->members[i] == rr.members[i] && before->route->backends[i].weight == route.backends[i].weight;
    }
    rr.balancer = same_members ? before->balancer
                               : std::make_shared<upstream::Balancer>(policy_of(route.balance), std::move(weights));
    if (route.canary) {
      const auto& c = *route.canary;
      const bool same_canary = before && before->route->canary && before->judge &&
                               before->route->canary->alias == c.alias && before->route->canary->window == c.window &&
                               before->route->canary->min_requests == c.min_requests &&
                               before->route->canary->max_error_rate_increase == c.max_error_rate_increase &&
                               before->route->canary->max_ttft_ratio == c.max_ttft_ratio;
      rr.judge = same_canary ? before->judge
                             : std::make_shared<upstream::CanaryJudge>(upstream::CanarySettings{
                                   .window = c.window,
                                   .min_requests = static_cast<std::uint32_t>(c.min_requests),
                                   .max_error_rate_increase = c.max_error_rate_increase,
                                   .max_ttft_ratio = c.max_ttft_ratio});
    }
    auto& st = stats[route.alias];
    if (!st) st = std::make_shared<RouteStats>();
    const auto w = canary_weights_.find(route.alias);
    st->canary_weight.store(w == canary_weights_.end() ? -1.0 : w->second, std::memory_order_relaxed);
    rr.stats = st;
    t->routes.emplace(route.alias, std::move(rr));
  }
  // Then the links between routes (validated: every name exists).
  for (const auto& route : cfg->routes) {
    auto& rr = t->routes.at(route.alias);
    if (route.canary) rr.canary = t->find(route.canary->alias);
    for (const auto& f : route.fallbacks) {
      if (const auto* fr = t->find(f)) rr.fallbacks.push_back(fr);
    }
    auto add_wires = [&rr](const RouteRuntime* r) {
      if (!r) return;
      auto add = [](std::vector<config::Provider>& to, config::Provider w) {
        if (std::find(to.begin(), to.end(), w) == to.end()) to.push_back(w);
      };
      for (const auto& m : r->members) {
        add(rr.wires, m->wire);
        if (!r->route->drop_params) add(rr.strict_wires, m->wire);
      }
    };
    add_wires(&rr);
    add_wires(rr.canary);
    for (const auto* f : rr.fallbacks) add_wires(f);
  }
  backends_ = std::move(fresh);
  for (const auto& [n, be] : backends_) be->drained.store(drained_.count(n) > 0, std::memory_order_relaxed);
  stats_ = std::move(stats);
  // Providers no backend of this table uses.
  for (auto it = providers.begin(); it != providers.end();) {
    bool used = false;
    for (const auto& [n, be] : backends_) used = used || be->provider == it->second;
    it = used ? std::next(it) : providers.erase(it);
  }
  providers_ = std::move(providers);
  table_ = std::move(t);
  version_.store(table_->version, std::memory_order_release);
}

void Router::note_reload(bool ok, std::string message) {
  std::lock_guard lock(mu_);
  if (ok) {
    ++reload_.ok;
  } else {
    ++reload_.failed;
    reload_.last_error = std::move(message);
  }
  reload_.last_unix_ms = unix_ms_now();
}

void Router::set_drained(std::unordered_set<std::string> names) {
  std::lock_guard lock(mu_);
  drained_ = std::move(names);
  for (const auto& [n, be] : backends_) be->drained.store(drained_.count(n) > 0, std::memory_order_relaxed);
}

std::unordered_set<std::string> Router::drained() const {
  std::lock_guard lock(mu_);
  return drained_;
}

void Router::set_canary_weights(std::unordered_map<std::string, double> weights) {
  std::lock_guard lock(mu_);
  canary_weights_ = std::move(weights);
  for (const auto& [alias, st] : stats_) {
    const auto w = canary_weights_.find(alias);
    st->canary_weight.store(w == canary_weights_.end() ? -1.0 : w->second, std::memory_order_relaxed);
  }
}

std::unordered_map<std::string, double> Router::canary_weights() const {
  std::lock_guard lock(mu_);
  return canary_weights_;
}

Router::ReloadStatus Router::reload_status() const {
  std::lock_guard lock(mu_);
  return reload_;
}

std::vector<std::shared_ptr<BackendRuntime>> Router::backends() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<BackendRuntime>> v;
  for (const auto& [n, b] : backends_) v.push_back(b);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  return v;
}

std::vector<std::shared_ptr<ProviderRuntime>> Router::providers() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<ProviderRuntime>> v;
  for (const auto& [k, p] : providers_) v.push_back(p);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->key < b->key; });
  return v;
}

namespace {

// A share for JSON (four decimals).
std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// One read of a backend's load signals (GET its load path on its host and port).
net::awaitable<void> read_load(http::Client& client, std::shared_ptr<BackendRuntime> be) {
  const auto& l = be->cfg.load;
  http::ClientRequest req;
  req.method = "GET";
  req.target = l.path;
  for (const auto& h : be->credentials) req.headers.push_back(h);
  const auto timeout = std::max(l.interval, Ms(200));
  auto sent = co_await client.send(be->target, req, timeout, timeout);
  if (std::holds_alternative<http::ClientError>(sent)) {
    be->load.failed();
    co_return;
  }
  auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
  auto body = co_await resp.read_all(4 << 20, timeout);
  auto* text = std::get_if<std::string>(&body);
  if (!text || resp.status() != 200) {
    if (!text) resp.abort();
    be->load.failed();
    co_return;
  }
  auto r = l.source == config::LoadSource::ollama ? upstream::read_ollama_ps(*text, l.vram_bytes)
                                                   : upstream::read_vllm_metrics(*text);
  if (r) be->load.set(*r, Clock::now());
  else be->load.failed();
}

// A probe: a real one-token completion, not an open port. OK (an empty error) when a 2xx
// answer carries a completion in the backend's protocol within the timeout.
net::awaitable<std::string> probe_exchange(http::Client& client, const BackendRuntime& be, const config::Config& cfg,
                                           Ms timeout, Clock::time_point t0) {
  std::string body = R"({"model":)";
  append_json_string(body, be.cfg.model);
  body += R"(,"messages":[{"role":"user","content":"Reply with OK."}],"max_tokens":1,"stream":false})";
  auto parsed = llm::parse_chat_request(body, cfg);
  auto* req = std::get_if<llm::ChatRequest>(&parsed);
  if (!req) co_return "cannot build the probe request";
  auto call = llm::build_call(be.wire, *req, be.cfg);
  http::ClientRequest ureq;
  ureq.target = std::move(call.target);
  ureq.body = std::move(call.body);
  ureq.headers = be.credentials;
  ureq.headers.emplace_back("X-Sluice-Probe", "1");
  auto sent = co_await client.send(be.target, ureq, timeout, timeout);
  if (auto* err = std::get_if<http::ClientError>(&sent)) {
    std::string why = err->message;
    if (why.empty()) why = "no answer";
    co_return why;
  }
  auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
  const auto left = std::max(Ms(1), timeout - std::chrono::duration_cast<Ms>(Clock::now() - t0));
  auto all = co_await resp.read_all(1 << 20, left);
  if (auto* err = std::get_if<http::ClientError>(&all)) {
    resp.abort();
    co_return "answer cut: " + err->message;
  }
  if (resp.status() < 200 || resp.status() > 299) co_return "HTTP " + std::to_string(resp.status());
  auto& text = std::get<std::string>(all);
  auto completion = llm::read_answer(be.wire, std::move(text), *req, "probe");
  if (!completion) co_return "the answer is not a completion";
  co_return std::string();
}

net::awaitable<void> probe_one(http::Client& client, std::shared_ptr<BackendRuntime> be, const config::Config& cfg,
                               Ms timeout, std::function<void(bool changed)> done) {
  const auto t0 = Clock::now();
  std::string error;
  try {
    error = co_await probe_exchange(client, *be, cfg, timeout, t0);
  } catch (const std::exception& e) {
    error = std::string("probe failed: ") + e.what();
  }
  const auto now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t0).count();
  done(be->health.probe_result(now, error.empty(), ms, error));  // also clears the in-flight mark
}

}  // namespace

void Router::start() {
  if (impl_->started) return;
  impl_->started = true;
  impl_->work.emplace(impl_->io.get_executor());
  // The probe loop: every health.interval, each backend with probe on gets one probe (not
  // two at once).
  net::co_spawn(
      impl_->io,
      [this]() -> net::awaitable<void> {
        auto& t = impl_->probe_timer;
        while (!impl_->stopping) {
          auto tab = table();
          const auto& h = tab->cfg->routing.health;
          if (h.interval.count() > 0) {
            for (const auto& be : backends()) {
              if (!be->cfg.probe || impl_->probing[be->name]) continue;
              impl_->probing[be->name] = true;
              auto done = [this, be, tab](bool changed) {
                impl_->probing[be->name] = false;
                if (changed) {
                  const bool healthy = be->health.snapshot(Clock::now()).healthy;
                  std::string f = R"("backend":)";
                  append_json_string(f, be->name);
                  f += R"(,"detail":)";
                  append_json_string(f, be->health.snapshot(Clock::now()).last_probe_error);
                  notify(healthy ? "backend.healthy" : "backend.unhealthy", std::move(f));
                }
              };
              net::co_spawn(impl_->io, probe_one(*impl_->client, be, *tab->cfg, h.timeout, std::move(done)),
                            net::detached);
            }
          }
          t.expires_after(h.interval.count() > 0 ? h.interval : Ms(1000));
          co_await t.async_wait(nothrow);  // cancelled by stop()
        }
      },
      net::detached);
  // Load signals: each backend with `load` read every its interval (not two at once); then
  // the routes whose every backend is saturated are held at the gate.
  net::co_spawn(
      impl_->io,
      [this]() -> net::awaitable<void> {
        auto& t = impl_->load_timer;
        std::unordered_map<std::string, std::shared_ptr<bool>> reading;
        while (!impl_->stopping) {
          const auto now = Clock::now();
          Ms next(250);
          for (const auto& be : backends()) {
            const auto& l = be->cfg.load;
            if (l.source == config::LoadSource::none) continue;
            next = std::min(next, std::chrono::duration_cast<Ms>(l.interval));
            auto& busy = reading[be->name];
            if (!busy) busy = std::make_shared<bool>(false);
            auto& due = impl_->load_due[be->name];
            if (*busy || now < due) continue;
            due = now + l.interval;
            *busy = true;
            net::co_spawn(impl_->io,
                          [this, be, flag = busy]() -> net::awaitable<void> {
                            co_await read_load(*impl_->client, be);
                            *flag = false;
                            hold_tick();
                          },
                          net::detached);
          }
          t.expires_after(std::max(next / 2, Ms(25)));
          co_await t.async_wait(nothrow);  // cancelled by stop()
        }
      },
      net::detached);
  // The monitor: every 250 ms, logs backend state changes and notices routes that lose
  // or regain a usable backend.
  net::co_spawn(
      impl_->io,
      [this]() -> net::awaitable<void> {
        auto& t = impl_->monitor_timer;
        while (!impl_->stopping) {
          t.expires_after(Ms(250));
          co_await t.async_wait(nothrow);
          if (!impl_->stopping) monitor_tick();
        }
      },
      net::detached);
  impl_->thread = std::thread([this] {
    name_this_thread("sluice-monitor");
    impl_->io.run();
  });
}

// Lets the thread's work end by itself (a probe or webhook call in flight ends within its
// timeout), so no coroutine is left suspended on the HTTP client.
void Router::stop() {
  if (!impl_->started || impl_->stopping.exchange(true)) return;
  net::post(impl_->io, [this] {
    impl_->probe_timer.cancel();
    impl_->monitor_timer.cancel();
    impl_->load_timer.cancel();
  });
  impl_->work.reset();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->io.restart();
  impl_->io.poll();  // disposals posted while it stopped
  impl_->started = false;
}

void Router::hold_tick() {
  const auto tab = table();
  const auto now = Clock::now();
  for (const auto& [alias, rr] : tab->routes) {
    bool loaded = false, all = !rr.members.empty();
    for (const auto& m : rr.members) {
      if (m->cfg.load.source == config::LoadSource::none) {
        all = false;
        continue;
      }
      loaded = true;
      if (!m->saturated(now)) all = false;
    }
    if (!loaded) continue;
    bool& was = impl_->held[alias];
    if (was == all) continue;
    was = all;
    std::string f = R"("route":)";
    append_json_string(f, alias);
    notify(all ? "route.held" : "route.released", std::move(f));
    if (on_hold_) on_hold_(alias, all);
  }
}

void Router::monitor_tick() {
  const auto now = Clock::now();
  // Adaptive concurrency: each backend's limit reconsidered; the gate follows (also a
  // backend replaced by a reload, which starts again from its ceiling).
  for (const auto& be : backends()) {
    if (!be->adaptive.on()) {
      // No longer adaptive (a reload): the gate goes back to its configured limit.
      if (auto it = impl_->told_limit.find(be->name); it != impl_->told_limit.end()) {
        if (on_limit_ && be->cfg.max_in_flight > 0) on_limit_(be->name, be->cfg.max_in_flight);
        impl_->told_limit.erase(it);
      }
      continue;
    }
    const int was = be->adaptive.limit();
    if (be->adaptive.tick(now, be->in_flight.load(std::memory_order_relaxed))) {
      std::cerr << "sluice: backend " << be->name << " in-flight limit " << was << " -> " << be->adaptive.limit()
                << " (TTFT p90 " << static_cast<std::int64_t>(be->adaptive.snapshot().last_p90_ms) << " ms)\n";
    }
    int& told = impl_->told_limit[be->name];
    if (told != be->adaptive.limit() && on_limit_) on_limit_(be->name, be->adaptive.limit());
    told = be->adaptive.limit();
  }
  for (const auto& be : backends()) {
    const std::string& name = be->name;
    const std::string word(be->state_word(now));
    auto& last = impl_->last_state[name];
    if (last.empty()) last = "up";
    if (word == last) continue;
    std::string f = R"("backend":)";
    append_json_string(f, name);
    f += R"(,"from":)";
    append_json_string(f, last);
    f += R"(,"to":)";
    append_json_string(f, word);
    std::string why;
    if (word == "breaker_open" && be->breaker) why = be->breaker->last_reason();
    else if (word == "provider_breaker_open" && be->provider && be->provider->breaker) why = be->provider->breaker->last_reason();
    else if (word == "unhealthy") why = be->health.snapshot(now).last_probe_error;
    else if (word == "ejected") why = "consecutive failed requests";
    if (!why.empty()) {
      f += R"(,"detail":)";
      append_json_string(f, why);
    }
    last = word;
    notify("backend.state", std::move(f));
  }
  auto tab = table();
  for (const auto& [alias, rr] : tab->routes) {
    std::string down;
    for (const auto& m : rr.members) {
      if (m->usable(now)) continue;
      if (!down.empty()) down += ',';
      append_json_string(down, m->name);
    }
    const bool degraded = !down.empty();
    if (rr.stats->degraded.exchange(degraded) == degraded) continue;
    std::string f = R"("route":)";
    append_json_string(f, alias);
    f += R"(,"unusable":[)" + down + "]";
    notify(degraded ? "route.degraded" : "route.recovered", std::move(f));
  }
}

void Router::notify(std::string event, std::string fields) {
  std::string body = R"({"event":)";
  append_json_string(body, event);
  body += R"(,"unix_ms":)" + std::to_string(unix_ms_now()) + "," + fields + "}";
  std::cerr << "sluice: routing " << body << std::endl;
  std::string url;
  {
    std::lock_guard lock(mu_);
    if (table_) url = table_->cfg->routing.webhook_url;
  }
  if (url.empty() || !impl_->started || impl_->stopping) return;
  auto where = parse_webhook(url);
  if (!where) return;
  // Bounded: while the webhook is slow, notices beyond kMaxWebhookPosts in flight are only
  // logged (above).
  if (impl_->webhook_posts.fetch_add(1) >= Impl::kMaxWebhookPosts) {
    impl_->webhook_posts.fetch_sub(1);
    std::cerr << "sluice: routing webhook busy (" << Impl::kMaxWebhookPosts << " notices in flight): notice not sent"
              << std::endl;
    return;
  }
  net::post(impl_->io, [this, where = std::move(*where), body = std::move(body)]() mutable {
    net::co_spawn(
        impl_->io,
        [this, where = std::move(where), body = std::move(body)]() -> net::awaitable<void> {
          http::ClientRequest req;
          req.target = where.second;
          req.body = body;
          const http::Target& t = where.first;
          auto sent = co_await impl_->client->send(t, req, Ms(2000), Ms(5000));
          if (auto* r = std::get_if<std::unique_ptr<http::ClientResponse>>(&sent)) {
            co_await (*r)->read_all(64 * 1024, Ms(5000));
          } else {
            std::cerr << "sluice: routing webhook failed: " << std::get<http::ClientError>(sent).message << std::endl;
          }
          impl_->webhook_posts.fetch_sub(1);
        },
        net::detached);
  });
}

}  // namespace sluice::gateway

namespace sluice::gateway {

namespace {

int breaker_state_value(upstream::Breaker* b, Clock::time_point now) {
  if (!b) return 0;
  switch (b->state(now)) {
    case upstream::Breaker::State::closed: return 0;
    case upstream::Breaker::State::open: return 1;
    case upstream::Breaker::State::half_open: return 2;
  }
  return 0;
}

std::string label(std::string_view k, std::string_view v) {
  std::string s(k);
  s += "=\"";
  for (char c : v) {
    if (c == '\\' || c == '"') s += '\\';
    if (c == '\n') {
      s += "\\n";
      continue;
    }
    s += c;
  }
  s += '"';
  return s;
}

void append_breaker(std::string& o, upstream::Breaker* b, Clock::time_point now) {
  if (!b) {
    o += "null";
    return;
  }
  const auto c = b->counts();
  o += R"({"state":)";
  append_json_string(o, upstream::to_string(b->state(now)));
  o += R"(,"opened":)" + std::to_string(c.opened) + R"(,"half_opened":)" + std::to_string(c.half_opened) +
       R"(,"closed":)" + std::to_string(c.closed) + R"(,"last_reason":)";
  append_json_string(o, b->last_reason());
  o += '}';
}

}  // namespace

void Router::render_metrics(std::string& o) const {
  const auto now = Clock::now();
  const auto bes = backends();
  const auto provs = providers();
  const auto tab = table();
  using telemetry::metric_help;
  using telemetry::metric_line;
  metric_help(o, "sluice_backend_up", "gauge",
              "1 when the backend gets requests: healthy by its probes, not ejected, breakers not open.");
  for (const auto& b : bes) metric_line(o, "sluice_backend_up", label("backend", b->name), b->usable(now) ? 1 : 0);
  metric_help(o, "sluice_backend_load_option_changes_total", "counter",
              "Requests to an Ollama backend whose num_ctx, num_gpu or num_batch differed from the previous request's "
              "(the server loads the model again).");
  for (const auto& b : bes) {
    if (b->wire == config::Provider::ollama)
      metric_line(o, "sluice_backend_load_option_changes_total", label("backend", b->name), static_cast<double>(b->model_load.changes()));
  }
  metric_help(o, "sluice_backend_model_reloads_total", "counter",
              "Reloads seen on an Ollama backend: a request with changed load options whose first token took more than "
              "twice the backend's usual time (and 100 ms more).");
  for (const auto& b : bes) {
    if (b->wire == config::Provider::ollama)
      metric_line(o, "sluice_backend_model_reloads_total", label("backend", b->name), static_cast<double>(b->model_load.reloads()));
  }
  metric_help(o, "sluice_backend_healthy", "gauge", "1 when the backend's active probes say healthy.");
  std::vector<upstream::Health::Snapshot> hs;
  for (const auto& b : bes) hs.push_back(b->health.snapshot(now));
  for (std::size_t i = 0; i < bes.size(); ++i)
    metric_line(o, "sluice_backend_healthy", label("backend", bes[i]->name), hs[i].healthy ? 1 : 0);
  metric_help(o, "sluice_backend_probes_total", "counter", "Active health probes (one-token completions), by result.");
  for (std::size_t i = 0; i < bes.size(); ++i) {
    metric_line(o, "sluice_backend_probes_total", label("backend", bes[i]->name) + ",result=\"ok\"",
                static_cast<double>(hs[i].probes_ok));
    metric_line(o, "sluice_backend_probes_total", label("backend", bes[i]->name) + ",result=\"failed\"",
                static_cast<double>(hs[i].probes_failed));
  }
  metric_help(o, "sluice_backend_probe_seconds", "gauge", "Duration of the backend's last probe (-1: never probed).");
  for (std::size_t i = 0; i < bes.size(); ++i)
    metric_line(o, "sluice_backend_probe_seconds", label("backend", bes[i]->name),
                hs[i].last_probe_ms < 0 ? -1 : hs[i].last_probe_ms / 1000.0);
  {
    // The backends' own load signals (only those with `load`).
    const auto now = Clock::now();
    std::vector<std::pair<const BackendRuntime*, std::optional<upstream::LoadReading>>> loaded;
    for (const auto& b : bes) {
      if (b->cfg.load.source != config::LoadSource::none) loaded.emplace_back(b.get(), b->load.get(now, 3 * b->cfg.load.interval));
    }
    auto gauge = [&](std::string_view name, std::string_view help, auto value) {
      metric_help(o, name, "gauge", help);
      for (const auto& [b, r] : loaded) metric_line(o, name, label("backend", b->name), value(b, r));
    };
    gauge("sluice_backend_kv_usage", "Share of the backend's KV cache (or memory) in use, by its own signals (-1: no fresh reading).",
          [](const BackendRuntime*, const std::optional<upstream::LoadReading>& r) { return r ? r->kv : -1.0; });
    gauge("sluice_backend_requests_running", "Requests the backend says it is generating (-1: unknown).",
          [](const BackendRuntime*, const std::optional<upstream::LoadReading>& r) { return r ? static_cast<double>(r->running) : -1.0; });
    gauge("sluice_backend_requests_waiting", "Requests the backend says wait in its own queue (-1: unknown).",
          [](const BackendRuntime*, const std::optional<upstream::LoadReading>& r) { return r ? static_cast<double>(r->waiting) : -1.0; });
    gauge("sluice_backend_saturated", "1 while the backend's memory is at or above its max_kv: it takes no new request.",
          [now](const BackendRuntime* b, const std::optional<upstream::LoadReading>&) { return b->saturated(now) ? 1.0 : 0.0; });
    metric_help(o, "sluice_backend_load_reads_total", "counter", "Reads of the backend's load signals, by result.");
    for (const auto& [b, r] : loaded) {
      metric_line(o, "sluice_backend_load_reads_total", label("backend", b->name) + ",result=\"ok\"", static_cast<double>(b->load.reads()));
      metric_line(o, "sluice_backend_load_reads_total", label("backend", b->name) + ",result=\"failed\"", static_cast<double>(b->load.failures()));
    }
  }
  {
    // Adaptive concurrency (only the backends with `adaptive`).
    std::vector<std::pair<const BackendRuntime*, upstream::AdaptiveConcurrency::Snapshot>> adaptive;
    for (const auto& b : bes) {
      if (b->adaptive.on()) adaptive.emplace_back(b.get(), b->adaptive.snapshot());
    }
    metric_help(o, "sluice_backend_adaptive_limit", "gauge",
                "The backend's in-flight limit now, following its time to first token (models[].backends[].adaptive).");
    for (const auto& [b, s] : adaptive) metric_line(o, "sluice_backend_adaptive_limit", label("backend", b->name), s.limit);
    metric_help(o, "sluice_backend_adaptive_changes_total", "counter", "Changes of the adaptive in-flight limit, by direction.");
    for (const auto& [b, s] : adaptive) {
      metric_line(o, "sluice_backend_adaptive_changes_total", label("backend", b->name) + ",direction=\"down\"", static_cast<double>(s.decreases));
      metric_line(o, "sluice_backend_adaptive_changes_total", label("backend", b->name) + ",direction=\"up\"", static_cast<double>(s.increases));
    }
  }
  metric_help(o, "sluice_backend_ejections_total", "counter", "Times the backend was ejected after consecutive failed requests.");
  for (std::size_t i = 0; i < bes.size(); ++i)
    metric_line(o, "sluice_backend_ejections_total", label("backend", bes[i]->name), static_cast<double>(hs[i].ejections));
  metric_help(o, "sluice_breaker_state", "gauge", "Circuit breaker state: 0 closed, 1 open, 2 half-open.");
  for (const auto& b : bes) {
    if (b->breaker) metric_line(o, "sluice_breaker_state", "scope=\"backend\"," + label("name", b->name),
                                breaker_state_value(b->breaker.get(), now));
  }
  for (const auto& p : provs) {
    if (p->breaker) metric_line(o, "sluice_breaker_state", "scope=\"provider\"," + label("name", p->key),
                                breaker_state_value(p->breaker.get(), now));
  }
  metric_help(o, "sluice_breaker_transitions_total", "counter", "Circuit breaker transitions, by the state entered.");
  auto transitions = [&](std::string_view scope, const std::string& name, const upstream::Breaker& br) {
    const auto c = br.counts();
    const std::string l = "scope=\"" + std::string(scope) + "\"," + label("name", name);
    metric_line(o, "sluice_breaker_transitions_total", l + ",to=\"open\"", static_cast<double>(c.opened));
    metric_line(o, "sluice_breaker_transitions_total", l + ",to=\"half_open\"", static_cast<double>(c.half_opened));
    metric_line(o, "sluice_breaker_transitions_total", l + ",to=\"closed\"", static_cast<double>(c.closed));
  };
  for (const auto& b : bes) {
    if (b->breaker) transitions("backend", b->name, *b->breaker);
  }
  for (const auto& p : provs) {
    if (p->breaker) transitions("provider", p->key, *p->breaker);
  }
  std::vector<std::pair<std::string, std::shared_ptr<RouteStats>>> stats;
  {
    std::lock_guard lock(mu_);
    stats.assign(stats_.begin(), stats_.end());
  }
  std::sort(stats.begin(), stats.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto family = [&](std::string_view name, std::string_view text, auto get) {
    metric_help(o, name, "counter", text);
    for (const auto& [alias, st] : stats) metric_line(o, name, label("model", alias), static_cast<double>(get(*st)));
  };
  family("sluice_route_retries_total", "Further attempts on another backend of the model (before the first byte).",
         [](const RouteStats& s) { return s.retries.load(); });
  family("sluice_route_fallbacks_total", "Attempts on a fallback model's backends.",
         [](const RouteStats& s) { return s.fallbacks.load(); });
  family("sluice_route_exhausted_total", "Requests no backend could answer (503, or the canned reply).",
         [](const RouteStats& s) { return s.exhausted.load(); });
  family("sluice_route_canned_replies_total", "Requests answered with the route's canned reply.",
         [](const RouteStats& s) { return s.canned.load(); });
  metric_help(o, "sluice_route_overload_total", "counter",
              "Requests the model's full queue or long wait sent to its light model (to=\"model\") or its canned "
              "reply (to=\"canned\"), models[].overload.");
  for (const auto& [alias, st] : stats) {
    metric_line(o, "sluice_route_overload_total", label("model", alias) + R"(,to="model")", static_cast<double>(st->overload_light.load()));
    metric_line(o, "sluice_route_overload_total", label("model", alias) + R"(,to="canned")", static_cast<double>(st->overload_canned.load()));
  }
  family("sluice_canary_rollbacks_total", "Automatic canary rollbacks.",
         [](const RouteStats& s) { return s.rollbacks.load(); });
  metric_help(o, "sluice_canary_requests_total", "counter", "Requests of a model with a canary, by the set chosen first.");
  for (const auto& [alias, st] : stats) {
    if (st->canary_requests.load() + st->stable_requests.load() == 0) continue;
    metric_line(o, "sluice_canary_requests_total", label("model", alias) + ",set=\"canary\"",
                static_cast<double>(st->canary_requests.load()));
    metric_line(o, "sluice_canary_requests_total", label("model", alias) + ",set=\"stable\"",
                static_cast<double>(st->stable_requests.load()));
  }
  metric_help(o, "sluice_canary_active", "gauge", "1 while a model's canary gets traffic (0 after a rollback).");
  for (const auto& [alias, rr] : tab->routes) {
    if (rr.judge) metric_line(o, "sluice_canary_active", label("model", alias), rr.judge->rolled_back() ? 0 : 1);
  }
  const auto rs = reload_status();
  metric_help(o, "sluice_config_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.");
  metric_line(o, "sluice_config_reloads_total", "result=\"ok\"", static_cast<double>(rs.ok));
  metric_line(o, "sluice_config_reloads_total", "result=\"failed\"", static_cast<double>(rs.failed));
  metric_help(o, "sluice_routing_table_version", "gauge", "Version of the routing table in use (1 at start, +1 per reload).");
  metric_line(o, "sluice_routing_table_version", "", static_cast<double>(tab->version));
}

void Router::render_infra(std::string& o) const {
  const auto now = Clock::now();
  const auto tab = table();
  const auto rs = reload_status();
  o += R"({"table_version":)" + std::to_string(tab->version) + R"(,"loaded_unix_ms":)" +
       std::to_string(tab->loaded_unix_ms) + R"(,"reloads":{"ok":)" + std::to_string(rs.ok) + R"(,"failed":)" +
       std::to_string(rs.failed) + R"(,"last_error":)";
  append_json_string(o, rs.last_error);
  o += R"(},"probes":{"interval_ms":)" + std::to_string(tab->cfg->routing.health.interval.count()) +
       R"(,"timeout_ms":)" + std::to_string(tab->cfg->routing.health.timeout.count()) + R"(},"backends":[)";
  bool first = true;
  for (const auto& b : backends()) {
    if (!first) o += ',';
    first = false;
    const auto h = b->health.snapshot(now);
    o += R"({"name":)";
    append_json_string(o, b->name);
    o += R"(,"provider":)";
    append_json_string(o, config::to_string(b->cfg.provider));
    o += R"(,"address":)";
    append_json_string(o, b->label);
    o += R"(,"model":)";
    append_json_string(o, b->cfg.model);
    o += R"(,"state":)";
    append_json_string(o, b->state_word(now));
    o += R"(,"usable":)";
    o += b->usable(now) ? "true" : "false";
    o += R"(,"in_flight":)" + std::to_string(b->in_flight.load()) +
         R"(,"max_in_flight":)" + std::to_string(b->cfg.max_in_flight);
    if (b->wire == config::Provider::ollama) {
      o += R"(,"load_options":{"changes":)" + std::to_string(b->model_load.changes()) + R"(,"reloads_seen":)" +
           std::to_string(b->model_load.reloads()) + "}";
    }
    if (b->adaptive.on()) {
      const auto s = b->adaptive.snapshot();
      o += R"(,"adaptive":{"limit":)" + std::to_string(s.limit) + R"(,"p90_ttft_ms":)" +
           std::to_string(static_cast<std::int64_t>(s.last_p90_ms)) + R"(,"decreases":)" + std::to_string(s.decreases) +
           R"(,"increases":)" + std::to_string(s.increases) + "}";
    }
    o += R"(,"health":{"healthy":)";
    o += h.healthy ? "true" : "false";
    o += R"(,"ejected":)";
    o += h.ejected ? "true" : "false";
    o += R"(,"ejected_for_ms":)" + std::to_string(static_cast<std::int64_t>(h.ejected_for_ms)) +
         R"(,"failed_streak":)" + std::to_string(h.failed_streak) + R"(,"ejections":)" + std::to_string(h.ejections) +
         R"(,"probes_ok":)" + std::to_string(h.probes_ok) + R"(,"probes_failed":)" + std::to_string(h.probes_failed) +
         R"(,"probe_streak":)" + std::to_string(h.probe_streak) + R"(,"last_probe_ms":)" +
         std::to_string(static_cast<std::int64_t>(h.last_probe_ms)) + R"(,"last_probe_error":)";
    append_json_string(o, h.last_probe_error);
    if (b->cfg.load.source != config::LoadSource::none) {
      const auto r = b->load.get(now, 3 * b->cfg.load.interval);
      o += R"(},"load":{"source":")" + std::string(config::to_string(b->cfg.load.source)) + R"(","fresh":)" +
           (r ? "true" : "false") + R"(,"kv":)" + fmt_double(r ? r->kv : -1) + R"(,"running":)" +
           std::to_string(r ? r->running : -1) + R"(,"waiting":)" + std::to_string(r ? r->waiting : -1) +
           R"(,"saturated":)" + (b->saturated(now) ? "true" : "false") + R"(,"max_kv":)" + fmt_double(b->cfg.load.max_kv) +
           R"(,"reads":)" + std::to_string(b->load.reads()) + R"(,"failures":)" + std::to_string(b->load.failures());
    }
    o += R"(},"breaker":)";
    append_breaker(o, b->breaker.get(), now);
    o += R"(,"provider_breaker":)";
    append_breaker(o, b->provider ? b->provider->breaker.get() : nullptr, now);
    o += '}';
  }
  o += R"(],"routes":[)";
  std::vector<const RouteRuntime*> routes;
  for (const auto& [alias, rr] : tab->routes) routes.push_back(&rr);
  std::sort(routes.begin(), routes.end(), [](auto* a, auto* b) { return a->route->alias < b->route->alias; });
  first = true;
  for (const auto* rr : routes) {
    if (!first) o += ',';
    first = false;
    const auto& r = *rr->route;
    o += R"({"model":)";
    append_json_string(o, r.alias);
    o += R"(,"balance":)";
    append_json_string(o, config::to_string(r.balance));
    o += R"(,"retries":)" + std::to_string(r.retries) + R"(,"backends":[)";
    for (std::size_t i = 0; i < rr->members.size(); ++i) {
      if (i) o += ',';
      o += R"({"name":)";
      append_json_string(o, rr->members[i]->name);
      o += R"(,"weight":)" + std::to_string(r.backends[i].weight) + R"(,"in_flight":)" +
           std::to_string(rr->balancer->in_flight(static_cast<int>(i))) + R"(,"ttft_ewma_ms":)" +
           std::to_string(static_cast<std::int64_t>(rr->balancer->ttft_ewma_ms(static_cast<int>(i)))) + "}";
    }
    o += R"(],"fallbacks":[)";
    for (std::size_t i = 0; i < r.fallbacks.size(); ++i) {
      if (i) o += ',';
      append_json_string(o, r.fallbacks[i]);
    }
    o += "]";
    const auto& st = *rr->stats;
    o += R"(,"degraded":)";
    o += st.degraded.load() ? "true" : "false";
    o += R"(,"counts":{"retries":)" + std::to_string(st.retries.load()) + R"(,"fallbacks":)" +
         std::to_string(st.fallbacks.load()) + R"(,"exhausted":)" + std::to_string(st.exhausted.load()) +
         R"(,"canned":)" + std::to_string(st.canned.load()) + R"(,"overload_model":)" +
         std::to_string(st.overload_light.load()) + R"(,"overload_canned":)" + std::to_string(st.overload_canned.load()) +
         "}";
    if (r.canary) {
      o += R"(,"canary":{"model":)";
      append_json_string(o, r.canary->alias);
      o += R"(,"weight":)" + fmt_weight(st.canary_share(*r.canary)) + R"(,"configured_weight":)" +
           fmt_weight(r.canary->weight) + R"(,"set_by_operator":)" +
           (st.canary_weight.load(std::memory_order_relaxed) >= 0 ? "true" : "false") + R"(,"active":)";
      o += rr->judge && !rr->judge->rolled_back() ? "true" : "false";
      o += R"(,"requests":{"canary":)" + std::to_string(st.canary_requests.load()) + R"(,"stable":)" +
           std::to_string(st.stable_requests.load()) + "}";
      if (rr->judge) {
        const auto sides = rr->judge->sides(now);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      R"(,"window":{"stable":{"requests":%llu,"error_rate":%.4f,"p95_ttft_ms":%.0f},"canary":{"requests":%llu,"error_rate":%.4f,"p95_ttft_ms":%.0f}})",
                      static_cast<unsigned long long>(sides.stable.total), sides.stable.error_rate(), sides.stable.p95_ms,
                      static_cast<unsigned long long>(sides.canary.total), sides.canary.error_rate(), sides.canary.p95_ms);
        o += buf;
        o += R"(,"rollback_reason":)";
        append_json_string(o, rr->judge->reason());
      }
      o += '}';
    }
    o += '}';
  }
  o += "]}";
}

}  // namespace sluice::gateway
