// Accounting edge cases of the limiter: a request that can never fit a token limit, the
// request-only admission (count_tokens), and counters that must not overflow.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "limits/check.hpp"
#include "limits/limiter.hpp"
#include "limits/local.hpp"

using namespace sluice;
using namespace sluice::limits;

namespace {

constexpr std::int64_t T = 6'000'000;

std::shared_ptr<config::Config> memory_config(std::int64_t tokens_per_day, std::int64_t requests_per_minute = 0) {
  auto c = std::make_shared<config::Config>();
  c->workers = 1;
  c->rate_limits.backend = config::LimiterBackend::memory;
  c->rate_limits.reservation_ttl = std::chrono::minutes(11);
  if (tokens_per_day > 0) {
    config::TokenLimit t;
    t.id = "tokens[0]";
    t.limit = tokens_per_day;
    t.per = config::QuotaPeriod::day;
    t.on_redis_down = config::DownPolicy::open;
    c->rate_limits.tokens.push_back(t);
  }
  if (requests_per_minute > 0) {
    config::RequestLimit r;
    r.id = "requests[0]";
    r.limit = requests_per_minute;
    r.on_redis_down = config::DownPolicy::open;
    c->rate_limits.requests.push_back(r);
  }
  return c;
}

config::ApiKey app_key() {
  config::ApiKey k;
  k.name = "app";
  k.tenant = "acme";
  return k;
}

}  // namespace

// A reservation above the limit itself can never pass: refused with its own reason (no
// retry time), and nothing is counted, so a request that fits still passes afterwards.
TEST(TooLargeForLimit, RefusedAtOnceWithoutARetryAndCountsNothing) {
  boost::asio::io_context io;
  Limiter limiter(memory_config(1000));
  auto w = limiter.make_worker(io.get_executor());
  const auto key = app_key();
  Admission a;
  ASSERT_TRUE(w->admit_now(key, "demo", 1001, false, a));
  EXPECT_EQ(a.reason, Reason::request_too_large);
  EXPECT_EQ(a.retry_after_ms, 0);
  EXPECT_TRUE(a.reserved.empty());
  EXPECT_NE(a.message.find("never"), std::string::npos) << a.message;
  EXPECT_EQ(http_status(a.reason), 400);
  EXPECT_EQ(reason_code(a.reason), "request_too_large_for_limit");
  // Saturated reservations too.
  Admission huge;
  ASSERT_TRUE(w->admit_now(key, "demo", INT64_MAX, false, huge));
  EXPECT_EQ(huge.reason, Reason::request_too_large);
  // With an upper bound of the prompt: recount (the exact count may fit).
  Admission bound;
  ASSERT_TRUE(w->admit_now(key, "demo", 5000, true, bound));
  EXPECT_TRUE(bound.recount);
  // Nothing was taken: the whole budget is still there.
  Admission fits;
  ASSERT_TRUE(w->admit_now(key, "demo", 1000, false, fits));
  EXPECT_TRUE(fits.allowed());
  w->settle(fits, 0);
  EXPECT_EQ(w->stats().too_large.load(), 2u);
}

// A request over a limit that is merely used up still gets the retryable refusal.
TEST(TooLargeForLimit, AFullBudgetIsStillARetryableRefusal) {
  boost::asio::io_context io;
  Limiter limiter(memory_config(1000));
  auto w = limiter.make_worker(io.get_executor());
  const auto key = app_key();
  Admission first;
  ASSERT_TRUE(w->admit_now(key, "demo", 600, false, first));
  ASSERT_TRUE(first.allowed());
  Admission second;
  ASSERT_TRUE(w->admit_now(key, "demo", 600, false, second));
  EXPECT_EQ(second.reason, Reason::quota_exceeded);
  EXPECT_GT(second.retry_after_ms, 0);
  w->settle(first, 600);
}

// count_tokens: the request limits count it, the token quota does not.
TEST(RequestsOnly, CountsRequestLimitsAndReservesNoTokens) {
  boost::asio::io_context io;
  Limiter limiter(memory_config(10, 2));
  auto w = limiter.make_worker(io.get_executor());
  const auto key = app_key();
  for (int i = 0; i < 2; ++i) {
    Admission a;
    ASSERT_TRUE(w->admit_now(key, "demo", 0, false, a, /*requests_only=*/true));
    EXPECT_TRUE(a.allowed());
    EXPECT_TRUE(a.reserved.empty());
    EXPECT_FALSE(a.tokens.set);
  }
  Admission third;
  ASSERT_TRUE(w->admit_now(key, "demo", 0, false, third, true));
  EXPECT_EQ(third.reason, Reason::rate_limited);
}

// Usage an upstream reports is summed into `used`: an absurd figure saturates instead of
// wrapping to a negative count that would let everything through.
TEST(LocalCountersOverflow, UsedSaturates) {
  LocalCounters lc;
  Check q;
  q.kind = Kind::quota;
  q.key = "q";
  q.limit = 1000;
  q.window_ms = 86'400'000;
  q.cost = 10;
  q.extra = 60'000;
  q.tokens = true;
  // Two reservations, then both settled with the largest usage there is.
  std::vector<Reserved> held;
  for (int i = 0; i < 2; ++i) {
    auto v = lc.admit({&q, 1}, "r" + std::to_string(i), T);
    ASSERT_TRUE(v.allowed);
    held.push_back({"q:" + std::to_string(v.results[0].period), 10, nullptr});
  }
  for (int i = 0; i < 2; ++i) lc.settle(held[i], "r" + std::to_string(i), INT64_MAX, T);
  auto v = lc.admit({&q, 1}, "r3", T);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.results[0].remaining, 0);
}

// One settlement charges at most kMaxCharge: the sums stay exact in Redis's Lua numbers.
TEST(SettleClamp, AbsurdUsageIsCappedPerSettlement) {
  boost::asio::io_context io;
  Limiter limiter(memory_config(1'000'000'000));
  auto w = limiter.make_worker(io.get_executor());
  Admission a;
  ASSERT_TRUE(w->admit_now(app_key(), "demo", 10, false, a));
  ASSERT_TRUE(a.allowed());
  w->settle(a, INT64_MAX);
  EXPECT_EQ(w->stats().tokens_charged.load(), static_cast<std::uint64_t>(WorkerLimiter::kMaxCharge));
  EXPECT_LT(WorkerLimiter::kMaxCharge, 100'000'000'000'000LL);
}
