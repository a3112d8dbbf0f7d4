// The configured store and its workers' views: memory only, or Redis with memory as the
// fallback (docs/api.md, "Stored responses").
#include "conversations/store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <charconv>
#include <mutex>
#include <vector>

#include "common/redis_url.hpp"
#include "config/config.hpp"
#include "store/redis.hpp"

namespace sluice::conversations {

namespace net = boost::asio;

namespace {

// One Redis value: "i:<len of response>:<input_from>:<input_count>:", the response, then
// the items. (A value without the "i:" of the conversation as items is an earlier form:
// not found.)
constexpr std::string_view kForm = "i:";

std::string encode(const StoredResponse& r) {
  std::string v(kForm);
  v += std::to_string(r.response.size()) + ":" + std::to_string(r.input_from) + ":" + std::to_string(r.input_count) + ":";
  v += r.response;
  v += r.items;
  return v;
}

std::optional<StoredResponse> decode(std::string_view v) {
  if (!v.starts_with(kForm)) return std::nullopt;
  const char* p = v.data() + kForm.size();
  const char* end = v.data() + v.size();
  std::size_t n[3] = {};
  for (auto& x : n) {
    auto r = std::from_chars(p, end, x);
    if (r.ec != std::errc() || r.ptr == end || *r.ptr != ':') return std::nullopt;
    p = r.ptr + 1;
  }
  const std::string_view rest(p, static_cast<std::size_t>(end - p));
  if (n[0] > rest.size()) return std::nullopt;
  return StoredResponse{.response = std::string(rest.substr(0, n[0])),
                        .items = std::string(rest.substr(n[0])),
                        .input_from = n[1],
                        .input_count = n[2]};
}

std::string redis_key(std::string_view tenant, std::string_view id) {
  std::string k = "sluice:resp:{";
  k += tenant;
  k += "}:";
  k += id;
  return k;
}

class MemoryWorker final : public WorkerStore {
 public:
  explicit MemoryWorker(MemoryStore& m) : m_(m) {}
  net::awaitable<std::optional<StoredResponse>> get(std::string tenant, std::string id) override {
    co_return m_.get(tenant, id);
  }
  void put(std::string tenant, std::string id, StoredResponse r) override { m_.put(tenant, id, std::move(r)); }
  net::awaitable<std::optional<bool>> erase(std::string tenant, std::string id) override {
    co_return m_.erase(tenant, id);
  }

 private:
  MemoryStore& m_;
};

}  // namespace

struct Store::RedisState {
  store::RedisEndpoint endpoint;
  store::RedisOptions options;
  std::chrono::milliseconds ttl{0};
  std::mutex mu;
  std::vector<std::weak_ptr<store::RedisConnection>> conns;  // the workers' (status only)
};

namespace {

// Redis first while it is up (every instance sees what any stored); this process's memory
// also keeps each response, and answers while Redis is down or does not have it (stored
// while Redis was down).
class RedisWorker final : public WorkerStore {
 public:
  RedisWorker(net::any_io_executor ex, std::shared_ptr<Store::RedisState> st, MemoryStore& m)
      : ex_(ex), st_(std::move(st)), m_(m), conn_(std::make_shared<store::RedisConnection>(ex, st_->endpoint, st_->options)) {
    conn_->start();
    std::lock_guard lock(st_->mu);
    st_->conns.push_back(conn_);
  }
  ~RedisWorker() override { conn_->stop(); }

  net::awaitable<std::optional<StoredResponse>> get(std::string tenant, std::string id) override {
    if (conn_->up()) {
      auto r = co_await conn_->command("GET", redis_key(tenant, id));
      if (r.ok() && r.reply->type == store::RedisReply::Type::string) {
        if (auto v = decode(r.reply->str)) co_return v;
      }
      if (r.ok()) {
        // Redis does not have it: gone (deleted on another instance, expired), unless it
        // was stored here while Redis was down.
        auto local = m_.get(tenant, id);
        if (local && local->local_only) co_return local;
        co_return std::nullopt;
      }
    }
    co_return m_.get(tenant, id);
  }

  void put(std::string tenant, std::string id, StoredResponse r) override {
    std::string value = encode(r);
    r.local_only = true;  // until Redis has it
    m_.put(tenant, id, std::move(r));
    if (!conn_->up()) return;
    net::co_spawn(
        ex_,
        [conn = conn_, mem = &m_, tenant = std::move(tenant), id = std::move(id), value = std::move(value),
         ms = std::to_string(st_->ttl.count())]() -> net::awaitable<void> {
          auto r = co_await conn->command("SET", redis_key(tenant, id), value, "PX", ms);
          if (r.ok() && !r.reply->is_error()) mem->confirm(tenant, id);
        },
        net::detached);
  }

  // Redis first: while it is down nothing is erased (another instance would still serve
  // it, and it would come back with Redis).
  net::awaitable<std::optional<bool>> erase(std::string tenant, std::string id) override {
    if (!conn_->up()) co_return std::nullopt;
    auto r = co_await conn_->command("DEL", redis_key(tenant, id));
    if (!r.ok() || r.reply->is_error()) co_return std::nullopt;
    const bool in_redis = r.reply->type == store::RedisReply::Type::integer && r.reply->integer > 0;
    co_return m_.erase(tenant, id) || in_redis;
  }

  bool up() const { return conn_->up(); }

 private:
  net::any_io_executor ex_;
  std::shared_ptr<Store::RedisState> st_;
  MemoryStore& m_;
  std::shared_ptr<store::RedisConnection> conn_;
};

}  // namespace

Store::Store(const config::Config& cfg, std::unique_ptr<Durable> durable)
    : memory_(cfg.responses.ttl, cfg.responses.max_bytes) {
  if (cfg.responses.store == config::ResponsesBackend::database && durable) {
    database_ = database_state(std::move(durable), cfg.responses.ttl);
    return;
  }
  if (cfg.responses.store != config::ResponsesBackend::redis) return;
  std::string err;
  auto ep = store::parse_redis_url(cfg.redis.url, &err);
  if (!ep) return;  // (checked at load)
  redis_ = std::make_shared<RedisState>();
  redis_->endpoint = *ep;
  redis_->options.command_timeout = cfg.redis.timeout;
  redis_->options.connect_timeout = cfg.redis.connect_timeout;
  redis_->options.reconnect_interval = cfg.redis.retry_interval;
  redis_->ttl = cfg.responses.ttl;
}

// The database's writes in flight end before the memory they confirm to goes.
Store::~Store() {
  if (database_) join_database(*database_);
}

std::unique_ptr<WorkerStore> Store::for_worker(net::any_io_executor ex) {
  if (database_) return database_worker(database_, memory_);
  if (redis_) return std::make_unique<RedisWorker>(std::move(ex), redis_, memory_);
  return std::make_unique<MemoryWorker>(memory_);
}

std::string Store::status_json() const {
  std::string o = R"({"backend":")";
  o += database_ ? "database" : redis_ ? "redis" : "memory";
  o += R"(","held_here":)";
  o += std::to_string(memory_.size());
  if (redis_) {
    // Down: responses are kept and found on this instance only until it is back.
    int up = 0, all = 0;
    std::lock_guard lock(redis_->mu);
    for (const auto& w : redis_->conns) {
      if (auto c = w.lock()) {
        ++all;
        up += c->up() ? 1 : 0;
      }
    }
    o += R"(,"redis_up":)";
    o += all > 0 && up == all ? "true" : "false";
  }
  if (database_) {
    o += R"(,"database_up":)";
    o += database_up(*database_) ? "true" : "false";
  }
  o += '}';
  return o;
}

}  // namespace sluice::conversations
