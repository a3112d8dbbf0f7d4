#pragma once
// The fixture of the Redis client's tests against real redis-servers (redis_server.hpp):
// each test body is a coroutine on a single-threaded io_context, like a gateway worker.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "redis_server.hpp"
#include "store/redis.hpp"

using namespace sluice::store;
using namespace std::chrono_literals;
namespace net = boost::asio;
using net::awaitable;
using Clock = std::chrono::steady_clock;
using sluice::test::RedisServer;
using Type = RedisReply::Type;

// ASSERT_* cannot be used in a coroutine (it `return`s): fail and leave the body.
#define CO_REQUIRE(cond, msg)                         \
  if (!(cond)) {                                      \
    ADD_FAILURE() << "required: " #cond ": " << msg; \
    co_return;                                        \
  }

namespace sluice::test {

// Fast-reacting options for tests; reconnect_interval is short so recovery tests are quick.
inline RedisOptions test_options() {
  RedisOptions o;
  o.connect_timeout = 1000ms;
  o.command_timeout = 2000ms;
  o.reconnect_interval = 200ms;
  return o;
}

inline awaitable<void> sleep_for(std::chrono::milliseconds d) {
  net::steady_timer t(co_await net::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(net::use_awaitable);
}

// Polls `pred` every 10 ms until it holds or `limit` passes.
inline awaitable<bool> wait_until(std::function<bool()> pred, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() >= deadline) co_return false;
    co_await sleep_for(10ms);
  }
  co_return true;
}

inline awaitable<bool> wait_up(RedisConnection& c, std::chrono::milliseconds limit = 10s) {
  co_return co_await wait_until([&] { return c.up(); }, limit);
}

// Builds keys/args for eval(): a braced list cannot appear inside co_await with GCC 12.
template <class... A>
std::vector<std::string> argv(A&&... a) {
  return {std::string(std::forward<A>(a))...};
}

inline std::string show(const RedisResult& r) {
  if (!r.ok()) return "transport error: " + r.error;
  return "reply type " + std::to_string(static_cast<int>(r.reply->type)) + " str '" + r.reply->str + "' int " +
         std::to_string(r.reply->integer);
}

inline bool is_status(const RedisResult& r, std::string_view s) {
  return r.ok() && r.reply->type == Type::status && r.reply->str == s;
}

// Runs the coroutine `body` to completion on a fresh io_context (connections created in
// it are destroyed when it returns, so the loop runs out of work and returns).
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(RedisServer::binary().empty())
        << "redis-server not found: these tests need a real Redis (apt-get install redis-server, "
           "or set SLUICE_REDIS_SERVER to its path)";
  }

  // Starts a redis-server (extra arguments appended) and fails the test if it cannot.
  std::unique_ptr<RedisServer> start_server(std::vector<std::string> extra = {}) {
    auto s = std::make_unique<RedisServer>(std::move(extra));
    const std::string err = s->start();
    EXPECT_EQ(err, "") << "cannot start redis-server";
    return s;
  }

  RedisEndpoint endpoint(const RedisServer& s) {
    RedisEndpoint ep;
    ep.port = s.port();
    return ep;
  }

  template <class F>
  void run(F&& body, std::chrono::seconds limit = 60s) {
    bool done = false;
    std::exception_ptr error;
    net::co_spawn(io_, body(), [&](std::exception_ptr e) {
      done = true;
      error = e;
    });
    io_.run_for(limit);
    ASSERT_TRUE(done) << "the test coroutine did not finish within " << limit.count() << " s";
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        FAIL() << "exception: " << e.what();
      }
    }
    // Everything the connections left behind has run: the loop is out of work.
    EXPECT_TRUE(io_.stopped()) << "handlers still pending after the test";
  }

  // Spawns `n` copies of `f(i)` and waits for all of them (bounded by `limit`).
  awaitable<bool> all(int n, std::function<awaitable<void>(int)> f, std::chrono::milliseconds limit = 30s) {
    auto left = std::make_shared<int>(n);
    // A lambda coroutine reads its captures through the closure: keep it alive until the
    // last copy finishes.
    auto fn = std::make_shared<std::function<awaitable<void>(int)>>(std::move(f));
    auto ex = co_await net::this_coro::executor;
    for (int i = 0; i < n; ++i) {
      net::co_spawn(ex, (*fn)(i), [left, fn](std::exception_ptr e) {
        if (e) ADD_FAILURE() << "a spawned coroutine threw";
        --*left;
      });
    }
    // Named: GCC 12 destroys an aggregate temporary (a capturing lambda, a braced list)
    // inside a co_await expression twice.
    auto finished = [left] { return *left == 0; };
    const bool ok = co_await wait_until(finished, limit);
    co_return ok;
  }

  net::io_context io_;
};

inline std::int64_t command_calls(const RedisResult& info, const std::string& name) {
  if (!info.ok()) return -1;
  const std::string key = "cmdstat_" + name + ":calls=";
  auto pos = info.reply->str.find(key);
  if (pos == std::string::npos) return 0;
  return std::stoll(info.reply->str.substr(pos + key.size()));
}

}  // namespace sluice::test
