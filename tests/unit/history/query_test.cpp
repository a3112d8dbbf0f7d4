// Query strings of GET /history and GET /history/stats.
#include <gtest/gtest.h>

#include "history/history.hpp"

namespace sluice::history {
namespace {

std::string list_error(std::string_view qs) {
  std::string error;
  EXPECT_FALSE(parse_list_query(qs, error)) << qs;
  return error;
}
std::string stats_error(std::string_view qs) {
  std::string error;
  EXPECT_FALSE(parse_stats_query(qs, error, 1'800'000'000'000)) << qs;
  return error;
}

TEST(HistoryListQuery, DefaultsAndFilters) {
  std::string error;
  auto q = parse_list_query("", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->limit, 100);
  EXPECT_EQ(q->before_id, 0);
  EXPECT_EQ(q->model, "");

  q = parse_list_query("?model=llama%203.1%3A8b&key=team+a&tenant=acme&status=429&limit=1000&before_id=77", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->model, "llama 3.1:8b");
  EXPECT_EQ(q->key, "team a");
  EXPECT_EQ(q->tenant, "acme");
  EXPECT_EQ(q->status, 429);
  EXPECT_EQ(q->status_class, 0);
  EXPECT_EQ(q->limit, 1000);
  EXPECT_EQ(q->before_id, 77);

  q = parse_list_query("status=5xx&model=&&", error);  // empty values and parts: not given
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->status, 0);
  EXPECT_EQ(q->status_class, 5);
  EXPECT_EQ(q->model, "");
}

TEST(HistoryListQuery, TimesInSecondsMillisecondsAndIso8601) {
  std::string error;
  auto q = parse_list_query("since=1764446400&until=1764446400500", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, 1'764'446'400'000);
  EXPECT_EQ(q->until_ms, 1'764'446'400'500);

  q = parse_list_query("since=2025-11-29T20:00:00Z&until=2025-11-29T20:00:01.25Z", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, 1'764'446'400'000);
  EXPECT_EQ(q->until_ms, 1'764'446'401'250);

  q = parse_list_query("since=2024-02-29&until=2024-03-01T00:00:00.000Z", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, 1'709'164'800'000);
  EXPECT_EQ(q->until_ms, 1'709'251'200'000);
}

TEST(HistoryListQuery, BadValuesNameTheParameter) {
  EXPECT_NE(list_error("colour=red").find("unknown parameter \"colour\""), std::string::npos);
  EXPECT_NE(list_error("limit=0").find("limit:"), std::string::npos);
  EXPECT_NE(list_error("limit=1001").find("limit:"), std::string::npos);
  EXPECT_NE(list_error("limit=ten").find("limit:"), std::string::npos);
  EXPECT_NE(list_error("before_id=-3").find("before_id:"), std::string::npos);
  EXPECT_NE(list_error("status=600").find("status:"), std::string::npos);
  EXPECT_NE(list_error("status=6xx").find("status:"), std::string::npos);
  EXPECT_NE(list_error("since=yesterday").find("since:"), std::string::npos);
  EXPECT_NE(list_error("until=2025-02-30").find("until:"), std::string::npos);
  EXPECT_NE(list_error("until=2025-11-29T25:00:00Z").find("until:"), std::string::npos);
  EXPECT_NE(list_error("until=2025-11-29T20:00:00+01:00").find("until:"), std::string::npos);
  EXPECT_NE(list_error("since=200&until=100").find("since:"), std::string::npos);
  EXPECT_NE(list_error("model=a&model=b").find("model"), std::string::npos);
  EXPECT_NE(list_error("model=%zz").find("percent-encoding"), std::string::npos);
}

// A filter that is not UTF-8 once decoded is the client's mistake (400), not something to
// send to the database (which would refuse the query: a 503 and a lost connection).
TEST(HistoryListQuery, FiltersMustBeUtf8) {
  EXPECT_EQ(list_error("model=%FF"), "model: not valid UTF-8 once percent-decoded");
  EXPECT_EQ(list_error("key=a%C0%80"), "key: not valid UTF-8 once percent-decoded");  // overlong NUL
  EXPECT_EQ(list_error("tenant=%00"), "tenant: not valid UTF-8 once percent-decoded");
  EXPECT_EQ(stats_error("model=%ED%A0%80"), "model: not valid UTF-8 once percent-decoded");  // a surrogate
  std::string error;
  const auto q = parse_list_query("model=caf%C3%A9", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->model, "caf\xC3\xA9");
  // The client's bytes quoted in an error stay UTF-8 (the answer is JSON).
  EXPECT_TRUE(list_error("col\xFFur=1").starts_with("unknown parameter \"col\xEF\xBF\xBDur\" ("));
}

TEST(HistoryStatsQuery, WindowDefaultsToTheLastHour) {
  const std::int64_t now = 1'800'000'000'000;
  std::string error;
  auto q = parse_stats_query("", error, now);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->until_ms, now);
  EXPECT_EQ(q->since_ms, now - 3'600'000);
  EXPECT_EQ(q->group_by, "");

