// Routing settings shared by every route: health probes and ejection, the circuit
// breakers (a route may override its backends' breaker), the webhook; and a route's
// canary. See docs/routing.md.
#include <string>

#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Table<HealthConfig>& health_table() {
  static const Table<HealthConfig> t{
      "routing.health",
      {
          duration("interval", &HealthConfig::interval, Millis{0},
                   "Active probe period (a real one-token completion per backend with `probe: true`); 0 = no active "
                   "probes."),
          duration("timeout", &HealthConfig::timeout, Millis{1}, "A probe slower than this failed."),
          integer("unhealthy_after", &HealthConfig::unhealthy_after, 1, 1'000'000,
                  "Consecutive failed probes → unhealthy."),
          integer("healthy_after", &HealthConfig::healthy_after, 1, 1'000'000,
                  "Consecutive good probes → healthy again."),
          integer("eject_after", &HealthConfig::eject_after, 0, 1'000'000,
                  "Consecutive failed requests → the backend is ejected; 0 = never."),
          duration("eject_for", &HealthConfig::eject_for, Millis{1},
                   "An ejected backend gets traffic again after this."),
      }};
  return t;
}

const Table<BreakerConfig>& breaker_table() {
  static const Table<BreakerConfig> t{
      "routing.breaker",
      {
          boolean("enabled", &BreakerConfig::enabled, "Whether the breaker may open."),
          duration("window", &BreakerConfig::window, Millis{100}, "Sliding window (10 buckets)."),
          integer("min_requests", &BreakerConfig::min_requests, 1, 1'000'000,
                  "No decision on fewer requests in the window."),
          number("error_rate", &BreakerConfig::error_rate, 0, 1,
                 "Open at or above this error rate; 0 = never on errors."),
          duration("p95_ttft", &BreakerConfig::p95_ttft, Millis{0},
                   "Open when the window's P95 time to first token (for a non-streamed answer: time to the whole "
                   "answer) is above; 0 = never."),
          duration("open_for", &BreakerConfig::open_for, Millis{1}, "Then half-open."),
          integer("half_open_probes", &BreakerConfig::half_open_probes, 1, 1'000'000,
                  "Requests let through while half-open (with `recover_for`: at least this many before it may "
                  "close)."),
          duration("recover_for", &BreakerConfig::recover_for, Millis{0},
                   "Recovery with hysteresis: half-open lasts at least this long, letting `half_open_share` of the "
                   "requests through, and closes only when their P95 stays at or under `p95_ttft_recover`. 0 = the "
                   "plain recovery: `half_open_probes` successes close it."),
          duration("p95_ttft_recover", &BreakerConfig::p95_ttft_recover, Millis{0},
                   "With `recover_for`: the P95 under which the half-open requests must stay for it to close (lower "
                   "than `p95_ttft`: the band between them keeps it half-open).")
              .with_default("`p95_ttft`"),
          number("half_open_share", &BreakerConfig::half_open_share, 0.001, 1,
                 "With `recover_for`: the share of requests let through while half-open."),
      }};
  return t;
}

const Table<RoutingSettings>& routing_table() {
  static const Table<RoutingSettings> t{
      "routing",
      {
          section("health", &RoutingSettings::health, health_table(), "Active probes and passive ejection."),
          custom<RoutingSettings>("breaker", "map", "see `routing.breaker`",
                                  "Circuit breaker of each backend. A route's `breaker:` overrides it for that "
                                  "route's backends.",
                                  [](Loader& l, const YAML::Node& n, const std::string& p, RoutingSettings& rs) {
                                    read_breaker(l, n, p, rs.breaker);
                                    return true;
                                  }),
          custom<RoutingSettings>("provider_breaker", "map", "see `routing.breaker`",
                                  "Circuit breaker of each provider endpoint (provider + host:port); the keys of "
                                  "`routing.breaker`, with their defaults (it does not inherit `routing.breaker`'s "
                                  "values).",
                                  [](Loader& l, const YAML::Node& n, const std::string& p, RoutingSettings& rs) {
                                    read_breaker(l, n, p, rs.provider_breaker);
                                    return true;
                                  }),
          custom<RoutingSettings>("webhook", "URL", "none",
                                  "`http://` or `https://` URL POSTed a JSON notice when a route degrades or "
                                  "recovers. Checked like `base_url`, except that a query (`?token=...`) is allowed. "
                                  "`\"\"` = none.",
                                  [](Loader& l, const YAML::Node& n, const std::string& p, RoutingSettings& rs) {
                                    std::string url;
                                    if (!l.get_string(n, p, url)) return false;
                                    Backend parsed;
                                    if (url.empty() || l.report(check_webhook_url(url, parsed), p, n)) rs.webhook_url = url;
                                    return true;
                                  }),
      }};
  return t;
}

const Enum<CanarySticky>& sticky_enum() {
  static const Enum<CanarySticky> e{
      "value", {{"none", CanarySticky::none}, {"key", CanarySticky::key}, {"user", CanarySticky::user}}};
  return e;
}

