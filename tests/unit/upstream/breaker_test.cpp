#include "upstream/breaker.hpp"

#include <gtest/gtest.h>

using namespace sluice::upstream;
using namespace std::chrono_literals;
using Clock = Breaker::Clock;

namespace {
const Clock::time_point T0 = Clock::time_point(1000h);
}

TEST(Breaker, OpensOnTheErrorRateOnlyWithEnoughRequests) {
  Breaker b({.window = 10s, .min_requests = 10, .error_rate = 0.5, .open_for = 5s, .half_open_probes = 2});
  auto t = T0;
  for (int i = 0; i < 9; ++i) b.record(t += 100ms, true, 10);  // 9 failures: too few to judge
  EXPECT_EQ(b.state(t), Breaker::State::closed);
  b.record(t += 100ms, false, 10);  // 10 requests, 90 % failed
  EXPECT_EQ(b.state(t), Breaker::State::open);
  EXPECT_FALSE(b.allow(t));
  EXPECT_NE(b.last_reason().find("error rate 0.90 over 10 requests"), std::string::npos) << b.last_reason();
  EXPECT_EQ(b.counts().opened, 1u);
}

TEST(Breaker, OldFailuresLeaveTheWindow) {
  Breaker b({.window = 10s, .min_requests = 10, .error_rate = 0.5});
  auto t = T0;
  for (int i = 0; i < 6; ++i) b.record(t += 10ms, true, 10);
  t += 11s;  // those six are out of the window now
  for (int i = 0; i < 6; ++i) b.record(t += 10ms, false, 10);
  for (int i = 0; i < 4; ++i) b.record(t += 10ms, true, 10);  // 4 of 10: under the rate
  EXPECT_EQ(b.state(t), Breaker::State::closed);
}

TEST(Breaker, HalfOpenLetsProbesThroughThenClosesOrReopens) {
  Breaker b({.window = 10s, .min_requests = 4, .error_rate = 0.5, .open_for = 5s, .half_open_probes = 2});
  auto t = T0;
  for (int i = 0; i < 4; ++i) b.record(t += 10ms, true, 10);
  ASSERT_EQ(b.state(t), Breaker::State::open);
  EXPECT_FALSE(b.allow(t + 4s));
  t += 5s;
  EXPECT_EQ(b.state(t), Breaker::State::half_open);
  const auto p1 = b.allow(t);
  EXPECT_TRUE(p1);
  EXPECT_TRUE(p1.probe);
  EXPECT_TRUE(b.allow(t));
  EXPECT_FALSE(b.allow(t));  // only the probes
  b.record(t, false, 10);    // a request admitted before it opened: ignored
  EXPECT_EQ(b.state(t), Breaker::State::half_open);
  b.record(t, true, 10, p1);  // a probe fails: open again
  EXPECT_EQ(b.state(t), Breaker::State::open);
  EXPECT_EQ(b.counts().opened, 2u);
  t += 5s;
  const auto q1 = b.allow(t);
  const auto q2 = b.allow(t);
  ASSERT_TRUE(q1);
  ASSERT_TRUE(q2);
  b.record(t, false, 10, p1);  // a late outcome of the previous round: ignored
  b.record(t, false, 10, q1);
  EXPECT_EQ(b.state(t), Breaker::State::half_open);
  b.record(t, false, 10, q2);
  EXPECT_EQ(b.state(t), Breaker::State::closed);
  EXPECT_TRUE(b.allow(t));
  // A fresh window after closing: one failure does not reopen it.
  b.record(t += 1ms, true, 10);
  EXPECT_EQ(b.state(t), Breaker::State::closed);
  const auto c = b.counts();
  EXPECT_EQ(c.half_opened, 2u);
  EXPECT_EQ(c.closed, 1u);
}

TEST(Breaker, OpensWhenTheWindowsP95IsTooSlow) {
  Breaker b({.window = 10s, .min_requests = 20, .error_rate = 0.5, .p95_latency_ms = 1000, .open_for = 2s,
             .half_open_probes = 1});
  auto t = T0;
  for (int i = 0; i < 18; ++i) b.record(t += 10ms, false, 200);
  for (int i = 0; i < 2; ++i) b.record(t += 10ms, false, 3000);  // 2 of 20 slow: the P95 is one of them
  // (P95 of 20 is the 19th value: 3000 ms.)
  EXPECT_EQ(b.state(t), Breaker::State::open);
  EXPECT_NE(b.last_reason().find("p95"), std::string::npos) << b.last_reason();
  t += 2s;
  auto p = b.allow(t);
  ASSERT_TRUE(p);
  b.record(t, false, 2500, p);  // the probe succeeds but is slow: still open
  EXPECT_EQ(b.state(t), Breaker::State::open);
  t += 2s;
  p = b.allow(t);
  ASSERT_TRUE(p);
  b.record(t, false, 300, p);  // recovered
  EXPECT_EQ(b.state(t), Breaker::State::closed);
}

