// Stored responses in a database (responses.store: database): every instance sharing the
// database reads and continues them. The calls block, so they run on the store's own
// thread and the worker awaits them. As with Redis, this process's memory keeps each
// response too: it answers while the database is down, and for what was stored while it
// was (until the database confirms it).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>

#include "conversations/store.hpp"

namespace sluice::conversations {

namespace net = boost::asio;

struct Store::DatabaseState {
  DatabaseState(std::unique_ptr<Durable> d, std::chrono::milliseconds t) : durable(std::move(d)), ttl(t) {}
  ~DatabaseState() { thread.join(); }  // the calls in flight end first
  std::unique_ptr<Durable> durable;
  std::chrono::milliseconds ttl;
  net::thread_pool thread{1};  // the database's calls, one at a time
  // Calls waiting for the thread or on it. A slow database (each call bounded by its
  // statement timeout) would otherwise gather requests and stored answers without bound:
  // beyond kMaxQueued a call is not made, as if the database had failed (the memory
  // answers, and keeps what is stored).
  static constexpr int kMaxQueued = 64;
  std::atomic<int> queued{0};

  bool enter() {
    if (queued.fetch_add(1, std::memory_order_relaxed) < kMaxQueued) return true;
    leave();
    return false;
  }
  void leave() { queued.fetch_sub(1, std::memory_order_relaxed); }
  struct Leave {  // however the call ends
    DatabaseState* st;
    ~Leave() { st->leave(); }
  };
};

namespace {

class DatabaseWorker final : public WorkerStore {
 public:
  DatabaseWorker(std::shared_ptr<Store::DatabaseState> st, MemoryStore& m) : st_(std::move(st)), m_(m) {}

  net::awaitable<std::optional<StoredResponse>> get(std::string tenant, std::string id) override {
    // (The calls hold the state by pointer: it owns the thread they run on, and joins it
    // before it goes. Named lambdas, not a helper taking one: GCC 12 frees a coroutine's
    // lambda parameter twice.)
    if (!st_->enter()) co_return m_.get(tenant, id);
    auto call = [st = st_.get(), tenant, id]() -> net::awaitable<std::optional<std::optional<StoredResponse>>> {
      Store::DatabaseState::Leave leave{st};
      co_return st->durable->get(tenant, id);
    };
    auto found = co_await net::co_spawn(st_->thread.get_executor(), call, net::use_awaitable);
    if (found) {
      if (*found) co_return std::move(*found);
      // Not in the database: gone (deleted elsewhere, expired), unless it was stored
      // here while the database was down.
      auto local = m_.get(tenant, id);
      if (local && local->local_only) co_return local;
      co_return std::nullopt;
    }
    co_return m_.get(tenant, id);
  }

  void put(std::string tenant, std::string id, StoredResponse r) override {
    const bool to_database = st_->enter();
    StoredResponse copy = to_database ? r : StoredResponse{};
    r.local_only = true;  // until the database has it
    m_.put(tenant, id, std::move(r));
    if (!to_database) return;
    net::post(st_->thread, [st = st_.get(), mem = &m_, tenant = std::move(tenant), id = std::move(id),
                            copy = std::move(copy)] {
      Store::DatabaseState::Leave leave{st};
      if (st->durable->put(tenant, id, copy, st->ttl)) mem->confirm(tenant, id);
    });
  }

  // The database first: while it is down nothing is erased (another instance would still
  // serve it, and it would come back with the database).
  net::awaitable<std::optional<bool>> erase(std::string tenant, std::string id) override {
    if (!st_->enter()) co_return std::nullopt;
    auto call = [st = st_.get(), tenant, id]() -> net::awaitable<std::optional<bool>> {
      Store::DatabaseState::Leave leave{st};
      co_return st->durable->erase(tenant, id);
    };
    auto erased = co_await net::co_spawn(st_->thread.get_executor(), call, net::use_awaitable);
    if (!erased) co_return std::nullopt;
    co_return m_.erase(tenant, id) || *erased;
  }

 private:
  std::shared_ptr<Store::DatabaseState> st_;
  MemoryStore& m_;
};

}  // namespace

std::shared_ptr<Store::DatabaseState> database_state(std::unique_ptr<Durable> durable, std::chrono::milliseconds ttl) {
  return std::make_shared<Store::DatabaseState>(std::move(durable), ttl);
}

std::unique_ptr<WorkerStore> database_worker(std::shared_ptr<Store::DatabaseState> st, MemoryStore& memory) {
  return std::make_unique<DatabaseWorker>(std::move(st), memory);
}

bool database_up(const Store::DatabaseState& st) { return st.durable->up(); }

}  // namespace sluice::conversations

namespace sluice::conversations {
void join_database(Store::DatabaseState& st) { st.thread.join(); }
}  // namespace sluice::conversations
