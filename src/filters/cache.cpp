// The response cache (docs/cache.md): on a route with `cache`, a request whose answer the
// cache holds is answered from it, without an upstream call, a concurrency slot or a
// token charged (the rate limits before it still count the request); a request it does
// not hold has its answer kept once it completed well. After the rate limits, before the
// concurrency gate. Which requests: deterministic ones (temperature 0 or a seed) unless
// the route takes any; not those a backend answers in the client's own API (native
// Responses), whose answer is not in the internal form. The client opts out per request
// with Cache-Control: no-cache (not served from the cache, its answer kept) or no-store
// (neither). Keys are per tenant unless the route shares them. With a semantic stage, an
// exact miss is looked for among the kept prompts by SimHash, then by embedding
// (cache/semantic.hpp), before the request generates; its prompt is remembered with its
// answer.
#include <chrono>
#include <cstdio>

#include "cache/cache.hpp"
#include "common/text.hpp"
#include "config/config.hpp"
#include "config/keys.hpp"
#include "filters/filter.hpp"
#include "filters/model_call.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"
#include "llm/fold.hpp"
#include "telemetry/record.hpp"

namespace sluice::filters {

namespace {

struct State {
  bool lookup = false;    // ask the cache in the admit phase
  bool keep = false;      // keep the answer once it is whole (answered)
  bool coalesce = false;  // share a generation in flight, or lead one
  cache::Key key;
  std::shared_ptr<cache::Flight> lead;  // the generation this request leads
  // The semantic stage: the prompt's text, partition, SimHash and embedding (when made).
  bool semantic = false;
  std::string text, partition;
  std::uint64_t simhash = 0, words = 0;
  std::vector<float> vector;
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
  CacheFilter(std::shared_ptr<cache::WorkerCache> c, cache::Counters& counters, cache::Flights& flights,
              const config::CacheSettings& settings, http::Client* client)
      : cache_(std::move(c)), counters_(counters), flights_(flights), settings_(settings), client_(client) {}

  std::string_view name() const override { return "cache"; }
  unsigned phases() const override {
    return bit(Phase::request) | bit(Phase::admit) | bit(Phase::answered) | bit(Phase::end);
  }

 protected:
  Next on(Phase p, Request& r, State& s, Stop&) override {
    if (p == Phase::admit) return s.lookup || s.coalesce ? Next::wait : Next::go;
    const config::RouteCache* rc = r.route.config && r.route.config->cache ? &*r.route.config->cache : nullptr;
    if (!rc || !(rc->enabled || rc->coalesce) || r.kind != Kind::generate || r.chat.task != llm::Task::chat) {
      return Next::go;
    }
    const Directives d = directives(r.ex.request().header_list("cache-control"));
    if (r.route.native || d.no_store || (!rc->any_temperature && !cache::deterministic(r.chat))) {
      bypass(r);
      return Next::go;
    }
    s.key = cache::key_of(*r.route.config, r.chat, rc->shared ? std::string_view() : r.key.tenant);
    // no-cache: a generation of its own (neither a kept answer nor one in flight).
    s.lookup = rc->enabled && !d.no_cache;
    s.keep = rc->enabled;
    s.coalesce = rc->coalesce && !d.no_cache && r.shares;
    if (r.keep_completion) *r.keep_completion = true;
    r.reply_headers.emplace_back("X-Sluice-Cache-Key", s.key.hash);
    if (rc->enabled && rc->semantic) {
      s.text = cache::semantic_text(r.chat, rc->semantic->tools);
      if (!s.text.empty() && s.text.size() <= rc->semantic->max_text_bytes) {
        s.semantic = true;
        // The partition also names the embedding route and its model: vectors of two models
        // are never compared.
        std::string scope = rc->shared ? std::string() : r.key.tenant;
        scope += '\n';
        scope += rc->semantic->embedding;
        if (const config::Route* er = r.route.table && !rc->semantic->embedding.empty()
                                          ? r.route.table->find_route(rc->semantic->embedding)
                                          : nullptr) {
          scope += '/';
          scope += er->primary().model;
        }
        s.partition = cache::partition_of(*r.route.config, r.chat, scope);
        s.simhash = cache::simhash(s.text);
        s.words = cache::words_hash(s.text);
      }
    }
    if (d.no_cache) outcome(r, "refresh");
    return Next::go;
  }