TEST(Breaker, AFastWindowStaysClosedAndLateOutcomesOfAnOpenBreakerAreIgnored) {
  Breaker b({.window = 10s, .min_requests = 20, .error_rate = 0.5, .p95_latency_ms = 1000});
  auto t = T0;
  for (int i = 0; i < 100; ++i) b.record(t += 10ms, false, i == 50 ? 5000 : 300);  // 1 % slow
  EXPECT_EQ(b.state(t), Breaker::State::closed);
  for (int i = 0; i < 100; ++i) b.record(t += 10ms, true, 10);
  ASSERT_EQ(b.state(t), Breaker::State::open);
  b.record(t, false, 10);  // a request that started before it opened
  EXPECT_EQ(b.state(t), Breaker::State::open);
  EXPECT_EQ(to_string(b.state(t)), "open");
}

TEST(Breaker, ALostHalfOpenProbeDoesNotHoldItHalfOpenForever) {
  Breaker b({.window = 10s, .min_requests = 2, .error_rate = 0.5, .open_for = 5s, .half_open_probes = 1});
  auto t = T0;
  b.record(t += 10ms, true, 10);
  b.record(t += 10ms, true, 10);
  ASSERT_EQ(b.state(t), Breaker::State::open);
  t += 5s;
  ASSERT_TRUE(b.allow(t));   // the probe, whose outcome never comes
  EXPECT_FALSE(b.allow(t + 1s));
  const auto p = b.allow(t + 5s);  // a new probe after open_for
  EXPECT_TRUE(p);
  b.record(t + 5s, false, 10, p);
  EXPECT_EQ(b.state(t + 5s), Breaker::State::closed);
}

TEST(Breaker, AReleasedProbeSlotGoesToTheNextRequest) {
  Breaker b({.window = 10s, .min_requests = 2, .error_rate = 0.5, .open_for = 5s, .half_open_probes = 1});
  auto t = T0;
  b.record(t += 10ms, true, 10);
  b.record(t += 10ms, true, 10);
  t += 5s;
  const auto p = b.allow(t);
  ASSERT_TRUE(p);
  EXPECT_FALSE(b.allow(t));
  b.release(p);  // its client left before an answer
  const auto q = b.allow(t);
  ASSERT_TRUE(q);
  b.record(t, false, 10, q);
  EXPECT_EQ(b.state(t), Breaker::State::closed);
}

// The article's P95 breaker: back only after the P95 stays under a lower threshold for a
// time, with a share of the requests let through meanwhile.
TEST(Breaker, RecoveryWithHysteresis) {
  Breaker b({.window = 10s, .min_requests = 5, .error_rate = 0, .p95_latency_ms = 1000, .open_for = 1s,
             .half_open_probes = 5, .recover_for = 10s, .p95_recover_ms = 500, .half_open_share = 0.25});
  auto t = T0;
  for (int i = 0; i < 5; ++i) b.record(t += 10ms, false, 1500);
  ASSERT_EQ(b.state(t), Breaker::State::open);
  t += 1100ms;
  ASSERT_EQ(b.state(t), Breaker::State::half_open);
  // A quarter of the requests go through.
  int passed = 0;
  std::vector<Breaker::Pass> passes;
  for (int i = 0; i < 40; ++i) {
    if (auto p = b.allow(t)) {
      ++passed;
      passes.push_back(p);
    }
  }
  EXPECT_EQ(passed, 10);
  // In the band (between 500 and 1000 ms): half-open, however long.
  for (int i = 0; i < 10; ++i) b.record(t += 2s, false, 800, passes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(b.state(t), Breaker::State::half_open);
  // Under 500 ms, but not yet for 10 s: still half-open (the 800s are in the last 10 s).
  auto more = [&](double ms, int n, std::chrono::milliseconds step) {
    for (int i = 0; i < n; ++i) {
      Breaker::Pass p;
      while (!(p = b.allow(t))) {}
      b.record(t += step, false, ms, p);
    }
  };
  more(300, 3, 1s);
  EXPECT_EQ(b.state(t), Breaker::State::half_open);
  // Ten seconds under 500 ms: closed.
  more(300, 12, 1s);
  EXPECT_EQ(b.state(t), Breaker::State::closed);
  EXPECT_EQ(b.counts().closed, 1u);
}

TEST(Breaker, RecoveringOpensAgainAboveTheUpperThresholdOrOnAFailure) {
  BreakerSettings s{.window = 10s, .min_requests = 5, .error_rate = 0, .p95_latency_ms = 1000, .open_for = 1s,
                    .half_open_probes = 3, .recover_for = 5s, .p95_recover_ms = 500, .half_open_share = 1};
  for (bool fail : {false, true}) {
    Breaker b(s);
    auto t = T0;
    for (int i = 0; i < 5; ++i) b.record(t += 10ms, false, 1500);
    t += 1100ms;
    for (int i = 0; i < 3; ++i) b.record(t += 100ms, fail, 2000, b.allow(t));
    EXPECT_EQ(b.state(t), Breaker::State::open) << (fail ? "a failure" : "slow");
    EXPECT_EQ(b.counts().opened, 2u);
  }
}
