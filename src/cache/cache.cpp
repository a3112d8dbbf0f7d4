// The configured cache and its workers' views: memory only, or Redis with this process's
// memory in front (docs/cache.md).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <algorithm>
#include <charconv>
#include <mutex>

#include "cache/memory.hpp"
#include "common/redis_url.hpp"
#include "config/config.hpp"
#include "llm/chat.hpp"
#include "llm/fold.hpp"
#include "store/redis.hpp"
#include "telemetry/metrics.hpp"

namespace sluice::cache {

namespace net = boost::asio;
using std::chrono::milliseconds;

struct Cache::Shared {
  explicit Shared(const config::Config& c)
      : settings(c.cache), memory(c.cache.max_bytes), prefix(c.redis.key_prefix),
        semantic(c.cache.semantic_max_entries, c.cache.semantic_max_partitions, c.cache.semantic_max_bytes) {
    for (const auto& r : c.routes) {
      if (r.cache && r.cache->semantic) semantic_on = true;
    }
  }
  config::CacheSettings settings;
  Memory memory;
  std::string prefix;
  SemanticIndex semantic;
  bool semantic_on = false;                // a route has a semantic stage
  std::atomic<bool> semantic_poller{false};  // a worker reads the fleet's entries (store redis)
  bool redis = false;
  store::RedisEndpoint endpoint;
  store::RedisOptions options;
  std::mutex mu;
  std::vector<std::weak_ptr<store::RedisConnection>> conns;  // the workers' (status only)
};

namespace {

// One Redis value: "c1:<prompt tokens>:<completion tokens>:<stored ms>:" then the
// chat.completion. (Another form reads as a miss.)
constexpr std::string_view kForm = "c1:";
constexpr std::size_t kHeadBytes = 80;  // what GETRANGE reads of a value to list it

std::string encode(const Entry& e) {
  std::string v(kForm);
  v += std::to_string(e.prompt_tokens) + ":" + std::to_string(e.completion_tokens) + ":" + std::to_string(e.stored_ms) + ":";
  v += e.completion;
  return v;
}

// The header's numbers; `rest` is what follows it.
bool decode_head(std::string_view v, std::int64_t (&n)[3], std::string_view& rest) {
  if (!v.starts_with(kForm)) return false;
  const char* p = v.data() + kForm.size();
  const char* end = v.data() + v.size();
  for (auto& x : n) {
    auto r = std::from_chars(p, end, x);
    if (r.ec != std::errc() || r.ptr == end || *r.ptr != ':') return false;
    p = r.ptr + 1;
  }
  rest = std::string_view(p, static_cast<std::size_t>(end - p));
  return true;
}

std::optional<Entry> decode(std::string_view v) {
  std::int64_t n[3];
  std::string_view rest;
  if (!decode_head(v, n, rest) || rest.empty()) return std::nullopt;
  return Entry{.completion = std::string(rest),
               .prompt_tokens = std::max<std::int64_t>(n[0], 0),
               .completion_tokens = std::max<std::int64_t>(n[1], 0),
               .stored_ms = n[2]};
}

// A glob pattern (SCAN MATCH) matching `s` literally.
std::string glob_literal(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// An operator's drop, in the semantic index too.
void forget(Cache::Shared& sh, const std::string& route, const std::string& hash) {
  if (hash.empty()) sh.semantic.drop(route);
  else sh.semantic.forget(route, "", hash);
}

class MemoryWorker final : public WorkerCache {
 public:
  explicit MemoryWorker(std::shared_ptr<Cache::Shared> sh) : sh_(std::move(sh)) {}
  net::awaitable<std::optional<Entry>> get(Key key) override { co_return sh_->memory.get(key.hash); }
  void put(Key key, Entry e, milliseconds ttl) override { sh_->memory.put(key, std::move(e), ttl); }
  net::awaitable<std::vector<Listed>> list(std::string route, std::size_t limit) override {
    co_return sh_->memory.list(route, limit);
  }
  net::awaitable<std::optional<std::uint64_t>> drop(std::string route, std::string hash) override {
    forget(*sh_, route, hash);
    co_return sh_->memory.drop(route, hash);
  }
  SemanticIndex& semantic() override { return sh_->semantic; }
  void remember(Remembered r) override { sh_->semantic.add_later(std::move(r)); }

 private:
  std::shared_ptr<Cache::Shared> sh_;
};

// Redis holds the fleet's entries; this process's memory keeps what it read or stored for
// local_ttl at most (then asks Redis again). While Redis is down, lookups that memory
// cannot answer miss, and answers are kept in memory only.
class RedisWorker final : public WorkerCache {
 public:
  RedisWorker(net::any_io_executor ex, std::shared_ptr<Cache::Shared> sh)
      : ex_(std::move(ex)), sh_(std::move(sh)),
        conn_(std::make_shared<store::RedisConnection>(ex_, sh_->endpoint, sh_->options)) {
    conn_->start();
    {
      std::lock_guard lock(sh_->mu);
      sh_->conns.push_back(conn_);
    }
    if (sh_->semantic_on && !sh_->semantic_poller.exchange(true)) {
      net::co_spawn(ex_, read_fleet(ex_, sh_, conn_, alive_), net::detached);
    }
  }
  ~RedisWorker() override {
    *alive_ = false;
    conn_->stop();
  }

  SemanticIndex& semantic() override { return sh_->semantic; }

  void remember(Remembered r) override {
    std::vector<std::string> fields = encode_fields(r);
    sh_->semantic.add_later(std::move(r));
    if (!conn_->up()) return;
    // The fleet's recent entries: what a new instance learns at start.
    const std::size_t keep = std::min<std::size_t>(sh_->settings.semantic_max_entries * sh_->settings.semantic_max_partitions, 200'000);
    std::vector<std::string> argv{"XADD", stream_key(*sh_), "MAXLEN", "~", std::to_string(keep), "*"};
    for (auto& f : fields) argv.push_back(std::move(f));
    net::co_spawn(ex_, [conn = conn_, argv = std::move(argv)]() mutable -> net::awaitable<void> { co_await conn->command(std::move(argv)); },
                  net::detached);
  }

  net::awaitable<std::optional<Entry>> get(Key key) override {
    if (sh_->settings.local_ttl.count() > 0) {
      if (auto e = sh_->memory.get(key.hash)) co_return e;
    }
    if (!conn_->up()) co_return std::nullopt;
    std::string k = redis_key(key);
    auto r = co_await conn_->command("GET", k);
    if (!r.ok() || r.reply->type != store::RedisReply::Type::string) co_return std::nullopt;
    auto e = decode(r.reply->str);
    // What Redis holds is checked like any outside bytes: a value that is not a whole
    // answer (written by something else) is a miss, and is deleted.
    if (!e || !llm::keepable(e->completion)) {
      net::co_spawn(ex_, [conn = conn_, k = std::move(k)]() -> net::awaitable<void> { co_await conn->command("DEL", k); },
                    net::detached);
      co_return std::nullopt;
    }
    sh_->memory.put(key, *e, sh_->settings.local_ttl);
    co_return e;
  }

  void put(Key key, Entry e, milliseconds ttl) override {
    std::string value = encode(e);
    std::string k = redis_key(key);
    // This instance's copy answers for local_ttl at most, Redis up or not (so that a drop
    // made elsewhere reaches it in that time).
    sh_->memory.put(key, std::move(e), std::min(ttl, sh_->settings.local_ttl));
    if (!conn_->up()) return;
    net::co_spawn(
        ex_,
        [conn = conn_, k = std::move(k), value = std::move(value), ms = std::to_string(ttl.count())]() -> net::awaitable<void> {
          co_await conn->command("SET", k, value, "PX", ms);
        },
        net::detached);
  }

  net::awaitable<std::vector<Listed>> list(std::string route, std::size_t limit) override {
    if (!conn_->up()) co_return sh_->memory.list(route, limit);
    std::vector<Listed> out;
    std::vector<std::string> keys = co_await scan(pattern(route, ""), limit);
    for (auto& k : keys) {
      auto head = co_await conn_->command("GETRANGE", k, "0", std::to_string(kHeadBytes - 1));
      auto ttl = co_await conn_->command("PTTL", k);
      auto len = co_await conn_->command("STRLEN", k);
      std::int64_t n[3];
      std::string_view rest;
      if (!head.ok() || head.reply->type != store::RedisReply::Type::string || !decode_head(head.reply->str, n, rest)) {
        continue;  // gone meanwhile, or not an entry
      }
      Listed l;
      const std::string_view name(k);
      const std::size_t prefix = cache_prefix().size();
      l.key.route = std::string(name.substr(prefix, name.size() - prefix - 65));
      l.key.hash = std::string(name.substr(name.size() - 64));
      l.tokens = llm::saturating_add(std::max<std::int64_t>(n[0], 0), std::max<std::int64_t>(n[1], 0));
      l.stored_ms = n[2];
      if (ttl.ok() && ttl.reply->type == store::RedisReply::Type::integer) l.ttl_ms = ttl.reply->integer;
      if (len.ok() && len.reply->type == store::RedisReply::Type::integer) {
        l.bytes = static_cast<std::size_t>(std::max<std::int64_t>(len.reply->integer - static_cast<std::int64_t>(head.reply->str.size() - rest.size()), 0));
      }
      out.push_back(std::move(l));
    }
    co_return out;
  }

  net::awaitable<std::optional<std::uint64_t>> drop(std::string route, std::string hash) override {
    forget(*sh_, route, hash);
    const std::uint64_t here = sh_->memory.drop(route, hash);
    if (!conn_->up()) co_return std::nullopt;
    if (route.empty() && hash.empty()) co_await conn_->command("DEL", stream_key(*sh_));  // (new instances learn none)
    std::uint64_t n = 0;
    std::vector<std::string> keys;
    if (!route.empty() && !hash.empty()) keys.push_back(redis_key(Key{route, hash}));
    else keys = co_await scan(pattern(route, hash), SIZE_MAX);
    if (!scan_ok_) co_return std::nullopt;
    for (std::size_t i = 0; i < keys.size(); i += 256) {
      std::vector<std::string> argv{"DEL"};
      for (std::size_t j = i; j < std::min(keys.size(), i + 256); ++j) argv.push_back(keys[j]);
      auto r = co_await conn_->command(std::move(argv));
      if (!r.ok() || r.reply->is_error()) co_return std::nullopt;
      if (r.reply->type == store::RedisReply::Type::integer) n += static_cast<std::uint64_t>(r.reply->integer);
    }
    co_return std::max(n, here);
  }

 private:
  std::string cache_prefix() const { return sh_->prefix + ":cache:"; }
  std::string redis_key(const Key& k) const { return cache_prefix() + k.route + ":" + k.hash; }
  // Entries of `route` (any when empty) with `hash` (any when empty).
  std::string pattern(std::string_view route, std::string_view hash) const {
    std::string p = glob_literal(cache_prefix());
    p += route.empty() ? std::string("*") : glob_literal(route);
    p += ':';
    p += hash.empty() ? std::string(64, '?') : glob_literal(hash);
    return p;
  }

  // SCAN until the cursor comes back or `limit` keys were found (at most 100,000 calls).
  net::awaitable<std::vector<std::string>> scan(std::string pattern, std::size_t limit) {
    std::vector<std::string> keys;
    std::string cursor = "0";
    scan_ok_ = true;
    for (int calls = 0; calls < 100'000; ++calls) {
      auto r = co_await conn_->command("SCAN", cursor, "MATCH", pattern, "COUNT", "1000");
      if (!r.ok() || r.reply->type != store::RedisReply::Type::array || r.reply->elements.size() != 2) {
        scan_ok_ = false;
        break;
      }
      cursor = r.reply->elements[0].str;
      for (auto& k : r.reply->elements[1].elements) {
        if (keys.size() < limit) keys.push_back(std::move(k.str));
      }
      if (cursor == "0" || keys.size() >= limit) break;
    }
    co_return keys;
  }

  static std::string stream_key(const Cache::Shared& sh) { return sh.prefix + ":cache:semantic"; }

  // The semantic entries the fleet's instances keep, read into this process's index from
  // the stream (from its start: a new instance learns what the fleet has), every 250 ms.
  static net::awaitable<void> read_fleet(net::any_io_executor ex, std::shared_ptr<Cache::Shared> sh,
                                         std::shared_ptr<store::RedisConnection> conn, std::shared_ptr<bool> alive) {
    std::string last = "0";
    net::steady_timer timer(ex);
    const std::string key = stream_key(*sh);
    while (*alive) {
      bool more = false;
      if (conn->up()) {
        // (Few at a time: an entry may hold a vector of 16,384 floats, and a command must
        // come back within the connection's timeout.)
        auto r = co_await conn->command("XREAD", "COUNT", "32", "STREAMS", key, last);
        // [[key, [[id, [f, v, ...]], ...]]] or nil
        if (r.ok() && r.reply->type == store::RedisReply::Type::array && r.reply->elements.size() == 1 &&
            r.reply->elements[0].elements.size() == 2) {
          const auto& items = r.reply->elements[0].elements[1].elements;
          for (const auto& item : items) {
            if (item.elements.size() != 2) continue;
            last = item.elements[0].str;
            std::vector<std::string> fv;
            for (const auto& e : item.elements[1].elements) fv.push_back(e.str);
            if (auto rem = decode_fields(fv)) sh->semantic.add_later(std::move(*rem));
          }
          more = items.size() == 32;
        }
      }
      // (Read on while there is more, unless the index's thread is behind.)
      if (more && sh->semantic.queued() < SemanticIndex::kMaxQueued / 2) continue;
      timer.expires_after(milliseconds(250));
      boost::system::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    }
  }

  net::any_io_executor ex_;
  std::shared_ptr<Cache::Shared> sh_;
  std::shared_ptr<store::RedisConnection> conn_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool scan_ok_ = true;
};

}  // namespace

bool valid_hash(std::string_view h) {
  return h.size() == 64 && h.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Cache::Cache(const config::Config& cfg)
    : shared_(std::make_shared<Shared>(cfg)), flights_(std::make_unique<Flights>(cfg.max_upstream_response_bytes)) {
  if (cfg.cache.store != config::CacheStore::redis) return;
  auto ep = store::parse_redis_url(cfg.redis.url);
  if (!ep) return;  // (checked at load)
  shared_->redis = true;
  shared_->endpoint = *ep;
  shared_->options.command_timeout = cfg.redis.timeout;
  shared_->options.connect_timeout = cfg.redis.connect_timeout;
  shared_->options.reconnect_interval = cfg.redis.retry_interval;
}

Cache::~Cache() = default;

std::unique_ptr<WorkerCache> Cache::for_worker(net::any_io_executor ex) {
  if (shared_->redis) return std::make_unique<RedisWorker>(std::move(ex), shared_);
  return std::make_unique<MemoryWorker>(shared_);
}

std::string Cache::status_json() const {
  auto n = [](const std::atomic<std::uint64_t>& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
  std::string o = R"({"store":")";
  o += shared_->redis ? "redis" : "memory";
  o += R"(","entries_here":)" + std::to_string(shared_->memory.size());
  o += R"(,"bytes_here":)" + std::to_string(shared_->memory.bytes());
  o += R"(,"hits":)" + n(counters_.hits) + R"(,"misses":)" + n(counters_.misses) + R"(,"stores":)" + n(counters_.stores) +
       R"(,"bypassed":)" + n(counters_.bypassed) + R"(,"tokens_saved":)" + n(counters_.tokens_saved) +
       R"(,"coalesced":)" + n(counters_.coalesced) + R"(,"coalesced_tokens":)" + n(counters_.coalesced_tokens) +
       R"(,"in_flight":)" + std::to_string(flights_->size()) +
       R"(,"bytes_served":)" + n(counters_.bytes_served);
  if (shared_->semantic_on) {
    o += R"(,"semantic":{"entries_here":)" + std::to_string(shared_->semantic.entries()) +
         R"(,"partitions_here":)" + std::to_string(shared_->semantic.partitions()) +
         R"(,"bytes_here":)" + std::to_string(shared_->semantic.bytes()) +
         R"(,"dropped":)" + std::to_string(shared_->semantic.dropped()) +
         R"(,"simhash_hits":)" + n(counters_.simhash_hits) + R"(,"embedding_hits":)" + n(counters_.embedding_hits) +
         R"(,"embeddings":)" + n(counters_.embeddings) + R"(,"embedding_errors":)" + n(counters_.embedding_errors) +
         R"(,"stale_matches":)" + n(counters_.stale_matches) + "}";
  }
  if (shared_->redis) {
    int up = 0, all = 0;
    std::lock_guard lock(shared_->mu);
    for (const auto& w : shared_->conns) {
      if (auto c = w.lock()) {
        ++all;
        up += c->up() ? 1 : 0;
      }
    }
    o += R"(,"redis_up":)";
    o += all > 0 && up == all ? "true" : "false";
  }
  o += '}';
  return o;
}

void Cache::render_metrics(std::string& out) const {
  auto counter = [&out](std::string_view name, std::string_view help, const std::atomic<std::uint64_t>& v) {
    telemetry::metric_help(out, name, "counter", help);
    telemetry::metric_line(out, name, "", static_cast<double>(v.load(std::memory_order_relaxed)));
  };
  counter("sluice_cache_hits_total", "Requests answered from the response cache.", counters_.hits);
  counter("sluice_cache_misses_total", "Cacheable requests the cache did not have.", counters_.misses);
  counter("sluice_cache_stores_total", "Answers kept in the response cache.", counters_.stores);
  counter("sluice_cache_bypassed_total", "Requests on a caching route that skipped the cache (not deterministic, "
                                         "Cache-Control, streamed natively).", counters_.bypassed);
  counter("sluice_cache_tokens_saved_total", "Tokens (prompt and completion) the hits did not generate again.",
          counters_.tokens_saved);
  counter("sluice_cache_bytes_served_total", "Bytes of kept answers served from the cache.", counters_.bytes_served);
  counter("sluice_coalesced_total", "Requests that shared a generation in flight instead of their own.",
          counters_.coalesced);
  counter("sluice_coalesced_tokens_total", "Tokens (prompt and completion) the shared generations did not generate again.",
          counters_.coalesced_tokens);
  if (shared_->semantic_on) {
    auto v = [](const std::atomic<std::uint64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); };
    telemetry::metric_help(out, "sluice_cache_semantic_hits_total", "counter",
                           "Hits of the semantic stage (also in sluice_cache_hits_total), by the stage that matched.");
    telemetry::metric_line(out, "sluice_cache_semantic_hits_total", "stage=\"simhash\"", v(counters_.simhash_hits));
    telemetry::metric_line(out, "sluice_cache_semantic_hits_total", "stage=\"embedding\"", v(counters_.embedding_hits));
    counter("sluice_cache_embeddings_total", "Prompts the semantic stage had embedded.", counters_.embeddings);
    counter("sluice_cache_embedding_errors_total", "Embedding calls that gave no vector (the request went on as a miss).",
            counters_.embedding_errors);
    counter("sluice_cache_stale_matches_total", "Semantic matches whose answer had left the cache (forgotten).",
            counters_.stale_matches);
    telemetry::metric_help(out, "sluice_cache_semantic_entries", "gauge", "Prompts in this instance's semantic index.");
    telemetry::metric_line(out, "sluice_cache_semantic_entries", "", static_cast<double>(shared_->semantic.entries()));
  }
  telemetry::metric_help(out, "sluice_cache_entries", "gauge", "Entries held in this instance's memory layer.");
  telemetry::metric_line(out, "sluice_cache_entries", "", static_cast<double>(shared_->memory.size()));
  telemetry::metric_help(out, "sluice_cache_bytes", "gauge", "Bytes held in this instance's memory layer.");
  telemetry::metric_line(out, "sluice_cache_bytes", "", static_cast<double>(shared_->memory.bytes()));
}

}  // namespace sluice::cache
