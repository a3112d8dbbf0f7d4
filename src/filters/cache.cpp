// The response cache (docs/cache.md): on a route with `cache`, a request whose answer the
// cache holds is answered from it, without an upstream call, a concurrency slot or a
// token charged (the rate limits before it still count the request); a request it does
// not hold has its answer kept once it completed well. After the rate limits, before the
// concurrency gate. Which requests: deterministic ones (temperature 0 or a seed) unless
// the route takes any; not those a backend answers in the client's own API (native
// Responses), whose answer is not in the internal form. The client opts out per request
// with Cache-Control: no-cache (not served from the cache, its answer kept) or no-store
// (neither). Keys are per tenant unless the route shares them.
#include <chrono>

#include "cache/cache.hpp"
#include "common/text.hpp"
#include "config/config.hpp"
#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {

namespace {

struct State {
  bool lookup = false;  // ask the cache in the admit phase
  bool keep = false;    // keep the answer at the end
  cache::Key key;
};

// Cache-Control request directives (RFC 9111 5.2.1): no-cache, no-store.
struct Directives {
  bool no_cache = false, no_store = false;
};
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Directives directives(std::string_view v) {
  Directives d;
  while (!v.empty()) {
    const auto comma = v.find(',');
    std::string_view t = trim(v.substr(0, comma));
    v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    if (iequals(t, "no-cache")) d.no_cache = true;
    else if (iequals(t, "no-store")) d.no_store = true;
  }
  return d;
}

class CacheFilter final : public FilterWith<State> {
 public:
  CacheFilter(std::shared_ptr<cache::WorkerCache> c, cache::Counters& counters, const config::CacheSettings& settings)
      : cache_(std::move(c)), counters_(counters), settings_(settings) {}

  std::string_view name() const override { return "cache"; }
  unsigned phases() const override { return bit(Phase::request) | bit(Phase::admit) | bit(Phase::end); }

 protected:
  Next on(Phase p, Request& r, State& s, Stop&) override {
    if (p == Phase::admit) return s.lookup ? Next::wait : Next::go;
    const config::RouteCache* rc = r.route.config && r.route.config->cache ? &*r.route.config->cache : nullptr;
    if (!rc || !rc->enabled || r.kind != Kind::generate || r.chat.task != llm::Task::chat) return Next::go;
    const Directives d = directives(r.ex.request().header("cache-control"));
    if (r.route.native || d.no_store || (!rc->any_temperature && !cache::deterministic(r.chat))) {
      bypass(r);
      return Next::go;
    }
    s.key = cache::key_of(r.chat, r.route.config->alias, rc->shared ? std::string_view() : r.key.tenant);
    s.lookup = !d.no_cache;
    s.keep = true;
    if (r.keep_completion) *r.keep_completion = true;
    r.reply_headers.emplace_back("X-Sluice-Cache-Key", s.key.hash);
    if (!s.lookup) {
      r.rec.cache = "refresh";
      r.reply_headers.emplace_back("X-Sluice-Cache", "refresh");
    }
    return Next::go;
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    auto e = co_await cache_->get(s.key);
    if (!e) {
      r.rec.cache = "miss";
      r.reply_headers.emplace_back("X-Sluice-Cache", "miss");
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      co_return Next::go;
    }
    s.keep = false;
    r.rec.cache = "hit";
    r.rec.saved_tokens = e->prompt_tokens + e->completion_tokens;
    r.reply_headers.emplace_back("X-Sluice-Cache", "hit");
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    r.reply_headers.emplace_back("Age", std::to_string(std::max<std::int64_t>(now - e->stored_ms, 0) / 1000));
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.tokens_saved.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(r.rec.saved_tokens, 0)),
                                     std::memory_order_relaxed);
    counters_.bytes_served.fetch_add(e->completion.size(), std::memory_order_relaxed);
    stop.answer = LocalAnswer{std::move(e->completion), e->prompt_tokens, e->completion_tokens};
    co_return Next::stop;
  }

  void end(Request& r, State& s) override {
    if (!s.keep || !r.completion || r.completion->empty()) return;
    if (r.rec.status != 200 || r.rec.reason != Reason::ok || r.rec.client_cancelled) return;
    if (r.completion->size() > settings_.max_entry_bytes) return;
    const auto& rc = r.route.config->cache;
    const auto ttl = rc && rc->ttl.count() > 0 ? rc->ttl : settings_.ttl;
    cache::Entry e{.completion = *r.completion,
                   .prompt_tokens = std::max<std::int64_t>(r.rec.prompt_tokens, 0),
                   .completion_tokens = std::max<std::int64_t>(r.rec.completion_tokens, 0),
                   .stored_ms = r.rec.unix_ms};
    cache_->put(std::move(s.key), std::move(e), ttl);
    counters_.stores.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  void bypass(Request& r) {
    r.rec.cache = "bypass";
    r.reply_headers.emplace_back("X-Sluice-Cache", "bypass");
    counters_.bypassed.fetch_add(1, std::memory_order_relaxed);
  }

  std::shared_ptr<cache::WorkerCache> cache_;
  cache::Counters& counters_;
  const config::CacheSettings& settings_;
};

}  // namespace

std::unique_ptr<Filter> make_cache(const Deps& d) {
  if (!d.cache || !d.cache_counters) return nullptr;
  return std::make_unique<CacheFilter>(d.cache, *d.cache_counters, d.cfg.cache);
}

}  // namespace sluice::filters
