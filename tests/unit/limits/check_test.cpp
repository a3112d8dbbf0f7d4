// Calendar months, periods and the reset format of limits/check.hpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "limits/check.hpp"

using namespace sluice::limits;

namespace {

namespace chr = std::chrono;

constexpr std::int64_t kDay = 86'400'000;

// Unix ms of a UTC calendar instant, computed with <chrono> (independent of the code under test).
std::int64_t utc_ms(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0, int ms = 0) {
  const chr::sys_days day = chr::year{y} / chr::month{m} / chr::day{d};
  return chr::duration_cast<chr::milliseconds>(day.time_since_epoch()).count() +
         ((hh * 60 + mm) * 60 + ss) * 1000LL + ms;
}

// Month index expected by <chrono>: (year - 1970) * 12 + month - 1.
std::int64_t chrono_month(std::int64_t unix_ms) {
  const auto tp = chr::sys_time<chr::milliseconds>(chr::milliseconds(unix_ms));
  const chr::year_month_day ymd{chr::floor<chr::days>(tp)};
  return (static_cast<int>(ymd.year()) - 1970) * 12 + (static_cast<unsigned>(ymd.month()) - 1);
}

}  // namespace

TEST(MonthIndex, KnownDates) {
  EXPECT_EQ(month_index(0), 0);
  EXPECT_EQ(month_index(utc_ms(1970, 1, 31, 23, 59, 59, 999)), 0);
  EXPECT_EQ(month_index(utc_ms(1970, 2, 1)), 1);
  EXPECT_EQ(month_index(utc_ms(1970, 12, 31)), 11);
  EXPECT_EQ(month_index(utc_ms(1971, 1, 1)), 12);
  // Leap day, last millisecond: still February 2024.
  EXPECT_EQ(month_index(utc_ms(2024, 2, 29, 23, 59, 59, 999)), (2024 - 1970) * 12 + 1);
  EXPECT_EQ(month_index(utc_ms(2024, 3, 1)), (2024 - 1970) * 12 + 2);
  EXPECT_EQ(month_index(utc_ms(2026, 12, 31, 12)), (2026 - 1970) * 12 + 11);
  EXPECT_EQ(month_index(utc_ms(2027, 1, 1)), (2027 - 1970) * 12);
  // Century years: 2000 is a leap year, 2100 is not.
  EXPECT_EQ(month_index(utc_ms(2000, 2, 29, 12)), (2000 - 1970) * 12 + 1);
  EXPECT_EQ(month_index(utc_ms(2100, 2, 28, 23, 59, 59, 999)), (2100 - 1970) * 12 + 1);
  EXPECT_EQ(month_index(utc_ms(2100, 3, 1)), (2100 - 1970) * 12 + 2);
  // Literal values, independent of the helper.
  EXPECT_EQ(month_index(1709251199999LL), 649);  // 2024-02-29T23:59:59.999Z
  EXPECT_EQ(month_index(1709251200000LL), 650);  // 2024-03-01T00:00:00Z
}

TEST(MonthStart, KnownMonths) {
  EXPECT_EQ(month_start_ms(0), 0);
  EXPECT_EQ(month_start_ms(1), 31 * kDay);
  EXPECT_EQ(month_start_ms(2), (31 + 28) * kDay);  // 1970 is not a leap year
  EXPECT_EQ(month_start_ms(12), 365 * kDay);
  EXPECT_EQ(month_start_ms(650), 1709251200000LL);  // 2024-03-01
  EXPECT_EQ(month_start_ms(649), utc_ms(2024, 2, 1));
  EXPECT_EQ(month_start_ms(650) - month_start_ms(649), 29 * kDay);  // leap February
  EXPECT_EQ(month_start_ms((2023 - 1970) * 12 + 2) - month_start_ms((2023 - 1970) * 12 + 1), 28 * kDay);
  EXPECT_EQ(month_start_ms((2100 - 1970) * 12 + 2) - month_start_ms((2100 - 1970) * 12 + 1), 28 * kDay);
  EXPECT_EQ(month_start_ms((2000 - 1970) * 12 + 2) - month_start_ms((2000 - 1970) * 12 + 1), 29 * kDay);
  EXPECT_EQ(month_start_ms((2026 - 1970) * 12 + 11), utc_ms(2026, 12, 1));
  EXPECT_EQ(month_start_ms((2027 - 1970) * 12), utc_ms(2027, 1, 1));
}

TEST(MonthStart, EveryMonthTo2200MatchesChrono) {
  for (int y = 1970; y <= 2200; ++y) {
    for (unsigned m = 1; m <= 12; ++m) {
      const std::int64_t idx = (y - 1970) * 12 + (m - 1);
      ASSERT_EQ(month_start_ms(idx), utc_ms(y, m, 1)) << y << "-" << m;
      ASSERT_EQ(month_index(utc_ms(y, m, 1)), idx) << y << "-" << m;
      ASSERT_EQ(month_index(utc_ms(y, m, 1) - 1), idx - 1) << y << "-" << m;
    }
  }
}

