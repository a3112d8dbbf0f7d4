#include <gtest/gtest.h>

#include "common/ids.hpp"
#include "common/reason.hpp"
#include "common/text.hpp"

using namespace sluice;

TEST(MaskKey, KeepsPrefixAndLastFour) {
  EXPECT_EQ(mask_key("sk-prod-0123456789abcdef1a2b"), "sk-prod-***1a2b");
  EXPECT_EQ(mask_key("short"), "***");
  const std::string masked = mask_key("sk-abcdefghijklmnop");
  EXPECT_EQ(masked.find("abcdefghijkl"), std::string::npos);
}

TEST(JsonString, EscapesControlAndQuotes) {
  std::string out;
  append_json_string(out, "a\"b\\c\n\x01");
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001")");
}

TEST(ErrorBody, HasOpenAiShape) {
  EXPECT_EQ(error_body(Reason::model_not_found, "no such model", "model"),
            R"({"error":{"message":"no such model","type":"invalid_request_error","code":"model_not_found","param":"model"}})");
  EXPECT_EQ(http_status(Reason::body_too_large), 413);
  EXPECT_EQ(http_status(Reason::first_token_timeout), 504);
}

TEST(TraceParent, KeepsTraceIdAndMakesNewSpan) {
  const std::string in = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const std::string out = next_traceparent(in);
  TraceParent tp;
  ASSERT_TRUE(parse_traceparent(out, tp));
  EXPECT_EQ(tp.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_NE(tp.parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(tp.flags, "01");
  EXPECT_FALSE(parse_traceparent("garbage", tp));
  ASSERT_TRUE(parse_traceparent(next_traceparent(""), tp));
}

TEST(RequestId, ValidatesClientIds) {
  EXPECT_EQ(new_request_id().size(), 32u);
  EXPECT_NE(new_request_id(), new_request_id());
  EXPECT_TRUE(valid_request_id("abc-123"));
  EXPECT_FALSE(valid_request_id(""));
  EXPECT_FALSE(valid_request_id("has space"));
  EXPECT_FALSE(valid_request_id(std::string(129, 'a')));
}
