#include "upstream/balancer.hpp"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <thread>
#include <vector>

using namespace sluice::upstream;

TEST(Balancer, RoundRobinTakesTurnsAndSkipsWhatIsExcluded) {
  Balancer b(Policy::round_robin, {1, 1, 1});
  std::vector<int> seen;
  for (int k = 0; k < 6; ++k) seen.push_back(b.pick());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  const std::array<bool, 3> usable{true, false, true};
  for (int k = 0; k < 10; ++k) EXPECT_NE(b.pick(usable), 1);
  EXPECT_EQ(b.pick({}, 0b101), 1);    // tried 0 and 2
  EXPECT_EQ(b.pick(usable, 0b101), -1);  // nothing left
}

TEST(Balancer, SmoothWeightsHoldExactlyOverEachCycleWithoutBursts) {
  Balancer b(Policy::weighted, {5, 1, 1});
  std::vector<int> cycle;
  for (int k = 0; k < 7; ++k) cycle.push_back(b.pick());
  // nginx's example: a a b a c a a, never five in a row.
  EXPECT_EQ(cycle, (std::vector<int>{0, 0, 1, 0, 2, 0, 0}));
  std::map<int, int> n;
  for (int k = 0; k < 7000; ++k) ++n[b.pick()];
  EXPECT_EQ(n[0], 5000);
  EXPECT_EQ(n[1], 1000);
  EXPECT_EQ(n[2], 1000);
  // A member out of use: the others share by their weights.
  const std::array<bool, 3> usable{false, true, true};
  std::map<int, int> m;
  for (int k = 0; k < 100; ++k) ++m[b.pick(usable)];
  EXPECT_EQ(m[1], 50);
  EXPECT_EQ(m[2], 50);
  EXPECT_EQ(Balancer(Policy::weighted, {0, 0}).pick(), -1);  // weight 0: never
}

TEST(Balancer, LeastConnectionsSpreadsLongRequestsEvenly) {
  Balancer b(Policy::least_connections, {1, 1, 1});
  std::array<int, 3> open{};
  for (int k = 0; k < 30; ++k) {  // 30 long streams, none finished
    const int i = b.pick();
    b.started(i);
    ++open[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(open, (std::array<int, 3>{10, 10, 10}));
  // One finishes three: the next three go there.
  for (int k = 0; k < 3; ++k) b.finished(1);
  for (int k = 0; k < 3; ++k) {
    const int i = b.pick();
    EXPECT_EQ(i, 1);
    b.started(i);
  }
  // Weights scale the share: weight 2 holds twice as many.
  Balancer w(Policy::least_connections, {2, 1});
  std::array<int, 2> held{};
  for (int k = 0; k < 30; ++k) {
    const int i = w.pick();
    w.started(i);
    ++held[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(held, (std::array<int, 2>{20, 10}));
}

TEST(Balancer, LatencyPrefersTheFasterMemberButStillUsesTheOther) {
  Balancer b(Policy::latency, {1, 1}, 42);
  for (int k = 0; k < 20; ++k) {
    b.finished((b.started(0), 0), 400);  // slow
    b.finished((b.started(1), 1), 50);   // fast
  }
  EXPECT_NEAR(b.ttft_ewma_ms(0), 400, 1e-9);
  EXPECT_NEAR(b.ttft_ewma_ms(1), 50, 1e-9);
  // Two members: both are always the pair, the lighter wins while loads differ.
  std::array<int, 2> held{};
  for (int k = 0; k < 90; ++k) {
    const int i = b.pick();
    b.started(i);
    ++held[static_cast<std::size_t>(i)];
  }
  // Load = ewma x (in flight + 1): 400 x (a+1) vs 50 x (b+1) stays balanced near 1:8.
  EXPECT_GT(held[1], 70);
  EXPECT_GT(held[0], 5);
  // The EWMA follows: the slow one turns fast.
  for (int k = 0; k < 40; ++k) b.finished((b.started(0), 0), 10);
  EXPECT_LT(b.ttft_ewma_ms(0), 15);
}

TEST(Balancer, LatencyWithManyMembersPicksAmongTheUntried) {
  Balancer b(Policy::latency, {1, 1, 1, 1}, 7);
  std::map<int, int> n;
  for (int k = 0; k < 400; ++k) ++n[b.pick({}, 0b0011)];
  EXPECT_EQ(n.count(0) + n.count(1), 0u);
  EXPECT_GT(n[2], 100);
  EXPECT_GT(n[3], 100);
}

TEST(Balancer, CountsStayRightUnderConcurrentWorkers) {
  Balancer b(Policy::least_connections, {1, 1, 1, 1});
  auto work = [&] {
    for (int k = 0; k < 20000; ++k) {
      const int i = b.pick();
      b.started(i);
      b.finished(i, 5);
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.in_flight(i), 0);
}