  boost::asio::awaitable<Next> wait(Phase, Request& r, State& s, Stop& stop) override {
    if (s.lookup) {
      if (auto e = co_await cache_->get(s.key)) {
        hit(r, s, *e, stop);
        co_return Next::stop;
      }
      if (s.semantic) {
        std::optional<cache::Match> m;
        if (auto e = co_await semantic_lookup(r, s, m)) {
          hit(r, s, *e, stop, &*m);
          co_return Next::stop;
        }
      }
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
    }
    if (s.coalesce) {
      bool leader = false;
      auto f = flights_.lead_or_follow(s.key.hash, leader);
      if (leader) {
        s.lead = f;
        *r.shares = f.get();
      } else if (co_await joined_output(r, *f)) {
        // Its answer is read from the generation in flight (the handler serves it).
        s.keep = false;
        outcome(r, "coalesced");
        counters_.coalesced.fetch_add(1, std::memory_order_relaxed);
        stop.answer = LocalAnswer{.completion = {}, .prompt_tokens = 0, .completion_tokens = 0, .flight = std::move(f)};
        co_return Next::stop;
      } else {
        f->leave();  // it ended without an answer (or the client left): nothing shared
        if (r.ex.client_gone()) {
          r.rec.client_cancelled = true;
          stop.reason = Reason::client_closed;
          stop.message = "client left while waiting for a shared generation";
          co_return Next::stop;
        }
      }
    }
    outcome(r, "miss");
    co_return Next::go;
  }

  // The answer is whole and good: the followers get it, and it is kept, before the client
  // has its last bytes (a client that asks again at once finds it).
  void answered(Request& r, State& s) override {
    land(r, s);
    if (!s.keep || !r.completion || r.completion->empty()) return;
    s.keep = false;
    if (r.rec.status != 200 || r.rec.reason != Reason::ok) return;
    // Only what the route's own backends answered (not a fallback's or a canary's), and
    // only a whole answer.
    if (!r.rec.served_by.empty() || r.completion->size() > settings_.max_entry_bytes) return;
    if (!llm::keepable(*r.completion)) return;
    const auto& rc = r.route.config->cache;
    const auto ttl = rc && rc->ttl.count() > 0 ? rc->ttl : settings_.ttl;
    cache::Entry e{.completion = *r.completion,
                   .prompt_tokens = std::max<std::int64_t>(r.rec.prompt_tokens, 0),
                   .completion_tokens = std::max<std::int64_t>(r.rec.completion_tokens, 0),
                   .stored_ms = r.rec.unix_ms};
    // The answer first, then its prompt in the index: a match must find its answer kept.
    std::string route = s.key.route, hash = s.key.hash;
    cache_->put(std::move(s.key), std::move(e), ttl);
    counters_.stores.fetch_add(1, std::memory_order_relaxed);
    if (s.semantic) {
      cache_->remember(cache::Remembered{.route = std::move(route),
                                         .partition = std::move(s.partition),
                                         .scope = rc->shared ? std::string() : r.key.tenant,
                                         .hash = std::move(hash),
                                         .simhash = s.simhash,
                                         .words = s.words,
                                         .vector = std::move(s.vector)});
    }
  }

  void end(Request& r, State& s) override {
    land(r, s);
    if (r.rec.cache == "coalesced" && r.rec.saved_tokens > 0) {
      counters_.coalesced_tokens.fetch_add(static_cast<std::uint64_t>(r.rec.saved_tokens), std::memory_order_relaxed);
    }
  }

 private:
  // The generation this request led ends: whatever this request got, the followers get:
  // the answer, or that there is none (before anything was sent, they generate their own).
  void land(Request& r, State& s) {
    if (!s.lead) return;
    if (!r.completion->empty() && llm::keepable(*r.completion)) {
      s.lead->finish(*r.completion, std::max<std::int64_t>(r.rec.prompt_tokens, 0),
                     std::max<std::int64_t>(r.rec.completion_tokens, 0));
    } else {
      s.lead->fail(r.rec.reason == Reason::ok ? Reason::upstream_error : r.rec.reason,
                   r.rec.error.empty() ? std::string("the shared generation failed") : r.rec.error);
    }
    flights_.land(s.key.hash, s.lead.get());
    s.lead.reset();
  }