  q = parse_stats_query("window=15m&group_by=model&model=m&key=k&tenant=t", error, now);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, now - 900'000);
  EXPECT_EQ(q->group_by, "model");
  EXPECT_EQ(q->model, "m");
  EXPECT_EQ(q->key, "k");
  EXPECT_EQ(q->tenant, "t");

  q = parse_stats_query("window=7d&until=1700000000", error, now);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->until_ms, 1'700'000'000'000);
  EXPECT_EQ(q->since_ms, 1'700'000'000'000 - 7 * 86'400'000LL);

  q = parse_stats_query("since=2025-11-29T20:00:00Z&group_by=none", error, now);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, 1'764'446'400'000);
  EXPECT_EQ(q->until_ms, now);
  EXPECT_EQ(q->group_by, "");

  for (const char* g : {"tier", "tenant", "key", "provider", "backend", "status", "reason", "stream", "num_ctx",
                        "num_gpu", "num_batch", "temperature", "top_p", "max_tokens"}) {
    q = parse_stats_query(std::string("group_by=") + g, error, now);
    ASSERT_TRUE(q) << g << ": " << error;
    EXPECT_EQ(q->group_by, g);
  }
}

TEST(HistoryStatsQuery, BadValuesNameTheParameter) {
  const auto e = stats_error("group_by=colour");
  EXPECT_NE(e.find("group_by:"), std::string::npos);
  EXPECT_NE(e.find("num_ctx"), std::string::npos);  // lists what is allowed
  EXPECT_NE(stats_error("window=15x").find("window:"), std::string::npos);
  EXPECT_NE(stats_error("window=0h").find("window:"), std::string::npos);
  EXPECT_NE(stats_error("window=h").find("window:"), std::string::npos);
  EXPECT_NE(stats_error("window=1h&since=1700000000").find("window:"), std::string::npos);
  EXPECT_NE(stats_error("limit=5").find("unknown parameter \"limit\""), std::string::npos);
  EXPECT_NE(stats_error("since=1800000000001").find("since:"), std::string::npos);  // after now
}

}  // namespace
}  // namespace sluice::history

// Found by fuzz_history_query: a window whose number did not parse to the end still had
// its prefix multiplied by the unit (9223372036854775807 * 1000: signed overflow, a UBSan
// report in the sanitizer build) before the error was returned.
TEST(HistoryStatsQuery, BadHugeWindowIsRefusedWithoutOverflow) {
  std::string error;
  for (const char* qs : {"window=9223372036854775807xs", "window=9223372036854775807els", "window=9223372036854775807d"}) {
    SCOPED_TRACE(qs);
    error.clear();
    EXPECT_FALSE(sluice::history::parse_stats_query(qs, error, 1'800'000'000'000));
    EXPECT_NE(error.find("window"), std::string::npos) << error;
  }
}
