// GET /admin/usage/reconcile: the request history next to the token ledger. For each
// configured token limit, each of its counters and one period: the tokens the history's
// rows were charged, and `used` and `reserved` as the limiter holds them (Redis, or this
// process's memory). See docs/limits.md, "Reconciliation".
#include "gateway/reconcile.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "common/text.hpp"
#include "gateway/router.hpp"
#include "gateway/state.hpp"
#include "history/history.hpp"
#include "limits/check.hpp"
#include "limits/limiter.hpp"

namespace sluice::gateway {

namespace net = boost::asio;

namespace {

// One period of a token limit: [start_ms, end_ms), aligned like admission's (the epoch;
// calendar months in UTC).
struct Span {
  std::int64_t index = 0, start_ms = 0, end_ms = 0;
  auto operator<=>(const Span&) const = default;
};

Span period_span(config::QuotaPeriod per, std::int64_t at_ms, bool previous) {
  limits::Check c;
  c.kind = limits::Kind::quota;
  c.window_ms = limits::Limiter::quota_window_ms(per);
  const auto start_of = [&](std::int64_t index) {
    return c.window_ms ? index * c.window_ms : limits::month_start_ms(index);
  };
  auto p = limits::period_of(c, at_ms);
  if (previous) p = limits::period_of(c, start_of(p.index) - 1);
  return {p.index, start_of(p.index), p.ends_ms};
}

// What one counter aggregates: the fields its scope names (the others stay empty).
struct CounterId {
  std::size_t limit = 0;
  std::string tenant, key, tier, model;
  auto operator<=>(const CounterId&) const = default;
};

CounterId counter_of(const config::TokenLimit& l, std::size_t i, std::string_view key, std::string_view tenant,
                     std::string_view tier, std::string_view model) {
  CounterId id;
  id.limit = i;
  switch (l.scope) {
    case config::LimitScope::key: id.tenant = tenant; id.key = key; break;
    case config::LimitScope::tenant: id.tenant = tenant; break;
    case config::LimitScope::tenant_model: id.tenant = tenant; id.model = model; break;
    case config::LimitScope::tier: id.tier = tier; break;
    case config::LimitScope::model: id.model = model; break;
  }
  return id;
}

struct Counter {
  std::string ledger_key;  // the counter with its period suffix
  std::int64_t tokens = 0, requests = 0;
  limits::Ledger ledger;
};

std::string quoted(std::string_view v) {
  std::string out = "\"";
  append_clean_utf8(out, v.substr(0, 64));
  return out + (v.size() > 64 ? "...\"" : "\"");
}

void append_time(std::string& o, std::int64_t ms) {
  o += '"';
  append_iso8601(o, ms);
  o += '"';
}

void append_text_or_null(std::string& o, std::string_view s) {
  if (s.empty()) o += "null";
  else append_json_string(o, s);
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<ReconcileQuery> parse_reconcile_query(std::string_view query_string, std::int64_t now_ms,
                                                    std::string& error, std::string& param) {
  static constexpr std::string_view kAllowed[] = {"period", "at", "key", "tenant"};
  const auto params = history::parse_query_params(query_string, kAllowed, error);
  if (!params) return std::nullopt;
  ReconcileQuery q;
  q.at_ms = now_ms;
  for (const auto& p : *params) {
    if (p.name == "key") {
      q.key = p.value;
    } else if (p.name == "tenant") {
      q.tenant = p.value;
    } else if (p.name == "period") {
      if (p.value == "previous") {
        q.previous = true;
      } else if (p.value != "current") {
        error = "period: expected current or previous, got " + quoted(p.value);
        param = "period";
        return std::nullopt;
      }
    } else if (p.name == "at") {
      if (!history::parse_time_param(p, q.at_ms, error)) {
        param = "at";
        return std::nullopt;
      }
      if (q.at_ms < 0) {
        error = "at: must not be before 1970-01-01, got " + quoted(p.value);
        param = "at";
        return std::nullopt;
      }
    }
  }
  return q;
}

net::awaitable<ReconcileAnswer> reconcile_usage(Shared& g, const RoutingTable& table, std::string_view query_string) {
  ReconcileAnswer answer;
  const std::int64_t now = now_unix_ms();
  std::string error, param;
  const auto q = parse_reconcile_query(query_string, now, error, param);
  if (!q) co_return ReconcileAnswer{Reason::invalid_request, std::move(error), std::move(param)};
  // The keys in force (a reload may have changed them since start).
  const auto keyset = g.keys->current();
  const auto& entries = keyset->entries();
  // Filters name what exists: a typo is told, not answered with an empty report.
  if (!q->key.empty() && !keyset->find_name(q->key)) {
    co_return ReconcileAnswer{Reason::invalid_request, "key: no configured key is named " + quoted(q->key), "key"};
  }
  if (!q->tenant.empty() && std::none_of(entries.begin(), entries.end(), [&](const auto& e) {
        return e->key.tenant == q->tenant;
      })) {
    co_return ReconcileAnswer{Reason::invalid_request, "tenant: no configured key has tenant " + quoted(q->tenant),
                              "tenant"};
  }
  if (!g.history) {
    co_return ReconcileAnswer{Reason::not_found,
                              "the request history is off (history.backend: none): there is nothing to reconcile "
                              "the limiter's counters with",
                              {}};
  }
  limits::Limiter& limiter = *g.limiter;
  const auto rules = limiter.rules();  // (one set of limits throughout, a reload or not)
  const auto& limits = rules->limits().tokens;
  const bool redis = limiter.wants_redis();

  // Each limit's period; the history is read once per distinct period.
  std::vector<Span> spans;  // per limit
  std::vector<Span> distinct;
  for (const auto& l : limits) {
    spans.push_back(period_span(l.per, q->at_ms, q->previous));
    if (std::find(distinct.begin(), distinct.end(), spans.back()) == distinct.end()) distinct.push_back(spans.back());
  }
  std::vector<std::vector<history::Usage>> usage(distinct.size());
  history::Result hres;
  if (!distinct.empty()) {
    std::vector<history::UsageQuery> ranges;
    for (const auto& d : distinct) ranges.push_back({d.start_ms, d.end_ms});
    // On the query thread: the database read blocks. (A named lambda: GCC 12 mishandles
    // capturing lambda temporaries inside co_await expressions.)
    auto run = [&]() -> net::awaitable<history::Result> { co_return g.history->usage(ranges, usage); };
    hres = co_await net::co_spawn(g.query_executor, run, net::use_awaitable);
  }
  if (!hres.ok()) {
    co_return ReconcileAnswer{hres.unavailable ? Reason::history_unavailable : Reason::invalid_request,
                              std::move(hres.error), {}};
  }
  auto rows_of = [&](std::size_t i) -> const std::vector<history::Usage>& {
    return usage[static_cast<std::size_t>(std::find(distinct.begin(), distinct.end(), spans[i]) - distinct.begin())];
  };

  // The counters: those the configured keys (of the filters) can count against, and those
  // the history's rows (of the filters) were counted against, which a key since removed
  // from the configuration may have. Each counter's figures are all of its rows, whoever
  // sent them (a tenant's counter holds every key of the tenant).
  std::map<CounterId, Counter> counters;
  std::vector<std::string> aliases;
  for (const auto& [alias, rr] : table.routes) aliases.push_back(alias);
  std::sort(aliases.begin(), aliases.end());
  const auto selected = [&](std::string_view key, std::string_view tenant) {
    return (q->key.empty() || q->key == key) && (q->tenant.empty() || q->tenant == tenant);
  };
  for (const auto& e : entries) {
    const config::ApiKey& k = e->key;
    if (!selected(k.name, k.tenant)) continue;
    for (const auto& alias : aliases) {
      const bool allowed = std::any_of(k.models.begin(), k.models.end(),
                                       [&](const std::string& m) { return m == "*" || m == alias; });
      if (!allowed) continue;
      for (std::size_t i = 0; i < limits.size(); ++i) {
        if (limits::limit_applies(limits[i].when, k.name, k.tier, k.tenant, alias)) {
          counters.try_emplace(counter_of(limits[i], i, k.name, k.tenant, k.tier, alias));
        }
      }
    }
  }
  for (std::size_t i = 0; i < limits.size(); ++i) {
    for (const auto& u : rows_of(i)) {
      if (!limits::limit_applies(limits[i].when, u.key_name, u.tier, u.tenant, u.alias)) continue;
      const auto id = counter_of(limits[i], i, u.key_name, u.tenant, u.tier, u.alias);
      if (selected(u.key_name, u.tenant)) counters.try_emplace(id);
    }
  }
  for (std::size_t i = 0; i < limits.size(); ++i) {
    for (const auto& u : rows_of(i)) {
      if (!limits::limit_applies(limits[i].when, u.key_name, u.tier, u.tenant, u.alias)) continue;
      auto it = counters.find(counter_of(limits[i], i, u.key_name, u.tenant, u.tier, u.alias));
      if (it == counters.end()) continue;
      it->second.tokens += u.tokens;
      it->second.requests += u.requests;
    }
  }

  // The limiter's side, under the names admission counts with.
  std::vector<std::string> keys;
  for (auto& [id, c] : counters) {
    config::ApiKey k;
    k.name = id.key;
    k.tenant = id.tenant;
    k.tier = id.tier;
    c.ledger_key = limiter.quota_counter(*rules, id.limit, k, id.model) + ":" + std::to_string(spans[id.limit].index);
    keys.push_back(c.ledger_key);
  }
  std::string limiter_error;
  if (redis) {
    if (!keys.empty()) {
      auto read = co_await limiter.read_ledgers(std::move(keys));
      if (read.error.empty()) {
        std::size_t n = 0;
        for (auto& [id, c] : counters) c.ledger = read.ledgers[n++];
      } else {
        limiter_error = std::move(read.error);
      }
    }
  } else {
    for (auto& [id, c] : counters) {
      if (const auto l = limiter.local().quota(c.ledger_key)) c.ledger = {true, l->used, l->reserved};
    }
  }

  const auto hs = g.history->status();
  std::string& o = answer.body;
  o = "{\"instance\":";
  append_json_string(o, g.instance);
  o += ",\"generated_at\":";
  append_time(o, now);
  o += ",\"at\":";
  append_time(o, q->at_ms);
  o += ",\"period\":";
  o += q->previous ? "\"previous\"" : "\"current\"";
  o += ",\"filters\":{\"key\":";
  append_text_or_null(o, q->key);
  o += ",\"tenant\":";
  append_text_or_null(o, q->tenant);
  o += "},\"limiter\":{\"backend\":";
  o += !limiter.active() ? "\"none\"" : redis ? "\"redis\"" : "\"memory\"";
  o += ",\"counts\":";
  o += !limiter.active() ? "\"nothing: no limit is configured\""
       : redis           ? "\"shared by every instance\""
                         : "\"this instance only\"";
  o += ",\"error\":";
  append_text_or_null(o, limiter_error);
  o += "},\"history\":{\"backend\":";
  append_json_string(o, hs.backend);
  o += ",\"up\":";
  o += hs.up ? "true" : "false";
  o += ",\"queued\":" + std::to_string(hs.queued) + ",\"dropped\":" + std::to_string(hs.dropped);
  o += "},\"rows\":[";
  std::size_t disagree = 0, n = 0;
  for (const auto& [id, c] : counters) {
    const auto& l = limits[id.limit];
    const Span& s = spans[id.limit];
    o += n++ ? ",{\"limit\":" : "{\"limit\":";
    append_json_string(o, l.id);
    o += ",\"scope\":";
    append_json_string(o, config::to_string(l.scope));
    o += ",\"per\":";
    append_json_string(o, config::to_string(l.per));
    o += ",\"limit_tokens\":" + std::to_string(l.limit);
    o += ",\"counter\":{";
    bool first = true;
    const std::pair<std::string_view, const std::string*> fields[] = {
        {"key", &id.key}, {"tenant", &id.tenant}, {"tier", &id.tier}, {"model", &id.model}};
    for (const auto& [name, value] : fields) {
      const bool named = (name == "key" && l.scope == config::LimitScope::key) ||
                         (name == "tenant" && (l.scope == config::LimitScope::key || l.scope == config::LimitScope::tenant ||
                                               l.scope == config::LimitScope::tenant_model)) ||
                         (name == "tier" && l.scope == config::LimitScope::tier) ||
                         (name == "model" && (l.scope == config::LimitScope::model ||
                                              l.scope == config::LimitScope::tenant_model));
      if (!named) continue;
      if (!first) o += ',';
      first = false;
      append_json_string(o, name);
      o += ':';
      append_json_string(o, *value);
    }
    o += "},\"ledger_key\":";
    append_json_string(o, c.ledger_key);
    o += ",\"period\":{\"index\":" + std::to_string(s.index) + ",\"start\":";
    append_time(o, s.start_ms);
    o += ",\"end\":";
    append_time(o, s.end_ms);
    o += ",\"start_ms\":" + std::to_string(s.start_ms) + ",\"end_ms\":" + std::to_string(s.end_ms) + "}";
    o += ",\"history\":{\"tokens\":" + std::to_string(c.tokens) + ",\"requests\":" + std::to_string(c.requests) + "}";
    if (!limiter_error.empty()) {
      o += ",\"limiter\":null,\"difference\":null}";
      continue;
    }
    o += ",\"limiter\":{\"used\":" + std::to_string(c.ledger.used) + ",\"reserved\":" + std::to_string(c.ledger.reserved) +
         ",\"present\":" + (c.ledger.present ? "true" : "false") + ",\"source\":" + (redis ? "\"redis\"" : "\"memory\"") + "}";
    const std::int64_t diff = c.ledger.used - c.tokens;
    disagree += diff != 0;
    o += ",\"difference\":" + std::to_string(diff) + "}";
  }
  o += "],\"disagreements\":";
  o += limiter_error.empty() ? std::to_string(disagree) : std::string("null");

  // Why the two sides can differ, the situations of this answer first.
  std::vector<std::string> notes;
  if (limits.empty()) notes.push_back("no token limit is configured (rate_limits.tokens): there is nothing to reconcile");
  if (!limiter_error.empty()) {
    notes.push_back("the limiter's side could not be read (" + limiter_error +
                    "): limiter and difference are null; the history's side stands");
  }
  if (!redis && limiter.active()) {
    notes.push_back(
        "the limiter counts in this process's memory: its side is this instance's counters only (other instances, and "
        "this one before a restart, are not in them), while a history shared by several instances holds all of their "
        "rows");
  }
  if (hs.queued > 0) {
    notes.push_back(std::to_string(hs.queued) +
                    " requests are waiting to be written to the history (written every history.flush_interval): they "
                    "are not in history.tokens yet");
  }
  if (hs.dropped > 0) {
    notes.push_back(std::to_string(hs.dropped) +
                    " history rows were dropped since this instance started (queue full, or a batch the database "
                    "refused): the limiter charged them, the history does not have them");
  }
  if (!hs.up) notes.push_back("the history database is down: rows wait in its queue (history.queued)");
  notes.push_back(
      "limiter.used is charged when a request ends; a request still running holds limiter.reserved and has no "
      "history row yet");
  notes.push_back(
      "settlements reach Redis in batches (every 20 ms per worker, later while Redis is unreachable), token leases' "
      "usage with the next batch, and history rows every history.flush_interval: right after traffic either side "
      "may lag");
  notes.push_back(
      "a request counts in the period it was admitted in, by the limiter's clock (Redis's for the Redis backend), "
      "whenever it ends; its history row has its arrival time on the gateway's clock: one that arrived within "
      "milliseconds of a period boundary, or a gateway clock off Redis's, can fall on the other side of it");
  notes.push_back(
      "history.tokens sums the rows of requests that reserved tokens, by settlement's rule (prompt + completion "
      "tokens when the request answered 200 or relayed output, else 0); rows deleted by history.retention_days "
      "are not in it");
  notes.push_back(
      "a counter is kept until rate_limits.reservation_ttl after its period ends (limiter.present false: never "
      "counted, or expired); the limit's name, or unnamed its position in rate_limits.tokens, names it, so a "
      "reordered configuration starts new counters for unnamed limits");
  o += ",\"notes\":[";
  for (std::size_t i = 0; i < notes.size(); ++i) {
    if (i) o += ',';
    append_json_string(o, notes[i]);
  }
  o += "]}";
  co_return answer;
}

}  // namespace sluice::gateway