  // The semantic stage: a kept prompt within the SimHash distance, else (with an embedding
  // route) one whose embedding is within the threshold; its answer if the cache still has
  // it (else it is forgotten). The prompt's embedding stays in the state, for its entry.
  boost::asio::awaitable<std::optional<cache::Entry>> semantic_lookup(Request& r, State& s, std::optional<cache::Match>& m) {
    const config::SemanticCache& sc = *r.route.config->cache->semantic;
    cache::SemanticIndex& index = cache_->semantic();
    m = index.by_simhash(s.key.route, s.partition, s.simhash, s.words, sc.simhash_distance, sc.threshold);
    if (m) {
      if (auto e = co_await kept(s, *m)) {
        counters_.simhash_hits.fetch_add(1, std::memory_order_relaxed);
        co_return e;
      }
    }
    const config::Route* er =
        sc.embedding.empty() || !client_ || !r.route.table ? nullptr : r.route.table->find_route(sc.embedding);
    if (!er) co_return std::nullopt;
    const config::Backend& b = er->primary();
    counters_.embeddings.fetch_add(1, std::memory_order_relaxed);
    std::string target = cache::embedding_target(b.provider, b.path_prefix);
    std::string body = cache::embedding_body(b.model, s.text);
    auto reply = co_await call_model(*client_, b, std::move(target), std::move(body), sc.timeout, 16 << 20);
    auto v = reply.ok() ? cache::read_embedding(reply.body) : std::nullopt;
    if (!v) {
      counters_.embedding_errors.fetch_add(1, std::memory_order_relaxed);
      co_return std::nullopt;
    }
    s.vector = std::move(*v);
    m = index.nearest(s.key.route, s.partition, s.vector, sc.threshold);
    if (!m) co_return std::nullopt;
    auto e = co_await kept(s, *m);
    if (e) counters_.embedding_hits.fetch_add(1, std::memory_order_relaxed);
    co_return e;
  }

  // A match's answer, or nullopt (then the match is forgotten: its answer expired).
  boost::asio::awaitable<std::optional<cache::Entry>> kept(State& s, const cache::Match& m) {
    cache::Key k{s.key.route, m.hash};
    auto e = co_await cache_->get(std::move(k));
    if (!e) {
      cache_->semantic().forget(s.key.route, s.partition, m.hash);
      counters_.stale_matches.fetch_add(1, std::memory_order_relaxed);
    }
    co_return e;
  }

  void hit(Request& r, State& s, cache::Entry& e, Stop& stop, const cache::Match* semantic = nullptr) {
    s.keep = false;
    if (semantic) {
      outcome(r, "semantic");
      char sim[16];
      std::snprintf(sim, sizeof sim, "%.4f", semantic->similarity);
      r.reply_headers.emplace_back("X-Sluice-Cache-Similarity", sim);
      r.reply_headers.emplace_back("X-Sluice-Cache-Match", semantic->hash);
    }
    outcome(r, "hit");
    e.prompt_tokens = std::max<std::int64_t>(e.prompt_tokens, 0);
    e.completion_tokens = std::max<std::int64_t>(e.completion_tokens, 0);
    r.rec.saved_tokens = llm::saturating_add(e.prompt_tokens, e.completion_tokens);
    r.rec.saved_prompt_tokens = e.prompt_tokens;
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    const std::int64_t age = e.stored_ms > 0 && e.stored_ms <= now ? (now - e.stored_ms) / 1000 : 0;
    r.reply_headers.emplace_back("Age", std::to_string(age));
    counters_.hits.fetch_add(1, std::memory_order_relaxed);
    counters_.tokens_saved.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(r.rec.saved_tokens, 0)),
                                     std::memory_order_relaxed);
    counters_.bytes_served.fetch_add(e.completion.size(), std::memory_order_relaxed);
    stop.answer = LocalAnswer{.completion = std::move(e.completion),
                              .prompt_tokens = e.prompt_tokens,
                              .completion_tokens = e.completion_tokens,
                              .flight = nullptr};
  }

  // Waits for the generation joined to produce something; false when it ended without
  // (then this request generates its own), or when the client left meanwhile.
  static boost::asio::awaitable<bool> joined_output(Request& r, cache::Flight& f) {
    bool gone = false;
    r.ex.watch_client([&gone] { gone = true; });
    struct Unwatch {
      http::Exchange& ex;
      ~Unwatch() { ex.unwatch_client(); }
    } unwatch{r.ex};
    for (;;) {
      auto got = co_await f.wait_output(std::chrono::milliseconds(250));
      if (got) co_return *got;
      if (gone) co_return false;
    }
  }

  // The request's outcome, once: its record and X-Sluice-Cache.
  static void outcome(Request& r, std::string_view what) {
    if (!r.rec.cache.empty()) return;
    r.rec.cache = what;
    r.reply_headers.emplace_back("X-Sluice-Cache", std::string(what));
  }

  void bypass(Request& r) {
    outcome(r, "bypass");
    counters_.bypassed.fetch_add(1, std::memory_order_relaxed);
  }

  std::shared_ptr<cache::WorkerCache> cache_;
  cache::Counters& counters_;
  cache::Flights& flights_;
  const config::CacheSettings& settings_;
  http::Client* client_;
};

}  // namespace

std::unique_ptr<Filter> make_cache(const Deps& d) {
  if (!d.cache || !d.cache_counters || !d.flights) return nullptr;
  return std::make_unique<CacheFilter>(d.cache, *d.cache_counters, *d.flights, d.cfg.cache, d.client);
}

}  // namespace sluice::filters
