// The admission and settlement scripts against a real redis-server: a call the gateway
// gave up (a timeout) is voided whether it ran before or after the void, and a
// settlement batch sent twice charges once.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "../store/redis_server.hpp"
#include "limits/check.hpp"
#include "limits/scripts.hpp"
#include "store/redis.hpp"

namespace sluice::limits {
namespace {

namespace net = boost::asio;
using namespace std::chrono_literals;
using store::RedisConnection;
using store::RedisScript;
using test::RedisServer;

template <class... A>
std::vector<std::string> argv(A&&... a) {
  return {std::string(std::forward<A>(a))...};
}

class ScriptsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(RedisServer::binary().empty()) << "redis-server not found (scripts/setup.sh --test installs it)";
    server_ = std::make_unique<RedisServer>();
    ASSERT_EQ(server_->start(), "");
    store::RedisEndpoint ep;
    ep.port = server_->port();
    conn_ = std::make_shared<RedisConnection>(io_.get_executor(), ep, store::RedisOptions{});
    conn_->start();
  }
  void TearDown() override {
    conn_->stop();
    conn_.reset();
    io_.run_for(1s);
  }

  // Runs one command or script to completion on the test's loop.
  store::RedisResult run(std::function<net::awaitable<store::RedisResult>()> f) {
    std::optional<store::RedisResult> out;
    net::co_spawn(io_, [&]() -> net::awaitable<void> {
      net::steady_timer t{io_};
      for (int i = 0; i < 500 && !conn_->up(); ++i) {
        t.expires_after(10ms);
        co_await t.async_wait(net::use_awaitable);
      }
      out = co_await f();
    }, net::detached);
    while (!out) io_.run_one_for(10s);
    return *out;
  }
  store::RedisResult cmd(std::vector<std::string> a) {
    return run([&]() { return conn_->command(a); });
  }
  std::string get(const std::string& k) {
    auto r = cmd(argv("GET", k));
    return r.ok() && r.reply->type == store::RedisReply::Type::string ? r.reply->str : "";
  }
  std::string hget(const std::string& k, const std::string& f) {
    auto r = cmd(argv("HGET", k, f));
    return r.ok() && r.reply->type == store::RedisReply::Type::string ? r.reply->str : "";
  }
  std::int64_t zcard(const std::string& k) { return cmd(argv("ZCARD", k)).reply->integer; }

  // One request against a fixed window of 10/min and a daily quota of 1000 tokens.
  store::RedisResult admit(const std::string& id, const std::string& cost) {
    return run([&]() {
      return conn_->eval(admit_, argv("{t}:fw", "{t}:q"),
                         argv(id, "fw", "10", "60000", "1", "0", "0", "tq", "1000", "86400000", cost, "600000", "0"));
    });
  }
  // A batch numbered `seq` of worker "w1".
  store::RedisResult settle(const std::string& seq, std::vector<std::string> keys, std::vector<std::string> args) {
    args.insert(args.begin(), {"86400000", "w1", seq, "60000"});
    return run([&]() { return conn_->eval(settle_, keys, args); });
  }
  // The fixed window's counter and the quota's hash (whatever their period suffix).
  std::string window_key() { return keys_like("{t}:fw:*"); }
  std::string quota_key() {
    auto k = cmd(argv("KEYS", "{t}:q:*"));
    for (const auto& e : k.reply->elements) {
      if (e.str.ends_with(":r")) continue;
      return e.str;
    }
    return "";
  }
  std::string keys_like(const std::string& pattern) {
    auto k = cmd(argv("KEYS", pattern));
    return k.reply->elements.empty() ? "" : k.reply->elements[0].str;
  }

  net::io_context io_;
  std::unique_ptr<RedisServer> server_;
  std::shared_ptr<RedisConnection> conn_;
  RedisScript admit_{std::string(kAdmitScript)};
  RedisScript settle_{std::string(kSettleScript)};
  RedisScript ledger_{std::string(kLedgerScript)};
};

