// The adaptive in-flight limit (src/upstream/adaptive.hpp): it shrinks by a quarter while
// the TTFT's p90 is above target, grows by one while under and reached, stays within
// [min, ceiling], and judges nothing on too few samples.
#include <gtest/gtest.h>

#include "upstream/adaptive.hpp"

using sluice::upstream::AdaptiveConcurrency;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  AdaptiveConcurrency a;
  AdaptiveConcurrency::Clock::time_point t = AdaptiveConcurrency::Clock::now();
  Fixture(int min = 2, int ceiling = 16) { a.configure(500ms, min, ceiling, 1s, t); }
  // One period with n requests of `ttft` ms, `peak` in flight at most; whether it changed.
  bool period(int n, double ttft, std::int64_t peak) {
    for (int i = 0; i < n; ++i) a.observe(ttft);
    a.started(peak);
    t += 1s;
    return a.tick(t, 0);
  }
};

}  // namespace

TEST(AdaptiveConcurrency, OffWithoutATarget) {
  AdaptiveConcurrency a;
  EXPECT_FALSE(a.on());
  EXPECT_EQ(a.limit(), 0);
  a.observe(10);
  EXPECT_FALSE(a.tick(AdaptiveConcurrency::Clock::now() + 1h, 5));
}

TEST(AdaptiveConcurrency, ShrinksByAQuarterWhileSlowDownToMin) {
  Fixture f;
  EXPECT_EQ(f.a.limit(), 16) << "starts at the ceiling";
  EXPECT_TRUE(f.period(10, 900, 16));
  EXPECT_EQ(f.a.limit(), 12);
  EXPECT_TRUE(f.period(10, 900, 12));
  EXPECT_EQ(f.a.limit(), 9);
  for (int i = 0; i < 10; ++i) f.period(10, 900, 9);
  EXPECT_EQ(f.a.limit(), 2) << "not below min";
  EXPECT_FALSE(f.period(10, 900, 2));
  EXPECT_DOUBLE_EQ(f.a.snapshot().last_p90_ms, 900);
}

TEST(AdaptiveConcurrency, GrowsByOneOnlyWhenFastAndTheLimitWasReached) {
  Fixture f;
  f.period(10, 900, 16);
  ASSERT_EQ(f.a.limit(), 12);
  EXPECT_FALSE(f.period(10, 100, 5)) << "fast but far from the limit: nothing to learn";
  EXPECT_TRUE(f.period(10, 100, 12));
  EXPECT_EQ(f.a.limit(), 13);
  for (int i = 0; i < 10; ++i) f.period(10, 100, 100);
  EXPECT_EQ(f.a.limit(), 16) << "not above the ceiling";
  const auto s = f.a.snapshot();
  EXPECT_EQ(s.decreases, 1u);
  EXPECT_EQ(s.increases, 4u);
}

TEST(AdaptiveConcurrency, TheP90DecidesNotTheMeanOrTheWorst) {
  Fixture f;
  // 9 fast and 1 very slow: p90 is fast.
  for (int i = 0; i < 9; ++i) f.a.observe(100);
  f.a.observe(60'000);
  f.a.started(16);
  f.t += 1s;
  EXPECT_FALSE(f.a.tick(f.t, 0)) << "the one outlier is the worst 10 %";
  EXPECT_EQ(f.a.limit(), 16);
  // 8 fast and 2 slow: p90 is slow.
  for (int i = 0; i < 8; ++i) f.a.observe(100);
  f.a.observe(800);
  f.a.observe(800);
  f.t += 1s;
  EXPECT_TRUE(f.a.tick(f.t, 0));
  EXPECT_EQ(f.a.limit(), 12);
}

TEST(AdaptiveConcurrency, TooFewSamplesOrAnUnfinishedPeriodChangeNothing) {
  Fixture f;
  EXPECT_FALSE(f.period(4, 5000, 16)) << "4 samples: no judgement";
  EXPECT_EQ(f.a.limit(), 16);
  for (int i = 0; i < 10; ++i) f.a.observe(5000);
  EXPECT_FALSE(f.a.tick(f.t + 500ms, 0)) << "the period is not over";
  EXPECT_TRUE(f.a.tick(f.t + 1s, 0));
  EXPECT_EQ(f.a.limit(), 12);
  f.a.observe(-1);  // no TTFT (a failure): not a sample
}

TEST(AdaptiveConcurrency, ASmallLimitStillShrinksByOne) {
  Fixture f(1, 3);
  EXPECT_TRUE(f.period(10, 900, 3));
  EXPECT_EQ(f.a.limit(), 2);
  EXPECT_TRUE(f.period(10, 900, 2));
  EXPECT_EQ(f.a.limit(), 1);
}
