#include "upstream/health.hpp"

#include <gtest/gtest.h>

#include "upstream/canary.hpp"
#include "upstream/window.hpp"

using namespace sluice::upstream;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
const Clock::time_point T0 = Clock::time_point(1000h);
}

TEST(Health, ProbesMarkUnhealthyAfterNFailuresAndHealthyAfterMSuccesses) {
  Health h({.unhealthy_after = 3, .healthy_after = 2, .eject_after = 0});
  auto t = T0;
  EXPECT_TRUE(h.usable(t));
  EXPECT_FALSE(h.probe_result(t += 1s, false, 5000, "timed out"));
  EXPECT_FALSE(h.probe_result(t += 1s, false, 5000, "timed out"));
  EXPECT_TRUE(h.usable(t));
  EXPECT_TRUE(h.probe_result(t += 1s, false, 5000, "timed out"));  // the third: verdict changes
  EXPECT_FALSE(h.usable(t));
  EXPECT_FALSE(h.probe_result(t += 1s, true, 20));  // one good probe is not enough
  EXPECT_FALSE(h.usable(t));
  EXPECT_TRUE(h.probe_result(t += 1s, true, 20));
  EXPECT_TRUE(h.usable(t));
  const auto s = h.snapshot(t);
  EXPECT_EQ(s.probes_failed, 3u);
  EXPECT_EQ(s.probes_ok, 2u);
  EXPECT_EQ(s.marked_unhealthy, 1u);
  EXPECT_EQ(s.marked_healthy, 1u);
  EXPECT_EQ(s.probe_streak, 2);
  EXPECT_EQ(s.last_probe_ms, 20);
}

TEST(Health, ConsecutiveRequestFailuresEjectForAWhile) {
  Health h({.eject_after = 3, .eject_for = 10s});
  auto t = T0;
  h.request_result(t, true);
  h.request_result(t, true);
  h.request_result(t, false);  // a success breaks the streak
  h.request_result(t, true);
  EXPECT_FALSE(h.request_result(t, true));
  EXPECT_TRUE(h.usable(t));
  EXPECT_TRUE(h.request_result(t, true));  // third in a row
  EXPECT_FALSE(h.usable(t));
  EXPECT_FALSE(h.usable(t + 9s));
  EXPECT_TRUE(h.usable(t + 10s));
  EXPECT_EQ(h.snapshot(t).ejections, 1u);
  EXPECT_TRUE(h.snapshot(t).ejected);
  EXPECT_GT(h.snapshot(t + 1s).ejected_for_ms, 8000);
}

TEST(Health, ASuccessfulRequestEndsAnEjection) {
  Health h({.eject_after = 1, .eject_for = 60s});
  EXPECT_TRUE(h.request_result(T0, true));
  EXPECT_FALSE(h.usable(T0 + 1s));
  EXPECT_FALSE(h.request_result(T0 + 2s, false));
  EXPECT_TRUE(h.usable(T0 + 2s));
}

TEST(Health, AGoodProbeEndsAnEjection) {
  Health h({.eject_after = 1, .eject_for = 60s});
  EXPECT_TRUE(h.request_result(T0, true));
  EXPECT_FALSE(h.usable(T0 + 1s));
  h.probe_result(T0 + 2s, true, 15);
  EXPECT_TRUE(h.usable(T0 + 2s));
}

TEST(SlidingWindow, P95IsTheBinOfThe95thPercentile) {
  SlidingWindow w(10s);
  for (int i = 0; i < 95; ++i) w.add(T0, false, 10);
  for (int i = 0; i < 5; ++i) w.add(T0, true, 1000);
  auto s = w.summary(T0);
  EXPECT_EQ(s.total, 100u);
  EXPECT_EQ(s.failed, 5u);
  EXPECT_NEAR(s.p95_ms, 10, 10 * 0.26);
  w.add(T0, false, 1000);  // now the 95th is in the slow bin
  EXPECT_NEAR(w.summary(T0).p95_ms, 1000, 1000 * 0.26);
  EXPECT_EQ(w.summary(T0 + 11s).total, 0u);  // all out of the window
}

TEST(CanaryJudge, RollsBackOnceWhenTheCanaryErrsMore) {
  CanaryJudge j({.window = 60s, .min_requests = 10, .max_error_rate_increase = 0.1, .max_ttft_ratio = 0});
  auto t = T0;
  for (int i = 0; i < 20; ++i) j.record(t += 10ms, false, i % 10 == 0, 100);  // stable: 10 % errors
  int triggered = 0;
  for (int i = 0; i < 9; ++i) triggered += j.record(t += 10ms, true, i % 3 == 0, 100);  // too few yet
  EXPECT_EQ(triggered, 0);
  EXPECT_FALSE(j.rolled_back());
  for (int i = 0; i < 10; ++i) triggered += j.record(t += 10ms, true, i % 3 == 0, 100);
  EXPECT_EQ(triggered, 1);
  EXPECT_TRUE(j.rolled_back());
  EXPECT_NE(j.reason().find("canary error rate"), std::string::npos) << j.reason();
}

TEST(CanaryJudge, RollsBackWhenTheCanaryIsSlowerButNotWhenItIsAsGood) {
  CanaryJudge good({.window = 60s, .min_requests = 10, .max_error_rate_increase = 0.1, .max_ttft_ratio = 2});
  CanaryJudge slow({.window = 60s, .min_requests = 10, .max_error_rate_increase = 0.1, .max_ttft_ratio = 2});
  auto t = T0;
  for (int i = 0; i < 30; ++i) {
    t += 10ms;
    good.record(t, false, false, 100);
    good.record(t, true, false, 120);
    slow.record(t, false, false, 100);
    slow.record(t, true, false, 400);
  }
  EXPECT_FALSE(good.rolled_back());
  EXPECT_TRUE(slow.rolled_back());
  EXPECT_NE(slow.reason().find("time to first token"), std::string::npos) << slow.reason();
}

TEST(SlidingWindow, RunningSumsMatchARecountOverManyRotations) {
  SlidingWindow w(10s);  // ten 1 s buckets
  struct Event {
    std::int64_t epoch;
    bool failed;
  };
  std::vector<Event> events;
  std::uint64_t x = 42;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  auto t = T0;
  for (int i = 0; i < 5000; ++i) {
    t += std::chrono::milliseconds(next() % 700);
    const bool failed = next() % 3 == 0;
    w.add(t, failed, 5);
    const auto epoch = t.time_since_epoch() / 1s;
    events.push_back({epoch, failed});
    std::uint64_t total = 0, bad = 0;
    for (const auto& e : events) {
      if (e.epoch > epoch - 10) {
        ++total;
        bad += e.failed;
      }
    }
    const auto s = w.summary(t);
    ASSERT_EQ(s.total, total) << "at step " << i;
    ASSERT_EQ(s.failed, bad) << "at step " << i;
    ASSERT_EQ(s.timed, total);
  }
}

TEST(SlidingWindow, AnOutcomeStampedAlittleEarlierKeepsTheNewerBucket) {
  SlidingWindow w(10s);
  w.add(T0 + 5s, false, 10);
  w.add(T0 + 4s, true, 10);  // its clock was read before the other's, its lock taken after
  const auto s = w.summary(T0 + 4s);
  EXPECT_EQ(s.total, 2u);
  EXPECT_EQ(s.failed, 1u);
}