// The ledger read (the reconciliation report): used and reserved per counter, "" for a
// field that is not there, and it changes nothing.
TEST_F(ScriptsTest, TheLedgerReadReturnsUsedAndReservedOfEachCounter) {
  ASSERT_TRUE(admit("a1", "100").ok());
  ASSERT_TRUE(admit("a2", "50").ok());
  const auto q = quota_key();
  const auto s = settle("1", argv(q), argv("r:a1", "100", "42"));
  ASSERT_TRUE(s.ok() && !s.reply->is_error()) << (s.ok() ? s.reply->str : s.error);
  auto r = run([&]() { return conn_->eval(ledger_, argv(q, "{t}:q:nothing"), {}); });
  ASSERT_TRUE(r.ok() && !r.reply->is_error()) << (r.ok() ? r.reply->str : r.error);
  ASSERT_EQ(r.reply->elements.size(), 4u);
  EXPECT_EQ(r.reply->elements[0].str, "42");
  EXPECT_EQ(r.reply->elements[1].str, "50");
  EXPECT_EQ(r.reply->elements[2].str, "");
  EXPECT_EQ(r.reply->elements[3].str, "");
  EXPECT_EQ(keys_like("{t}:q:nothing"), "");  // nothing was created
  EXPECT_EQ(hget(q, "used"), "42");
}

TEST_F(ScriptsTest, AVoidAfterTheAdmissionGivesBackWhatItTook) {
  ASSERT_TRUE(admit("a1", "100").ok());
  ASSERT_TRUE(admit("a2", "50").ok());  // a neighbour that stays
  const auto w = window_key(), q = quota_key();
  ASSERT_EQ(get(w), "2");
  ASSERT_EQ(hget(q, "reserved"), "150");
  auto v = settle("1", argv("{t}:fw"), argv("v:a1", "0", "0"));
  ASSERT_TRUE(v.ok() && !v.reply->is_error()) << (v.ok() ? v.reply->str : v.error);
  EXPECT_EQ(get(w), "1");
  EXPECT_EQ(hget(q, "reserved"), "50");
  EXPECT_EQ(zcard(q + ":r"), 1);
  EXPECT_EQ(hget(q, "used"), "");  // a void charges nothing
  // A second void of the same call changes nothing more.
  ASSERT_TRUE(settle("2", argv("{t}:fw"), argv("v:a1", "0", "0")).ok());
  EXPECT_EQ(get(w), "1");
  EXPECT_EQ(hget(q, "reserved"), "50");
}

TEST_F(ScriptsTest, AnAdmissionArrivingAfterItsVoidDoesNothing) {
  ASSERT_TRUE(settle("1", argv("{t}:fw"), argv("v:late", "0", "0")).ok());
  auto r = admit("late", "100");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.reply->elements.size(), 1u);
  EXPECT_EQ(r.reply->elements[0].integer, -1);
  EXPECT_EQ(window_key(), "");
  EXPECT_EQ(quota_key(), "");
  EXPECT_EQ(get("{t}:a:late"), "v");  // the void's record
  // Another admission still counts.
  ASSERT_TRUE(admit("next", "100").ok());
  EXPECT_EQ(get(window_key()), "1");
  EXPECT_EQ(hget(quota_key(), "reserved"), "100");
}

TEST_F(ScriptsTest, ALeaseGrantedToAGivenUpCallIsVoidedToo) {
  auto r = run([&]() {
    return conn_->eval(admit_, argv("{t}:q"), argv("L1", "tq", "1000000", "86400000", "0", "600000", "5000"));
  });
  ASSERT_TRUE(r.ok());
  const auto q = quota_key();
  ASSERT_EQ(hget(q, "reserved"), "5000");
  ASSERT_TRUE(settle("1", argv("{t}:q"), argv("v:L1", "0", "0")).ok());
  EXPECT_EQ(hget(q, "reserved"), "0");
  EXPECT_EQ(zcard(q + ":r"), 0);
}

TEST_F(ScriptsTest, ATokenBucketGetsItsTokensBack) {
  auto admit_tb = [&](const std::string& id) {
    return run([&]() {
      return conn_->eval(admit_, argv("{t}:tb"), argv(id, "tb", "1", "60000", "1", "5", "0"));
    });
  };
  ASSERT_TRUE(admit_tb("t1").ok());
  ASSERT_TRUE(admit_tb("t2").ok());
  const std::string before = get("{t}:tb");
  ASSERT_TRUE(before.starts_with("3")) << before;
  ASSERT_TRUE(settle("1", argv("{t}:tb"), argv("v:t2", "0", "0")).ok());
  EXPECT_TRUE(get("{t}:tb").starts_with("4")) << get("{t}:tb");
}

