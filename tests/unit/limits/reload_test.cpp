// The limits replaced at runtime (Limiter::reconfigure, a reload): the next requests are
// planned on the new limits, a named limit keeps its counter, and what a request admitted
// before the swap holds stays valid after it.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "limits/check.hpp"
#include "limits/limiter.hpp"

using namespace sluice;
using namespace sluice::limits;

namespace {

config::RequestLimit per_key(std::int64_t limit, std::string name = "") {
  config::RequestLimit r;
  r.name = name;
  r.id = name.empty() ? "requests[?]" : name;
  r.limit = limit;
  r.window = std::chrono::hours(1);
  r.on_redis_down = config::DownPolicy::open;
  return r;
}

std::shared_ptr<config::Config> with(std::vector<config::RequestLimit> requests, std::int64_t tokens_per_day = 0) {
  auto c = std::make_shared<config::Config>();
  c->workers = 1;
  c->rate_limits.backend = config::LimiterBackend::memory;
  c->rate_limits.reservation_ttl = std::chrono::minutes(11);
  c->rate_limits.requests = std::move(requests);
  if (tokens_per_day > 0) {
    config::TokenLimit t;
    t.id = t.name = "daily";
    t.limit = tokens_per_day;
    t.per = config::QuotaPeriod::day;
    t.on_redis_down = config::DownPolicy::open;
    c->rate_limits.tokens.push_back(t);
  }
  return c;
}

config::ApiKey app() {
  config::ApiKey k;
  k.name = "app";
  k.tenant = "acme";
  return k;
}

int admitted(WorkerLimiter& w, int tries) {
  int n = 0;
  for (int i = 0; i < tries; ++i) {
    Admission a;
    EXPECT_TRUE(w.admit_now(app(), "demo", 0, false, a));
    n += a.allowed();
  }
  return n;
}

}  // namespace

TEST(LimitsReload, ANamedLimitKeepsItsCountWhenRaisedAndMoved) {
  boost::asio::io_context io;
  Limiter limiter(with({per_key(3, "per-key")}));
  auto w = limiter.make_worker(io.get_executor());
  EXPECT_EQ(admitted(*w, 2), 2);
  // Raised to 5, another limit (of another key) put before it.
  auto other = per_key(1);
  other.when.key = "someone-else";
  limiter.reconfigure(with({other, per_key(5, "per-key")}));
  EXPECT_EQ(admitted(*w, 5), 3) << "2 counted before the reload, 3 more to 5";
  Admission refused;
  EXPECT_TRUE(w->admit_now(app(), "demo", 0, false, refused));
  EXPECT_NE(refused.message.find("rate limit per-key reached"), std::string::npos) << refused.message;
}

TEST(LimitsReload, AnUnnamedLimitMovedStartsAfresh) {
  boost::asio::io_context io;
  Limiter limiter(with({per_key(3)}));
  auto w = limiter.make_worker(io.get_executor());
  EXPECT_EQ(admitted(*w, 3), 3);
  auto other = per_key(100);
  other.when.key = "someone-else";
  limiter.reconfigure(with({other, per_key(3)}));  // now requests[1]: a new counter
  EXPECT_EQ(admitted(*w, 4), 3);
}

TEST(LimitsReload, LimitsRemovedThenBrought) {
  boost::asio::io_context io;
  Limiter limiter(with({}));
  auto w = limiter.make_worker(io.get_executor());
  EXPECT_FALSE(w->active());
  EXPECT_EQ(admitted(*w, 3), 3);
  limiter.reconfigure(with({per_key(1, "one")}));
  EXPECT_TRUE(w->active());
  EXPECT_EQ(admitted(*w, 3), 1);
  limiter.reconfigure(with({}));
  EXPECT_FALSE(limiter.active());
  EXPECT_EQ(admitted(*w, 3), 3);
  EXPECT_EQ(limiter.status().active, "none");
}

TEST(LimitsReload, AReservationMadeBeforeTheSwapIsSettledAfterIt) {
  boost::asio::io_context io;
  Limiter limiter(with({}, 1000));
  auto w = limiter.make_worker(io.get_executor());
  Admission held;
  ASSERT_TRUE(w->admit_now(app(), "demo", 600, false, held));
  ASSERT_TRUE(held.allowed());
  // The quota raised (same name: same counter); the old configuration is gone but for
  // what the request holds.
  limiter.reconfigure(with({}, 2000));
  w->settle(held, 100);  // 500 of the 600 reserved given back
  Admission next;
  ASSERT_TRUE(w->admit_now(app(), "demo", 1900, false, next));
  EXPECT_TRUE(next.allowed()) << "100 used of 2000: 1900 fit";
  Admission over;
  ASSERT_TRUE(w->admit_now(app(), "demo", 1, false, over));
  EXPECT_FALSE(over.allowed());
  EXPECT_EQ(limiter.rules()->limits().tokens.at(0).limit, 2000);
}