const Table<CanaryConfig>& canary_table() {
  static const Table<CanaryConfig> t{
      "models[].canary",
      {
          custom<CanaryConfig>("alias", "string", "— (required)",
                               "The route whose backends serve the canary share: a configured alias, not the route "
                               "itself. That route stays a plain route that clients may call directly (versioned "
                               "aliases such as `chat-v1` / `chat-v2`).",
                               [](Loader& l, const YAML::Node& v, const std::string& p, CanaryConfig& cc) {
                                 l.route_origins_.back().canary = {p, l.line_of(v)};
                                 if (l.get_string(v, p, cc.alias) && cc.alias.empty()) l.fail(p, v, "must not be empty");
                                 return true;
                               })
              .needed(" (the route serving the canary share)"),
          number("weight", &CanaryConfig::weight, 0, 100,
                 "Percent of the route's requests sent to the canary (with `sticky`: of its keys or users).")
              .needed(" (percent of requests, 0 to 100)"),
          choice("sticky", &CanaryConfig::sticky, sticky_enum(),
                 "What keeps a client on one side: nothing (each request is drawn), its API key, or the request's "
                 "`user` (OpenAI `user`, Anthropic `metadata.user_id`; requests without one are drawn). A hash of "
                 "the canary alias and the id decides, so a client stays on the same side on every instance."),
          duration("window", &CanaryConfig::window, Millis{1},
                   "Automatic rollback compares the canary with the stable backends over this window..."),
          integer("min_requests", &CanaryConfig::min_requests, 1, 1'000'000'000,
                  "...once each side has this many requests."),
          custom<CanaryConfig>("max_error_rate_increase", "number", "0.1",
                               "`-1` (off) or 0–1: roll back when the canary's error rate exceeds the stable one by "
                               "more than this.",
                               [](Loader& l, const YAML::Node& v, const std::string& p, CanaryConfig& cc) {
                                 double d = 0;
                                 if (!l.get_double(v, p, -1, 1, d)) return false;
                                 if (d < 0 && d != -1) {
                                   l.fail(p, v, "out of range: must be -1 (off) or between 0 and 1, got " + fmt_num(d));
                                   return false;
                                 }
                                 cc.max_error_rate_increase = d;
                                 return true;
                               }),
          number("max_ttft_ratio", &CanaryConfig::max_ttft_ratio, 0, 1e6,
                 "Roll back when the canary's P95 time to first token exceeds the stable one × this; 0 = off."),
      }};
  return t;
}

}  // namespace

void read_routing(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  routing_table().read(l, n, "routing", c.routing);
}

// Keys not given keep what `b` holds.
void read_breaker(Loader& l, const YAML::Node& n, const std::string& path, BreakerConfig& b) {
  if (n.IsNull()) return;
  breaker_table().read(l, n, path, b);
}

void read_canary(Loader& l, const YAML::Node& n, const std::string& path, CanaryConfig& cc) {
  canary_table().read(l, n, path, cc);
}

std::string describe_routing(const Config& c) {
  std::string out;
  {
    const auto& rs = c.routing;
    const auto& h = rs.health;
    out += "routing:    ";
    if (h.interval.count() == 0) {
      out += "probes off";
    } else {
      out += "probes every " + fmt_duration(h.interval) + " (timeout " + fmt_duration(h.timeout) + ", unhealthy after " +
             std::to_string(h.unhealthy_after) + ", healthy after " + std::to_string(h.healthy_after) + ")";
    }
    if (h.eject_after == 0) out += ", no ejection";
    else out += ", eject after " + std::to_string(h.eject_after) + " failures for " + fmt_duration(h.eject_for);
    auto breaker = [](std::string_view label, const BreakerConfig& b) {
      std::string s(label);
      if (!b.enabled) return s + " off";
      return s + " error_rate " + fmt_num(b.error_rate) + " min_requests " + std::to_string(b.min_requests) +
             " p95_ttft " + (b.p95_ttft.count() ? fmt_duration(b.p95_ttft) : std::string("off")) + " window " +
             fmt_duration(b.window) + " open_for " + fmt_duration(b.open_for);
    };
    out += ", " + breaker("breaker", rs.breaker) + ", " + breaker("provider breaker", rs.provider_breaker);
    if (!rs.webhook_url.empty()) {
      Backend parsed;
      check_webhook_url(rs.webhook_url, parsed);  // valid: checked at load
      out += ", webhook " + host_for_display(parsed.host);
    }
    out += "\n";
  }
  return out;
}

void routing_reference(std::vector<TableDoc>& out) {
  out.push_back(routing_table().doc());
  out.push_back(health_table().doc());
  out.push_back(breaker_table().doc());
  out.push_back(canary_table().doc());
}

}  // namespace sluice::config::detail

namespace sluice::config {

std::string_view to_string(CanarySticky s) noexcept {
  switch (s) {
    case CanarySticky::none: return "none";
    case CanarySticky::key: return "key";
    case CanarySticky::user: return "user";
  }
  return "?";
}

std::string_view to_string(Balance b) noexcept {
  switch (b) {
    case Balance::round_robin: return "round_robin";
    case Balance::weighted: return "weighted";
    case Balance::least_connections: return "least_connections";
    case Balance::latency: return "latency";
  }
  return "?";
}

}  // namespace sluice::config
