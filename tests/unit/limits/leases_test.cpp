// The lease table: units and token leases taken from Redis in advance, admitted from
// locally, refilled before they run out, and their usage summed per lease for Redis.
#include "limits/leases.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace sluice::limits {
namespace {

using Clock = LeaseTable::Clock;
using std::chrono::milliseconds;

const std::string kReq = "t:{t:acme}:k:app:r0.fw.3600000";
const std::string kTok = "t:{t:acme}:k:app:q0.day";

Check request_check(std::int64_t lease) {
  Check c;
  c.kind = Kind::fixed_window;
  c.key = kReq;
  c.limit = 1'000'000;
  c.window_ms = 3'600'000;
  c.cost = 1;
  c.lease = lease;
  return c;
}

Check token_check(std::int64_t cost, std::int64_t lease) {
  Check c;
  c.kind = Kind::quota;
  c.tokens = true;
  c.key = kTok;
  c.limit = 1'000'000'000;
  c.window_ms = 86'400'000;
  c.cost = cost;
  c.lease = lease;
  return c;
}

// Redis's answer for a check that got `leased` more (remaining before the request).
CheckResult granted(std::int64_t leased, std::int64_t remaining = 900'000, std::int64_t period = 7) {
  return {remaining, 3'000'000, period, leased};
}

TEST(LeaseTableTest, NothingIsAdmittedWithoutALease) {
  LeaseTable t;
  Admission a;
  const std::vector<Check> checks{request_check(100)};
  EXPECT_FALSE(t.take(checks, a).ok);
  EXPECT_TRUE(a.reserved.empty());
  EXPECT_FALSE(a.requests.set);
}

TEST(LeaseTableTest, UnitsAdmitUntilTheyRunOut) {
  LeaseTable t;
  const std::vector<Check> checks{request_check(10)};
  t.add(checks[0], granted(10), Clock::now());
  int admitted = 0;
  for (int i = 0; i < 15; ++i) {
    Admission a;
    if (t.take(checks, a).ok) {
      ++admitted;
      EXPECT_TRUE(a.requests.set);
      EXPECT_EQ(a.requests.limit, 1'000'000);
    }
  }
  EXPECT_EQ(admitted, 10);
  EXPECT_EQ(t.units(kReq), 0);
}

TEST(LeaseTableTest, ARequestThatLeavesUnitsLowClaimsOneRefill) {
  LeaseTable t;
  const std::vector<Check> checks{request_check(10)};
  t.add(checks[0], granted(10), Clock::now());
  std::vector<std::uint32_t> refills;
  for (int i = 0; i < 8; ++i) {
    Admission a;
    auto taken = t.take(checks, a);
    ASSERT_TRUE(taken.ok);
    refills.push_back(taken.refill);
  }
  // 10 -> 9 ... 5 (not low), 4 (below half: claims), 3 and 2 (claimed already).
  EXPECT_EQ(refills, (std::vector<std::uint32_t>{0, 0, 0, 0, 0, 1, 0, 0}));
  // While the refill is out, no request asks for a lease of that counter.
  EXPECT_FALSE(t.claim(checks));
  // The refill's units join what is left of the same window.
  t.add(checks[0], granted(10), Clock::now());
  t.release(checks, 1);
  EXPECT_EQ(t.units(kReq), 12);
  EXPECT_TRUE(t.claim(checks));
}

TEST(LeaseTableTest, UnitsOfAnotherWindowReplaceTheOldOnes) {
  LeaseTable t;
  const Check c = request_check(10);
  t.add(c, granted(10, 900'000, 7), Clock::now());
  t.add(c, granted(4, 900'000, 8), Clock::now());
  EXPECT_EQ(t.units(kReq), 4);
}

TEST(LeaseTableTest, UnitsEndBeforeTheirWindow) {
  LeaseTable t;
  const std::vector<Check> checks{request_check(10)};
  const auto now = Clock::now();
  // The window ends in 100 ms: the units are good for 50.
  t.add(checks[0], CheckResult{900'000, 100, 7, 10}, now);
  Admission a;
  EXPECT_TRUE(t.take(checks, a, now + milliseconds(40)).ok);
  Admission b;
  EXPECT_FALSE(t.take(checks, b, now + milliseconds(60)).ok);
}

TEST(LeaseTableTest, TokenLeaseServesRequestsAndSumsTheirUsage) {
  LeaseTable t;
  const std::vector<Check> checks{token_check(100, 1000)};
  // The admitted request that brought the lease becomes its first user.
  Reserved first{kTok + ":7", 100, nullptr};
  t.add_quota(checks[0], granted(1000), "lease1", &first, Clock::now());
  ASSERT_NE(first.lease, nullptr);
  EXPECT_TRUE(first.key.empty());
  EXPECT_EQ(first.lease->size, 1100);
  EXPECT_EQ(t.quota_leases(), 1u);

  std::vector<Admission> served(4);
  for (auto& a : served) {
    auto taken = t.take(checks, a);
    ASSERT_TRUE(taken.ok);
    ASSERT_EQ(a.reserved.size(), 1u);
    EXPECT_EQ(a.reserved[0].lease, first.lease);
    EXPECT_EQ(a.reserved_tokens, 100);
  }
  // 1000 - 4 * 100 = 600 left: not below half of 1100 yet.
  t.settle(first, 30);
  for (auto& a : served) t.settle(a.reserved[0], 20);
  std::vector<LeaseTable::Pending> out;
  t.drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key, kTok + ":7");
  EXPECT_EQ(out[0].id, "lease1");
  EXPECT_EQ(out[0].size, 1100);
  EXPECT_EQ(out[0].actual, 30 + 4 * 20);
  EXPECT_FALSE(out[0].give_back);
  // Sent once: nothing more until new usage.
  out.clear();
  t.drain(out);
  EXPECT_TRUE(out.empty());
}

TEST(LeaseTableTest, ATokenLeaseRunningLowOrEndingClaimsANewOne) {
  LeaseTable t;
  const std::vector<Check> checks{token_check(100, 1000)};
  const auto now = Clock::now();
  t.add_quota(checks[0], granted(1000), "lease1", nullptr, now);
  std::vector<std::uint32_t> refills;
  for (int i = 0; i < 7; ++i) {
    Admission a;
    auto taken = t.take(checks, a, now);
    ASSERT_TRUE(taken.ok);
    refills.push_back(taken.refill);
  }
  // avail 900, 800 ... 500 (not below half of 1000), 400 (claims), 300 (claimed).
  EXPECT_EQ(refills, (std::vector<std::uint32_t>{0, 0, 0, 0, 0, 1, 0}));

  LeaseTable u;
  u.add_quota(checks[0], granted(1000), "lease2", nullptr, now);
  Admission early, late;
  EXPECT_EQ(u.take(checks, early, now).refill, 0u);
  // In the last quarter of its life a lease asks for its successor.
  EXPECT_EQ(u.take(checks, late, now + LeaseTable::kQuotaLeaseLife * 4 / 5).refill, 1u);
}

TEST(LeaseTableTest, ANewerLeaseRetiresTheOldOneWhichIsGivenBackOnceSettled) {
  LeaseTable t;
  const std::vector<Check> checks{token_check(100, 1000)};
  t.add_quota(checks[0], granted(1000), "old", nullptr, Clock::now());
  Admission a;
  ASSERT_TRUE(t.take(checks, a).ok);
  t.add_quota(checks[0], granted(1000), "new", nullptr, Clock::now());
  // Requests now draw on the new lease.
  Admission b;
  ASSERT_TRUE(t.take(checks, b).ok);
  EXPECT_NE(b.reserved[0].lease, a.reserved[0].lease);
  EXPECT_EQ(t.quota_leases(), 2u);
  // The old one's last request settles: it is given back with that usage.
  t.settle(a.reserved[0], 70);
  EXPECT_EQ(t.quota_leases(), 1u);
  std::vector<LeaseTable::Pending> out;
  t.drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, "old");
  EXPECT_TRUE(out[0].give_back);
  EXPECT_EQ(out[0].actual, 70);
  EXPECT_EQ(out[0].size, 1000);
}

TEST(LeaseTableTest, AnEndedLeaseIsGivenBackWhenIdle) {
  LeaseTable t;
  const std::vector<Check> checks{token_check(100, 1000)};
  const auto now = Clock::now();
  t.add_quota(checks[0], granted(1000), "l", nullptr, now);
  Admission a;
  ASSERT_TRUE(t.take(checks, a, now).ok);
  std::vector<LeaseTable::Pending> out;
  // Ended but a request still draws on it: kept.
  t.drain(out, now + LeaseTable::kQuotaLeaseLife + milliseconds(1));
  EXPECT_TRUE(out.empty());
  Admission b;
  EXPECT_FALSE(t.take(checks, b, now + LeaseTable::kQuotaLeaseLife + milliseconds(1)).ok);
  t.settle(a.reserved[0], 5);
  t.drain(out, now + LeaseTable::kQuotaLeaseLife + milliseconds(2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].give_back);
  EXPECT_EQ(out[0].actual, 5);
  EXPECT_FALSE(t.busy());
}

TEST(LeaseTableTest, ARequestIsAdmittedOnlyWhenEveryCheckHasItsShare) {
  LeaseTable t;
  const std::vector<Check> checks{request_check(10), token_check(100, 1000)};
  t.add(checks[0], granted(10), Clock::now());
  Admission a;
  EXPECT_FALSE(t.take(checks, a).ok);  // no token lease yet
  EXPECT_EQ(t.units(kReq), 10);        // nothing taken
  t.add_quota(checks[1], granted(150), "l", nullptr, Clock::now());
  Admission b;
  ASSERT_TRUE(t.take(checks, b).ok);
  EXPECT_TRUE(b.requests.set);
  EXPECT_TRUE(b.tokens.set);
  Admission c;
  EXPECT_FALSE(t.take(checks, c).ok);  // 50 tokens left, 100 needed
  EXPECT_EQ(t.units(kReq), 9);
}

TEST(LeaseTableTest, AChecksSlotAndItsKeyReachTheSameLeases) {
  LeaseTable t;
  Check by_key = request_check(10);
  Check by_slot = by_key;
  by_slot.slot = t.slot(kReq);
  EXPECT_EQ(t.slot(kReq), by_slot.slot);          // one slot per counter
  EXPECT_NE(t.slot(kTok), by_slot.slot);          // another counter, another slot
  t.add(by_key, granted(10), Clock::now());       // granted by key, taken by slot
  Admission a;
  ASSERT_TRUE(t.take(std::vector<Check>{by_slot}, a).ok);
  EXPECT_EQ(t.units(kReq), 9);
  // A token lease made through the slot is handed out to a check by key, and given back
  // (its slot cleared) once a newer one replaces it and its request settled.
  Check tok = token_check(100, 1000);
  Check tok_slot = tok;
  tok_slot.slot = t.slot(kTok);
  t.add_quota(tok_slot, granted(1000), "old", nullptr, Clock::now());
  Admission b;
  ASSERT_TRUE(t.take(std::vector<Check>{tok}, b).ok);
  t.add_quota(tok, granted(1000), "new", nullptr, Clock::now());
  t.settle(b.reserved[0], 40);
  std::vector<LeaseTable::Pending> out;
  t.drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, "old");
  EXPECT_TRUE(out[0].give_back);
  EXPECT_EQ(out[0].actual, 40);
  Admission c;
  ASSERT_TRUE(t.take(std::vector<Check>{tok_slot}, c).ok);
  EXPECT_EQ(c.reserved[0].lease->id, "new");
}

TEST(LeaseTable, AChangeFromASecondThreadIsCaughtInBuildsWithAssertions) {
#ifdef NDEBUG
  GTEST_SKIP() << "assertions are off in this build (the sanitizer build runs this test)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        LeaseTable t;
        t.slot("k:a");
        std::thread([&] { t.slot("k:b"); }).join();
      },
      "another thread");
  LeaseTable t;  // one thread only: no complaint
  t.slot("k:a");
  t.slot("k:b");
  EXPECT_EQ(t.units("k:a"), 0);
#endif
}

}  // namespace
// A reload changed the limits: units held admit nothing more, token leases are retired
// (given back once their requests settled), and new ones serve again.
TEST(LeaseTableTest, ForgetDropsUnitsAndRetiresTokenLeases) {
  LeaseTable t;
  const std::vector<Check> req{request_check(10)};
  const std::vector<Check> tok{token_check(100, 1000)};
  t.add(req[0], granted(10), Clock::now());
  t.add_quota(tok[0], granted(1000), "held", nullptr, Clock::now());
  t.add_quota(tok[0], granted(1000), "idle", nullptr, Clock::now());  // retires "held"
  Admission running;
  ASSERT_TRUE(t.take(tok, running).ok);  // draws on "idle"
  t.forget();
  Admission a;
  EXPECT_FALSE(t.take(req, a).ok) << "no unit left to admit on";
  EXPECT_EQ(t.units(kReq), 0);
  Admission b;
  EXPECT_FALSE(t.take(tok, b).ok) << "no lease hands out";
  std::vector<LeaseTable::Pending> out;
  t.drain(out);
  ASSERT_EQ(out.size(), 1u) << "the idle retired lease is given back";
  EXPECT_EQ(out[0].id, "held");
  EXPECT_TRUE(out[0].give_back);
  t.settle(running.reserved[0], 30);  // its last request settles: given back too
  out.clear();
  t.drain(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, "idle");
  EXPECT_EQ(out[0].actual, 30);
  EXPECT_FALSE(t.busy());
  t.add(req[0], granted(10), Clock::now());
  Admission c;
  EXPECT_TRUE(t.take(req, c).ok) << "units taken after the reload serve";
}

}  // namespace sluice::limits
