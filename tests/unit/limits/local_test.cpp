// LocalCounters (limits/local.hpp): the per-instance counting backend. Time is passed in,
// so every case is deterministic.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "limits/check.hpp"
#include "limits/local.hpp"

using namespace sluice::limits;

namespace {

// A time aligned to both 1 s and 60 s windows (100 minutes after the epoch).
constexpr std::int64_t T = 6'000'000;

Check fixed(std::string_view key, std::int64_t limit, std::int64_t window_ms, std::int64_t cost = 1) {
  Check c;
  c.kind = Kind::fixed_window;
  c.key = key;
  c.limit = limit;
  c.window_ms = window_ms;
  c.cost = cost;
  return c;
}

Check sliding(std::string_view key, std::int64_t limit, std::int64_t window_ms) {
  Check c = fixed(key, limit, window_ms);
  c.kind = Kind::sliding_window;
  return c;
}

Check bucket(std::string_view key, std::int64_t limit, std::int64_t window_ms, std::int64_t capacity, std::int64_t cost = 1) {
  Check c = fixed(key, limit, window_ms, cost);
  c.kind = Kind::token_bucket;
  c.extra = capacity;
  return c;
}

Check quota(std::string_view key, std::int64_t limit, std::int64_t window_ms, std::int64_t cost, std::int64_t ttl_ms) {
  Check c = fixed(key, limit, window_ms, cost);
  c.kind = Kind::quota;
  c.extra = ttl_ms;
  c.tokens = true;
  return c;
}

Verdict admit1(LocalCounters& lc, const Check& c, std::int64_t now, std::string_view id = "req") {
  return lc.admit(std::span<const Check>(&c, 1), id, now);
}

// The Reserved entry a request gets for quota check `c` admitted at `v`.
Reserved reserved_of(const Check& c, const Verdict& v, std::size_t i = 0) {
  return Reserved{std::string(c.key) + ":" + std::to_string(v.results[i].period), c.cost, nullptr};
}

int count_allowed(LocalCounters& lc, const Check& c, std::int64_t now, int attempts) {
  int n = 0;
  for (int i = 0; i < attempts; ++i) n += admit1(lc, c, now).allowed ? 1 : 0;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Fixed window

TEST(LocalFixedWindow, ExactAdmitsRemainingAndReset) {
  LocalCounters lc;
  const Check c = fixed("fw", 3, 1000);
  auto v1 = admit1(lc, c, T);
  ASSERT_TRUE(v1.allowed);
  EXPECT_EQ(v1.denied, -1);
  EXPECT_EQ(v1.retry_after_ms, 0);
  EXPECT_EQ(v1.now_ms, T);
  ASSERT_EQ(v1.results.size(), 1u);
  EXPECT_EQ(v1.results[0].remaining, 3);  // before this request (check.hpp)
  EXPECT_EQ(v1.results[0].reset_ms, 1000);

  auto v2 = admit1(lc, c, T + 100);
  ASSERT_TRUE(v2.allowed);
  EXPECT_EQ(v2.results[0].remaining, 2);
  EXPECT_EQ(v2.results[0].reset_ms, 900);

  auto v3 = admit1(lc, c, T + 250);
  ASSERT_TRUE(v3.allowed);
  EXPECT_EQ(v3.results[0].remaining, 1);
  EXPECT_EQ(v3.results[0].reset_ms, 750);

  auto v4 = admit1(lc, c, T + 600);
  EXPECT_FALSE(v4.allowed);
  EXPECT_EQ(v4.denied, 0);
  EXPECT_EQ(v4.results[0].remaining, 0);
  EXPECT_EQ(v4.results[0].reset_ms, 400);
  EXPECT_EQ(v4.retry_after_ms, 400);

  auto v5 = admit1(lc, c, T + 999);
  EXPECT_FALSE(v5.allowed);
  EXPECT_EQ(v5.retry_after_ms, 1);

  // The next window starts afresh.
  auto v6 = admit1(lc, c, T + 1000);
  ASSERT_TRUE(v6.allowed);
  EXPECT_EQ(v6.results[0].remaining, 3);
  EXPECT_EQ(v6.results[0].reset_ms, 1000);
  EXPECT_EQ(count_allowed(lc, c, T + 1500, 10), 2);
}

TEST(LocalFixedWindow, WindowIsAlignedToTheEpochNotToTheFirstRequest) {
  LocalCounters lc;
  const Check c = fixed("fw", 5, 60'000);
  const std::int64_t start = T + 59'000;  // one second before a boundary
  EXPECT_EQ(count_allowed(lc, c, start, 8), 5);
  auto d = admit1(lc, c, start + 999);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 1);
  // One second after the first request, a whole new window.
  EXPECT_EQ(count_allowed(lc, c, start + 1000, 8), 5);
  auto v = admit1(lc, c, start + 1000 + 30'000);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.results[0].reset_ms, 30'000);
}

TEST(LocalFixedWindow, RefusedRequestsAreNotCounted) {
  LocalCounters lc;
  const Check c = fixed("fw", 2, 1000);
  EXPECT_EQ(count_allowed(lc, c, T, 50), 2);
  // 48 refusals did not eat into the next window.
  EXPECT_EQ(count_allowed(lc, c, T + 1000, 50), 2);
  // A window skipped entirely changes nothing.
  EXPECT_EQ(count_allowed(lc, c, T + 5000, 50), 2);
}

TEST(LocalFixedWindow, KeysAreIndependentAndCostCounts) {
  LocalCounters lc;
  EXPECT_EQ(count_allowed(lc, fixed("a", 3, 1000), T, 10), 3);
  EXPECT_EQ(count_allowed(lc, fixed("b", 3, 1000), T, 10), 3);
  const Check c = fixed("c", 10, 1000, 4);
  auto v1 = admit1(lc, c, T);
  EXPECT_TRUE(v1.allowed);
  EXPECT_EQ(v1.results[0].remaining, 10);
  auto v2 = admit1(lc, c, T);
  EXPECT_TRUE(v2.allowed);
  EXPECT_EQ(v2.results[0].remaining, 6);
  auto v3 = admit1(lc, c, T);
  EXPECT_FALSE(v3.allowed);
  EXPECT_EQ(v3.results[0].remaining, 2);
}

// ---------------------------------------------------------------------------------------
// Sliding window

TEST(LocalSlidingWindow, WeightedPreviousWindow) {
  LocalCounters lc;
  const Check c = sliding("sw", 10, 60'000);
  // 10 in window N (T is its start).
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(admit1(lc, c, T + 1000 + i).allowed) << i;
  EXPECT_FALSE(admit1(lc, c, T + 59'999).allowed);
  // 25% into window N+1: the estimate is 10 * 0.75 = 7.5, so exactly 2 more pass.
  const std::int64_t t = T + 60'000 + 15'000;
  auto a = admit1(lc, c, t);
  ASSERT_TRUE(a.allowed);
  EXPECT_EQ(a.results[0].remaining, 2);  // floor(10 - 7.5)
  EXPECT_EQ(a.results[0].reset_ms, 45'000);
  auto b = admit1(lc, c, t);
  ASSERT_TRUE(b.allowed);
  EXPECT_EQ(b.results[0].remaining, 1);  // floor(10 - 8.5)
  auto d = admit1(lc, c, t);
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.denied, 0);
  EXPECT_EQ(d.results[0].remaining, 0);  // floor(10 - 9.5)
  // Passes again when 10 * (1 - e / 60 s) + 2 + 1 <= 10, i.e. at e = 18 s: 3 s from now
  // (1 ms more from the rounding of 1 - 0.7 in doubles is tolerated).
  EXPECT_GE(d.retry_after_ms, 3000);
  EXPECT_LE(d.retry_after_ms, 3001);
  EXPECT_FALSE(admit1(lc, c, t + 2999).allowed);
  EXPECT_TRUE(admit1(lc, c, t + 3000).allowed);
  EXPECT_FALSE(admit1(lc, c, t + 3000).allowed);
}

TEST(LocalSlidingWindow, RetryAfterExactWhenNoRounding) {
  LocalCounters lc;
  // limit 8, window 1 s, 8 in window N. At 12.5% of N+1 the estimate is 8 * 0.875 = 7:
  // one passes. The next waits until 8 * (1 - e) + 1 + 1 <= 8, i.e. e = 250 ms.
  const Check c = sliding("sw", 8, 1000);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(admit1(lc, c, T + 500).allowed);
  const std::int64_t t = T + 1000 + 125;
  auto first = admit1(lc, c, t);
  ASSERT_TRUE(first.allowed);
  EXPECT_EQ(first.results[0].remaining, 1);
  auto d = admit1(lc, c, t);
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.results[0].remaining, 0);
  EXPECT_EQ(d.results[0].reset_ms, 875);
  EXPECT_EQ(d.retry_after_ms, 125);
  EXPECT_FALSE(admit1(lc, c, T + 1000 + 249).allowed);
  EXPECT_TRUE(admit1(lc, c, T + 1000 + 250).allowed);
}

TEST(LocalSlidingWindow, RetryAfterWhenTheCurrentWindowIsFull) {
  LocalCounters lc;
  const Check c = sliding("sw", 10, 60'000);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(admit1(lc, c, T + 10'000).allowed);
  // Half-way through window N: the current window alone is full. In N+1 the estimate is
  // 10 * (1 - e / 60 s) and one more passes at e = 6 s: 30 s + 6 s from now.
  auto d = admit1(lc, c, T + 30'000);
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.results[0].reset_ms, 30'000);
  EXPECT_EQ(d.retry_after_ms, 36'000);
  EXPECT_FALSE(admit1(lc, c, T + 60'000 + 5'999).allowed);
  EXPECT_TRUE(admit1(lc, c, T + 60'000 + 6'000).allowed);
}

TEST(LocalSlidingWindow, OlderWindowsDoNotCount) {
  LocalCounters lc;
  const Check c = sliding("sw", 10, 1000);
  EXPECT_EQ(count_allowed(lc, c, T + 999, 20), 10);
  // Window N+2: N is two windows back and weighs nothing.
  EXPECT_EQ(count_allowed(lc, c, T + 2000, 20), 10);
  // At the very start of N+3, N+2 weighs fully.
  EXPECT_EQ(count_allowed(lc, c, T + 3000, 20), 0);
  // Half-way: half of N+2 is left: 5 pass.
  EXPECT_EQ(count_allowed(lc, c, T + 3500, 20), 5);
}

TEST(LocalSlidingWindow, RetryAfterIsWhenTheNextRequestPasses) {
  // Random histories: whenever a request is refused, it passes at now + retry_after and
  // (1 ms of rounding aside) not before.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    LocalCounters lc;
    const std::int64_t limit = 1 + static_cast<std::int64_t>(rng() % 20);
    const std::int64_t w = 1000 * (1 + static_cast<std::int64_t>(rng() % 60));
    const Check c = sliding("sw", limit, w);
    std::int64_t now = T + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(w));
    for (int step = 0; step < 200; ++step) {
      now += static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(w / 4 + 1));
      auto v = admit1(lc, c, now);
      if (v.allowed) continue;
      ASSERT_GE(v.retry_after_ms, 1);
      // Refused requests do not change the counters, so probing is harmless, except that
      // a probe that passes counts: probe "not yet" first, then "now it passes".
      if (v.retry_after_ms >= 3) {
        ASSERT_FALSE(admit1(lc, c, now + v.retry_after_ms - 2).allowed)
            << "limit " << limit << " window " << w << " retry " << v.retry_after_ms;
      }
      ASSERT_TRUE(admit1(lc, c, now + v.retry_after_ms).allowed)
          << "limit " << limit << " window " << w << " retry " << v.retry_after_ms;
      now += v.retry_after_ms;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Token bucket

TEST(LocalTokenBucket, BurstThenRefillAtLimitPerWindow) {
  LocalCounters lc;
  // 10 per minute (one token per 6 s), capacity 5.
  const Check c = bucket("tb", 10, 60'000, 5);
  for (int i = 0; i < 5; ++i) {
    auto v = admit1(lc, c, T);
    ASSERT_TRUE(v.allowed) << i;
    EXPECT_EQ(v.results[0].remaining, 5 - i);
    EXPECT_EQ(v.results[0].reset_ms, 6000 * (i + 1));  // until full again
  }
  auto d = admit1(lc, c, T);
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.results[0].remaining, 0);
  EXPECT_EQ(d.results[0].reset_ms, 30'000);
  EXPECT_EQ(d.retry_after_ms, 6000);

  // Half a token after 3 s: the missing half takes 3 s more.
  auto h = admit1(lc, c, T + 3000);
  ASSERT_FALSE(h.allowed);
  EXPECT_EQ(h.retry_after_ms, 3000);
  EXPECT_EQ(h.results[0].reset_ms, 27'000);

  auto ok = admit1(lc, c, T + 6000);
  ASSERT_TRUE(ok.allowed);
  EXPECT_EQ(ok.results[0].remaining, 1);
  EXPECT_EQ(ok.results[0].reset_ms, 30'000);
  EXPECT_FALSE(admit1(lc, c, T + 6000).allowed);

  // 2.5 tokens after 15 s: two pass.
  EXPECT_EQ(count_allowed(lc, c, T + 21'000, 10), 2);
}

TEST(LocalTokenBucket, NeverHoldsMoreThanItsCapacity) {
  LocalCounters lc;
  const Check c = bucket("tb", 10, 1000, 3);
  EXPECT_EQ(count_allowed(lc, c, T, 10), 3);
  // Ten hours idle: still only the capacity.
  EXPECT_EQ(count_allowed(lc, c, T + 36'000'000, 10), 3);
}

TEST(LocalTokenBucket, CapacityEqualToLimitAndCost) {
  LocalCounters lc;
  const Check c = bucket("tb", 4, 1000, 4, 2);  // cost 2
  auto a = admit1(lc, c, T);
  ASSERT_TRUE(a.allowed);
  EXPECT_EQ(a.results[0].remaining, 4);
  EXPECT_EQ(a.results[0].reset_ms, 500);
  ASSERT_TRUE(admit1(lc, c, T).allowed);
  auto d = admit1(lc, c, T + 125);  // 0.5 token
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 375);  // 1.5 tokens at 4 per second
  EXPECT_TRUE(admit1(lc, c, T + 500).allowed);
}

// ---------------------------------------------------------------------------------------
// Quota

TEST(LocalQuota, ReservationsCountUntilSettled) {
  LocalCounters lc;
  const Check a = quota("q", 1000, 60'000, 400, 120'000);
  auto va = admit1(lc, a, T + 1000, "a");
  ASSERT_TRUE(va.allowed);
  EXPECT_EQ(va.results[0].remaining, 1000);
  EXPECT_EQ(va.results[0].reset_ms, 59'000);
  EXPECT_EQ(va.results[0].period, T / 60'000);
  auto vb = admit1(lc, a, T + 2000, "b");
  ASSERT_TRUE(vb.allowed);
  EXPECT_EQ(vb.results[0].remaining, 600);
  // used + reserved + cost = 0 + 800 + 400 > 1000
  auto vc = admit1(lc, a, T + 3000, "c");
  ASSERT_FALSE(vc.allowed);
  EXPECT_EQ(vc.results[0].remaining, 200);
  EXPECT_EQ(vc.retry_after_ms, 57'000);  // the end of the period
  EXPECT_EQ(vc.results[0].reset_ms, 57'000);

  // "a" used only 100 of its 400: 100 used + 400 reserved ("b").
  lc.settle(reserved_of(a, va), "a", 100, T + 4000);
  auto vc2 = admit1(lc, a, T + 5000, "c");
  ASSERT_TRUE(vc2.allowed);
  EXPECT_EQ(vc2.results[0].remaining, 500);
  // Exactly 100 left.
  const Check exact = quota("q", 1000, 60'000, 100, 120'000);
  const Check over = quota("q", 1000, 60'000, 101, 120'000);
  EXPECT_FALSE(admit1(lc, over, T + 6000, "d").allowed);
  auto ve = admit1(lc, exact, T + 6000, "e");
  ASSERT_TRUE(ve.allowed);
  EXPECT_EQ(ve.results[0].remaining, 100);
}

TEST(LocalQuota, SettleChargesMoreThanReserved) {
  LocalCounters lc;
  const Check c = quota("q", 1000, 60'000, 100, 120'000);
  auto v = admit1(lc, c, T, "a");
  ASSERT_TRUE(v.allowed);
  lc.settle(reserved_of(c, v), "a", 700, T + 10);
  // 700 used, nothing reserved: 300 left.
  auto probe = admit1(lc, quota("q", 1000, 60'000, 300, 120'000), T + 20, "b");
  ASSERT_TRUE(probe.allowed);
  EXPECT_EQ(probe.results[0].remaining, 300);
}

TEST(LocalQuota, SettleTwiceReleasesOnce) {
  LocalCounters lc;
  const Check c = quota("q", 1000, 60'000, 500, 120'000);
  auto v1 = admit1(lc, c, T, "a");
  auto v2 = admit1(lc, c, T, "b");
  ASSERT_TRUE(v1.allowed && v2.allowed);
  lc.settle(reserved_of(c, v1), "a", 0, T + 1);
  lc.settle(reserved_of(c, v1), "a", 0, T + 2);  // "b" is still reserved
  EXPECT_FALSE(admit1(lc, quota("q", 1000, 60'000, 501, 120'000), T + 3, "c").allowed);
  EXPECT_TRUE(admit1(lc, quota("q", 1000, 60'000, 500, 120'000), T + 3, "c").allowed);
}

TEST(LocalQuota, UnsettledReservationExpiresAfterExtra) {
  LocalCounters lc;
  const std::int64_t ttl = 5000;
  const Check big = quota("q", 1000, 60'000, 800, ttl);
  const Check next = quota("q", 1000, 60'000, 300, ttl);
  auto v = admit1(lc, big, T, "a");
  ASSERT_TRUE(v.allowed);
  auto d = admit1(lc, next, T + ttl - 1, "b");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.results[0].remaining, 200);
  // At T + ttl the reservation of "a" is released.
  auto ok = admit1(lc, next, T + ttl, "b");
  ASSERT_TRUE(ok.allowed);
  EXPECT_EQ(ok.results[0].remaining, 1000);
  // "a" settles late: only what it used is charged (its reservation is long gone).
  lc.settle(reserved_of(big, v), "a", 250, T + ttl + 10);
  // used 250 + reserved 300 ("b"): 450 left.
  EXPECT_FALSE(admit1(lc, quota("q", 1000, 60'000, 451, ttl), T + ttl + 20, "c").allowed);
  auto rest = admit1(lc, quota("q", 1000, 60'000, 450, ttl), T + ttl + 20, "c");
  ASSERT_TRUE(rest.allowed);
  EXPECT_EQ(rest.results[0].remaining, 450);
}

TEST(LocalQuota, ReservationsExpireEachAtItsOwnTime) {
  LocalCounters lc;
  const std::int64_t ttl = 5000;
  // Three reservations of 100 made 1 s apart; the first settles (its expiry was the
  // earliest: the next one must still be found when it comes).
  auto a = admit1(lc, quota("q", 1000, 60'000, 100, ttl), T, "a");
  ASSERT_TRUE(admit1(lc, quota("q", 1000, 60'000, 100, ttl), T + 1000, "b").allowed);
  ASSERT_TRUE(admit1(lc, quota("q", 1000, 60'000, 100, ttl), T + 2000, "c").allowed);
  lc.settle(reserved_of(quota("q", 1000, 60'000, 100, ttl), a), "a", 0, T + 2500);
  auto left = [&](std::int64_t now) {
    return admit1(lc, quota("q", 1000, 60'000, 0, ttl), now, "probe").results[0].remaining;
  };
  EXPECT_EQ(left(T + 2600), 800);      // b and c held
  EXPECT_EQ(left(T + 1000 + ttl - 1), 800);
  EXPECT_EQ(left(T + 1000 + ttl), 900);  // b expired
  EXPECT_EQ(left(T + 2000 + ttl - 1), 900);
  EXPECT_EQ(left(T + 2000 + ttl), 1000);  // c too
}

TEST(LocalQuota, SettleAfterExpiryBeforeAnyAdmitChargesOnlyActual) {
  LocalCounters lc;
  const std::int64_t ttl = 5000;
  const Check big = quota("q", 1000, 60'000, 800, ttl);
  auto v = admit1(lc, big, T, "a");
  ASSERT_TRUE(v.allowed);
  // Expired but not yet released by an admit.
  lc.settle(reserved_of(big, v), "a", 250, T + ttl + 1);
  EXPECT_FALSE(admit1(lc, quota("q", 1000, 60'000, 751, ttl), T + ttl + 2, "b").allowed);
  auto ok = admit1(lc, quota("q", 1000, 60'000, 750, ttl), T + ttl + 2, "b");
  ASSERT_TRUE(ok.allowed);
  EXPECT_EQ(ok.results[0].remaining, 750);
}

TEST(LocalQuota, PeriodRollsOverWithTheWindow) {
  LocalCounters lc;
  const Check c = quota("q", 100, 60'000, 100, 600'000);
  auto v = admit1(lc, c, T + 59'000, "a");
  ASSERT_TRUE(v.allowed);
  EXPECT_EQ(v.results[0].period, T / 60'000);
  auto d = admit1(lc, c, T + 59'999, "b");
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 1);
  auto n = admit1(lc, c, T + 60'000, "b");
  ASSERT_TRUE(n.allowed);
  EXPECT_EQ(n.results[0].period, T / 60'000 + 1);
  EXPECT_EQ(n.results[0].reset_ms, 60'000);
  // Settling "a" charges the old period, not the new one.
  lc.settle(reserved_of(c, v), "a", 100, T + 60'001);
  lc.settle(reserved_of(c, n), "b", 40, T + 60'002);
  EXPECT_FALSE(admit1(lc, quota("q", 100, 60'000, 61, 600'000), T + 60'003, "c").allowed);
  auto probe = admit1(lc, quota("q", 100, 60'000, 60, 600'000), T + 60'003, "c");
  ASSERT_TRUE(probe.allowed);
  EXPECT_EQ(probe.results[0].remaining, 60);
}

TEST(LocalQuota, CalendarMonthWhenWindowIsZero) {
  LocalCounters lc;
  const Check c = quota("q", 1000, 0, 1000, 600'000);
  // 2024-02-29T23:59:59.000Z
  const std::int64_t feb = 1709251199000LL;
  auto v = admit1(lc, c, feb - 20LL * 86'400'000, "a");  // 2024-02-09
  ASSERT_TRUE(v.allowed);
  EXPECT_EQ(v.results[0].period, 649);
  EXPECT_EQ(v.results[0].reset_ms, 20LL * 86'400'000 + 1000);
  lc.settle(reserved_of(c, v), "a", 1000, feb - 86'400'000);  // all used
  auto d = admit1(lc, c, feb, "b");
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 1000);
  EXPECT_EQ(d.results[0].reset_ms, 1000);
  // 2024-03-01T00:00:00Z: a new month. March has 31 days.
  auto m = admit1(lc, c, feb + 1000, "b");
  ASSERT_TRUE(m.allowed);
  EXPECT_EQ(m.results[0].period, 650);
  EXPECT_EQ(m.results[0].reset_ms, 31LL * 86'400'000);
}

// ---------------------------------------------------------------------------------------
// Several checks

TEST(LocalAdmit, AllOrNothingAcrossChecks) {
  LocalCounters lc;
  const std::vector<Check> checks = {
      fixed("a", 5, 1000),
      sliding("s", 5, 1000),
      bucket("b", 5, 1000, 5),
      quota("q", 500, 60'000, 100, 120'000),
      fixed("tight", 1, 1000),
  };
  auto v1 = lc.admit(checks, "r1", T);
  ASSERT_TRUE(v1.allowed);
  ASSERT_EQ(v1.results.size(), 5u);
  EXPECT_EQ(v1.results[0].remaining, 5);
  EXPECT_EQ(v1.results[3].remaining, 500);
  EXPECT_EQ(v1.results[4].remaining, 1);
  // "tight" refuses: the others must lose nothing, 10 times over.
  for (int i = 0; i < 10; ++i) {
    auto v = lc.admit(checks, "r2-" + std::to_string(i), T + 10);
    ASSERT_FALSE(v.allowed);
    EXPECT_EQ(v.denied, 4);
    // What passed reports what it had, and nothing was taken.
    EXPECT_EQ(v.results[0].remaining, 4);
    EXPECT_EQ(v.results[3].remaining, 400);
  }
  // Without "tight": exactly 4 more requests fit everywhere.
  const std::vector<Check> rest(checks.begin(), checks.end() - 1);
  for (int i = 0; i < 4; ++i) {
    auto v = lc.admit(rest, "r3-" + std::to_string(i), T + 20);
    ASSERT_TRUE(v.allowed) << i;
  }
  auto last = lc.admit(rest, "r4", T + 20);
  EXPECT_FALSE(last.allowed);
  EXPECT_EQ(last.denied, 0);  // the first refusing check
}

TEST(LocalAdmit, RefusedRequestReservesNoTokens) {
  LocalCounters lc;
  const Check q = quota("q", 100, 60'000, 40, 120'000);
  const std::vector<Check> checks = {q, fixed("f", 1, 60'000)};
  ASSERT_TRUE(lc.admit(checks, "a", T).allowed);  // reserves 40, fills "f"
  auto v = lc.admit(checks, "b", T + 1);
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.denied, 1);
  EXPECT_EQ(v.results[0].remaining, 60);
  // "b" took nothing: 60 left, and settling "b" finds no reservation to release.
  lc.settle(Reserved{std::string(q.key) + ":" + std::to_string(T / 60'000), 40, nullptr}, "b", 0, T + 2);
  EXPECT_FALSE(admit1(lc, quota("q", 100, 60'000, 61, 120'000), T + 3, "c").allowed);
  EXPECT_TRUE(admit1(lc, quota("q", 100, 60'000, 60, 120'000), T + 3, "c").allowed);
}

TEST(LocalAdmit, RetryAfterIsTheMaxOverRefusingChecks) {
  LocalCounters lc;
  const std::vector<Check> checks = {
      fixed("short", 1, 1000),     // refuses, 600 ms left
      fixed("free", 100, 3'600'000),  // passes: its long reset must not count
      fixed("long", 1, 60'000),    // refuses, 59.4 s left
  };
  ASSERT_TRUE(lc.admit(checks, "a", T).allowed);
  auto v = lc.admit(checks, "b", T + 400);
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.denied, 0);
  EXPECT_EQ(v.retry_after_ms, 59'600);
  EXPECT_EQ(v.results[0].reset_ms, 600);
  EXPECT_EQ(v.results[2].reset_ms, 59'600);

  // Only the short one refusing: its own wait.
  const std::vector<Check> two = {fixed("free", 100, 3'600'000), fixed("short", 1, 1000)};
  auto w = lc.admit(two, "c", T + 400);
  ASSERT_FALSE(w.allowed);
  EXPECT_EQ(w.denied, 1);
  EXPECT_EQ(w.retry_after_ms, 600);
}

// ---------------------------------------------------------------------------------------
// Sweeping and size

TEST(LocalSweep, RemovesOnlyExpiredCounters) {
  LocalCounters lc;
  EXPECT_EQ(lc.size(), 0u);
  ASSERT_TRUE(admit1(lc, fixed("f", 5, 1000), T).allowed);               // until T + 1000
  ASSERT_TRUE(admit1(lc, sliding("s", 1, 1000), T).allowed);             // until T + 2000
  ASSERT_TRUE(admit1(lc, bucket("b", 1, 2000, 2), T).allowed);           // full at T + 2000
  ASSERT_TRUE(admit1(lc, quota("q", 10, 60'000, 1, 5000), T).allowed);   // until T + 65000
  EXPECT_EQ(lc.size(), 4u);
  lc.sweep(T + 1000);
  EXPECT_EQ(lc.size(), 4u);
  lc.sweep(T + 1001);
  EXPECT_EQ(lc.size(), 3u);
  lc.sweep(T + 2000);
  EXPECT_EQ(lc.size(), 3u);
  lc.sweep(T + 2001);  // sliding: its window and the next are over; bucket: full at T + 2000, kept 1 s more
  EXPECT_EQ(lc.size(), 2u);
  lc.sweep(T + 3001);
  EXPECT_EQ(lc.size(), 1u);
  // The quota survives with its reservation.
  EXPECT_FALSE(admit1(lc, quota("q", 10, 60'000, 10, 5000), T + 3002, "x").allowed);
  lc.sweep(T + 65'000);
  EXPECT_EQ(lc.size(), 1u);
  lc.sweep(T + 65'001);
  EXPECT_EQ(lc.size(), 0u);
}

TEST(LocalSweep, SettleAfterSweepIsHarmless) {
  LocalCounters lc;
  const Check c = quota("q", 10, 1000, 5, 1000);
  auto v = admit1(lc, c, T, "a");
  ASSERT_TRUE(v.allowed);
  lc.sweep(T + 10'000);
  EXPECT_EQ(lc.size(), 0u);
  lc.settle(reserved_of(c, v), "a", 5, T + 10'001);
  EXPECT_EQ(lc.size(), 0u);
}

// ---------------------------------------------------------------------------------------
// Threads

namespace {

int hammer(LocalCounters& lc, const std::vector<Check>& a, const std::vector<Check>& b, int threads, int per_thread) {
  std::atomic<int> allowed{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      const auto& checks = t % 2 ? b : a;  // half of them list the checks in the other order
      for (int i = 0; i < per_thread; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        if (lc.admit(checks, id, T + 1).allowed) allowed.fetch_add(1);
      }
    });
  }
  go = true;
  for (auto& th : ts) th.join();
  return allowed.load();
}

}  // namespace

TEST(LocalThreads, ExactlyLimitAdmittedUnderContention) {
  {
    LocalCounters lc;
    const std::vector<Check> c = {fixed("hot", 500, 60'000)};
    EXPECT_EQ(hammer(lc, c, c, 8, 2000), 500);
  }
  {
    LocalCounters lc;
    const std::vector<Check> c = {sliding("hot", 300, 60'000)};
    EXPECT_EQ(hammer(lc, c, c, 8, 1000), 300);
  }
  {
    LocalCounters lc;
    const std::vector<Check> c = {bucket("hot", 10, 60'000, 250)};
    EXPECT_EQ(hammer(lc, c, c, 8, 1000), 250);
  }
  {
    LocalCounters lc;
    const std::vector<Check> c = {quota("hot", 1000, 60'000, 3, 120'000)};
    EXPECT_EQ(hammer(lc, c, c, 8, 1000), 333);
  }
}

TEST(LocalThreads, SeveralKeysInEitherOrderNoDeadlockAllOrNothing) {
  LocalCounters lc;
  // Many keys so that several shards are locked per request.
  std::vector<std::string> names;  // what the checks' keys point to
  for (int i = 0; i < 12; ++i) names.push_back("k" + std::to_string(i));
  std::vector<Check> a;
  for (const auto& n : names) a.push_back(fixed(n, 100'000, 60'000));
  a.push_back(fixed("narrow", 400, 60'000));
  std::vector<Check> b(a.rbegin(), a.rend());
  EXPECT_EQ(hammer(lc, a, b, 8, 1000), 400);
  // Every wide counter took exactly the 400 admitted requests.
  for (int i = 0; i < 12; ++i) {
    auto v = admit1(lc, fixed(names[static_cast<std::size_t>(i)], 100'000, 60'000), T + 2);
    ASSERT_TRUE(v.allowed);
    EXPECT_EQ(v.results[0].remaining, 100'000 - 400) << i;
  }
}

TEST(LocalThreads, ConcurrentSettleAndSweep) {
  LocalCounters lc;
  const Check c = quota("q", 1'000'000, 60'000, 10, 120'000);
  std::vector<std::thread> ts;
  std::atomic<int> admitted{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string id = std::to_string(t) + ":" + std::to_string(i);
        auto v = admit1(lc, c, T + 1, id);
        if (!v.allowed) continue;
        admitted.fetch_add(1);
        lc.settle(reserved_of(c, v), id, 3, T + 2);
        if (i % 100 == 0) lc.sweep(T + 3);
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(admitted.load(), 8000);
  // 8000 * 3 used, nothing reserved.
  const std::int64_t left = 1'000'000 - 24'000;
  EXPECT_FALSE(admit1(lc, quota("q", 1'000'000, 60'000, left + 1, 120'000), T + 4, "x").allowed);
  EXPECT_TRUE(admit1(lc, quota("q", 1'000'000, 60'000, left, 120'000), T + 4, "x").allowed);
}

// ---------------------------------------------------------------------------------------
// Sliding log

Check slog(std::string_view key, std::int64_t limit, std::int64_t window_ms) {
  Check c = fixed(key, limit, window_ms);
  c.kind = Kind::sliding_log;
  return c;
}

// Admission times of a burst just before a window boundary, then steady traffic after it
// (one attempt every 50 ms): the most admitted in any span of one window length.
std::int64_t most_in_a_window(LocalCounters& lc, const Check& c, std::int64_t w) {
  std::vector<std::int64_t> at;
  const std::int64_t burst = T + w - 100;  // 100 ms before the boundary
  for (int i = 0; i < 2 * c.limit; ++i) {
    if (admit1(lc, c, burst, "r").allowed) at.push_back(burst);
  }
  for (std::int64_t t = burst + 50; t < burst + 3 * w; t += 50) {
    if (admit1(lc, c, t, "r").allowed) at.push_back(t);
  }
  std::int64_t most = 0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    std::int64_t n = 0;
    for (std::size_t j = i; j < at.size() && at[j] < at[i] + w; ++j) ++n;
    most = std::max(most, n);
  }
  return most;
}

TEST(LocalSlidingLog, NeverAdmitsMoreThanTheLimitInAnyWindowLengthSpan) {
  LocalCounters a, b;
  // The approximate window lets the burst and most of a window's worth more through
  // within one window length (the bound docs/limits.md states); the log never does.
  EXPECT_GT(most_in_a_window(a, sliding("sw", 20, 10'000), 10'000), 20);
  EXPECT_EQ(most_in_a_window(b, slog("sl", 20, 10'000), 10'000), 20);
}

TEST(LocalSlidingLog, RetryAfterIsWhenTheOldestEntriesLeave) {
  LocalCounters lc;
  const Check c = slog("sl", 3, 1000);
  ASSERT_TRUE(admit1(lc, c, T).allowed);
  ASSERT_TRUE(admit1(lc, c, T + 200).allowed);
  auto third = admit1(lc, c, T + 400);
  ASSERT_TRUE(third.allowed);
  EXPECT_EQ(third.results[0].remaining, 1);   // before this request
  EXPECT_EQ(third.results[0].reset_ms, 600);  // the oldest leaves at T + 1000
  auto refused = admit1(lc, c, T + 500);
  ASSERT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_ms, 500);
  EXPECT_FALSE(admit1(lc, c, T + 999).allowed);
  EXPECT_TRUE(admit1(lc, c, T + 1000).allowed);  // the first left: exactly one more fits
  EXPECT_FALSE(admit1(lc, c, T + 1000).allowed);
  EXPECT_TRUE(admit1(lc, c, T + 1200).allowed);
}

// ---------------------------------------------------------------------------------------
// Reading a quota counter (the reconciliation report's memory side)

TEST(LocalQuota, ReadsUsedAndReservedOfOnePeriod) {
  LocalCounters lc;
  const Check c = quota("q", 1000, 60'000, 100, 600'000);
  const std::string key = "q:" + std::to_string(T / 60'000);
  EXPECT_FALSE(lc.quota(key));  // never counted
  auto v1 = admit1(lc, c, T, "r1");
  auto v2 = admit1(lc, c, T + 1, "r2");
  ASSERT_TRUE(v1.allowed && v2.allowed);
  auto q = lc.quota(key);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->used, 0);
  EXPECT_EQ(q->reserved, 200);
  lc.settle(reserved_of(c, v1), "r1", 37, T + 2);
  q = lc.quota(key);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->used, 37);
  EXPECT_EQ(q->reserved, 100);
  EXPECT_FALSE(lc.quota("q:" + std::to_string(T / 60'000 - 1)));  // another period
}
