// The database store's worker view: the database first, this process's memory behind it,
// and a bounded number of calls waiting for a slow database. The database here is a
// stand-in of the Durable interface that blocks until released (the real tables are
// tested in tests/unit/history and the integration suite).
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "config/config.hpp"
#include "conversations/store.hpp"

using namespace sluice;
using namespace sluice::conversations;
namespace net = boost::asio;

namespace {

class SlowDatabase final : public Durable {
 public:
  explicit SlowDatabase(std::atomic<int>& puts) : puts(puts) {}
  std::optional<std::optional<StoredResponse>> get(std::string_view, std::string_view) override {
    wait();
    return std::optional<StoredResponse>();
  }
  bool put(std::string_view, std::string_view, const StoredResponse&, std::chrono::milliseconds) override {
    ++puts;
    wait();
    return true;
  }
  std::optional<bool> erase(std::string_view, std::string_view) override { return true; }
  bool up() const override { return true; }

  void release() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  std::atomic<int>& puts;  // outlives the store, which owns this

 private:
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(DatabaseStore, ASlowDatabaseHoldsABoundedNumberOfCallsAndTheMemoryAnswers) {
  config::Config cfg;
  cfg.responses.store = config::ResponsesBackend::database;
  std::atomic<int> puts{0};
  auto db = std::make_unique<SlowDatabase>(puts);
  SlowDatabase& slow = *db;
  auto store = std::make_unique<Store>(cfg, std::move(db));
  net::io_context io;
  auto worker = store->for_worker(io.get_executor());
  // Far more writes than may wait: each is kept in memory; only the bound reach the database.
  for (int i = 0; i < 200; ++i) worker->put("acme", "resp_" + std::to_string(i), StoredResponse{"{}", "[]"});
  // A read while the database is full of calls does not wait for it: the memory answers.
  std::optional<StoredResponse> got;
  bool done = false;
  net::co_spawn(
      io,
      [&]() -> net::awaitable<void> {
        got = co_await worker->get("acme", "resp_199");
        done = true;
      },
      net::detached);
  io.run_for(std::chrono::seconds(2));
  EXPECT_TRUE(done);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->local_only);
  slow.release();
  worker.reset();
  store.reset();  // joins the database's thread: every admitted write has run
  EXPECT_EQ(puts.load(), 64);  // the bound: the rest stayed in memory only
}

}  // namespace