TEST(MonthIndex, RandomInstantsFallInTheirMonth) {
  std::mt19937_64 rng(12345);
  const std::int64_t hi = utc_ms(2200, 12, 31, 23, 59, 59, 999);
  std::uniform_int_distribution<std::int64_t> dist(0, hi);
  for (int i = 0; i < 200000; ++i) {
    const std::int64_t x = dist(rng);
    const std::int64_t m = month_index(x);
    ASSERT_EQ(m, chrono_month(x)) << x;
    ASSERT_LE(month_start_ms(m), x) << x;
    ASSERT_LT(x, month_start_ms(m + 1)) << x;
  }
}

TEST(MonthIndex, MonthBoundariesAndDayBoundaries) {
  // The last and first millisecond around every month boundary from 1970 to 2200.
  for (std::int64_t m = 1; m <= (2200 - 1970) * 12; ++m) {
    const std::int64_t s = month_start_ms(m);
    ASSERT_EQ(month_index(s), m);
    ASSERT_EQ(month_index(s - 1), m - 1);
    ASSERT_EQ(month_index(s + kDay - 1), m);
    ASSERT_EQ(s % kDay, 0);
  }
}

TEST(PeriodOf, FixedWindowsAlignToEpoch) {
  Check c;
  c.kind = Kind::fixed_window;
  c.window_ms = 60'000;
  EXPECT_EQ(period_of(c, 0).index, 0);
  EXPECT_EQ(period_of(c, 0).ends_ms, 60'000);
  EXPECT_EQ(period_of(c, 59'999).index, 0);
  EXPECT_EQ(period_of(c, 60'000).index, 1);
  EXPECT_EQ(period_of(c, 60'000).ends_ms, 120'000);
  const std::int64_t t = 1'700'000'012'345LL;
  EXPECT_EQ(period_of(c, t).index, t / 60'000);
  EXPECT_EQ(period_of(c, t).ends_ms, (t / 60'000 + 1) * 60'000);

  c.kind = Kind::sliding_window;
  c.window_ms = 1000;
  EXPECT_EQ(period_of(c, 2500).index, 2);
  EXPECT_EQ(period_of(c, 2500).ends_ms, 3000);

  c.kind = Kind::quota;
  c.window_ms = 3'600'000;
  EXPECT_EQ(period_of(c, 7'200'000).index, 2);
  EXPECT_EQ(period_of(c, 7'200'000).ends_ms, 10'800'000);
}

TEST(PeriodOf, QuotaWithZeroWindowIsTheCalendarMonth) {
  Check c;
  c.kind = Kind::quota;
  c.window_ms = 0;
  const std::int64_t t = utc_ms(2024, 2, 29, 23, 59, 59, 999);
  EXPECT_EQ(period_of(c, t).index, 649);
  EXPECT_EQ(period_of(c, t).ends_ms, utc_ms(2024, 3, 1));
  EXPECT_EQ(period_of(c, t + 1).index, 650);
  EXPECT_EQ(period_of(c, t + 1).ends_ms, utc_ms(2024, 4, 1));
  const std::int64_t dec = utc_ms(2026, 12, 15, 8);
  EXPECT_EQ(period_of(c, dec).index, (2026 - 1970) * 12 + 11);
  EXPECT_EQ(period_of(c, dec).ends_ms, utc_ms(2027, 1, 1));
}

TEST(PeriodOf, TokenBucketHasNoPeriod) {
  Check c;
  c.kind = Kind::token_bucket;
  c.window_ms = 60'000;
  EXPECT_EQ(period_of(c, 123'456).index, 0);
  EXPECT_EQ(period_of(c, 123'456).ends_ms, 0);
}

namespace sluice::limits {
namespace {

TEST(ResetFormatTest, OpenAIsDurationFormat) {
  EXPECT_EQ(format_reset(-5), "0ms");
  EXPECT_EQ(format_reset(0), "0ms");
  EXPECT_EQ(format_reset(20), "20ms");
  EXPECT_EQ(format_reset(999), "999ms");
  EXPECT_EQ(format_reset(1000), "1s");
  EXPECT_EQ(format_reset(1001), "2s");  // rounded up: never earlier than the real reset
  EXPECT_EQ(format_reset(59'000), "59s");
  EXPECT_EQ(format_reset(60'000), "1m0s");
  EXPECT_EQ(format_reset(360'000), "6m0s");
  EXPECT_EQ(format_reset(3'723'000), "1h2m3s");
  EXPECT_EQ(format_reset(86'400'000), "24h0m0s");
  const std::string longest = format_reset(INT64_MAX);
  EXPECT_EQ(longest, "2562047788015h12m56s");
  EXPECT_LE(longest.size(), kMaxResetChars);
  std::string s = "x: ";
  append_reset(s, 1500);
  EXPECT_EQ(s, "x: 2s");
}

}  // namespace
}  // namespace sluice::limits