TEST_F(ScriptsTest, ASlidingLogIsExactAndItsEntriesAreVoided) {
  auto admit_sl = [&](const std::string& id) {
    return run([&]() { return conn_->eval(admit_, argv("{t}:sl"), argv(id, "sl", "2", "60000", "1", "0", "0")); });
  };
  ASSERT_EQ(admit_sl("s1").reply->elements[0].integer, 0);
  ASSERT_EQ(admit_sl("s2").reply->elements[0].integer, 0);
  auto refused = admit_sl("s3");
  ASSERT_EQ(refused.reply->elements[0].integer, 1);
  // Retry-After: when the oldest entry leaves the minute (at most the window).
  EXPECT_GT(refused.reply->elements[1].integer, 59000);
  EXPECT_LE(refused.reply->elements[1].integer, 60000);
  EXPECT_EQ(zcard("{t}:sl"), 2);
  ASSERT_TRUE(settle("1", argv("{t}:sl"), argv("v:s2", "0", "0")).ok());
  EXPECT_EQ(zcard("{t}:sl"), 1);
  EXPECT_EQ(admit_sl("s4").reply->elements[0].integer, 0);  // the voided entry's room
}

TEST_F(ScriptsTest, ABatchSentTwiceChargesOnce) {
  ASSERT_TRUE(admit("a1", "100").ok());
  const auto q = quota_key();
  for (int i = 0; i < 2; ++i) {
    auto s = settle("5", argv(q, q), argv("r:a1", "100", "40", "u:", "0", "7"));
    ASSERT_TRUE(s.ok() && !s.reply->is_error());
  }
  EXPECT_EQ(hget(q, "used"), "47");
  EXPECT_EQ(hget(q, "reserved"), "0");
  // The next batch is charged; an older number (a resend that already ran) is not.
  ASSERT_TRUE(settle("6", argv(q), argv("u:", "0", "3")).ok());
  EXPECT_EQ(hget(q, "used"), "50");
  ASSERT_TRUE(settle("5", argv(q), argv("u:", "0", "100")).ok());
  EXPECT_EQ(hget(q, "used"), "50");
}

TEST_F(ScriptsTest, AUsageThatCreatesADayCounterKeepsItUntilTheDayEnds) {
  // Redis restarted (or was down for the day's first request): the settlement creates the
  // counter; it must hold the day's usage until the day is over, not for `keep` only.
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const auto day = now_ms / 86400000;
  const std::string k = "{t}:k:app:q0.day:" + std::to_string(day);
  ASSERT_TRUE(settle("1", argv(k), argv("u:", "0", "5000")).ok());
  const auto ttl = cmd(argv("PTTL", k)).reply->integer;
  const auto day_left = (day + 1) * 86400000 - now_ms;
  EXPECT_GT(ttl, day_left + 86400000 - 5000);  // the day's end, plus keep (a day here)
  EXPECT_LE(ttl, day_left + 86400000);
}

// Calendar months: the admission and the settlement scripts share one month_start. A
// month quota admitted, and a month counter created by a settlement, both last until the
// month ends (plus the reservation lifetime / keep).
TEST_F(ScriptsTest, MonthCountersLastUntilTheMonthEnds) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const auto month = month_index(now_ms);
  const auto left = month_start_ms(month + 1) - now_ms;
  auto r = run([&]() {
    return conn_->eval(admit_, argv("{t}:mq"), argv("m1", "tq", "1000", "0", "10", "600000", "0"));
  });
  ASSERT_TRUE(r.ok() && !r.reply->is_error());
  const std::string admitted = "{t}:mq:" + std::to_string(month);
  const auto t1 = cmd(argv("PTTL", admitted)).reply->integer;
  EXPECT_GT(t1, left + 600000 - 5000);
  EXPECT_LE(t1, left + 600000);
  const std::string settled = "{t}:k:app:q0.month:" + std::to_string(month);
  ASSERT_TRUE(settle("1", argv(settled), argv("u:", "0", "5")).ok());
  const auto t2 = cmd(argv("PTTL", settled)).reply->integer;
  EXPECT_GT(t2, left + 86400000 - 5000);
  EXPECT_LE(t2, left + 86400000);
}

}  // namespace
}  // namespace sluice::limits
