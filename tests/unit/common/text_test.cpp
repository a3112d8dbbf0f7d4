#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

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

TEST(Utf8, SequencesAreMeasuredAndMalformedOnesRefused) {
  EXPECT_EQ(utf8_sequence_at("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_at("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_at("\xE2\x82\xAC", 0), 3u);      // €
  EXPECT_EQ(utf8_sequence_at("\xF0\x9F\x98\x80", 0), 4u);  // U+1F600
  EXPECT_EQ(utf8_sequence_at("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF, the last
  EXPECT_EQ(utf8_sequence_at(std::string_view("\0", 1), 0), 0u);
  EXPECT_EQ(utf8_sequence_at("\x80", 0), 0u);              // a stray continuation byte
  EXPECT_EQ(utf8_sequence_at("\xE2\x82", 0), 0u);          // cut short
  EXPECT_EQ(utf8_sequence_at("\xC0\x80", 0), 0u);          // overlong forms
  EXPECT_EQ(utf8_sequence_at("\xE0\x80\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_at("\xF0\x80\x80\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_at("\xED\xA0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(utf8_sequence_at("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence_at("\xFF", 0), 0u);
  EXPECT_EQ(utf8_sequence_at("a\xC3\xA9", 1), 2u);        // from the middle
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("caf\xC3\xA9 \xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(valid_utf8("caf\xC3"));
  EXPECT_FALSE(valid_utf8("ab\xFFcd"));
  std::string out = "<";
  append_clean_utf8(out, std::string_view("a\xC3\xA9\xFF\xE2\x82 \0z", 9));
  EXPECT_EQ(out, "<a\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBDz");  // each bad byte
}

TEST(JsonString, EscapesControlAndQuotes) {
  std::string out;
  append_json_string(out, "a\"b\\c\n\x01");
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001")");
}

// The length of the well-formed UTF-8 sequence at s[i] (0: none), decoded the long way:
// the code point's value, then the ranges (not overlong, no surrogate, up to U+10FFFF).
std::size_t reference_utf8_at(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n;
  std::uint32_t cp, min;
  if (c >= 0xF0 && c < 0xF8) n = 4, cp = c & 0x07, min = 0x10000;
  else if (c >= 0xE0 && c < 0xF0) n = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xC0 && c < 0xE0) n = 2, cp = c & 0x1F, min = 0x80;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// Byte by byte, as RFC 8259 says (and UTF-8: a byte that is not part of a well-formed
// sequence becomes U+FFFD): what append_json_string (which copies plain runs in bulk)
// must equal.
std::string reference_json_string(std::string_view s) {
  std::string o = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    char buf[8];
    if (c >= 0x80) {
      const std::size_t n = reference_utf8_at(s, i);
      if (n == 0) {
        o += "\xEF\xBF\xBD";
      } else {
        o.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o + "\"";
}

TEST(JsonString, EveryByteAtEveryPositionOfLongStrings) {
  // Each byte that needs escaping (and some that do not: the 0x1f/0x20 and 0x7f/0x80
  // edges, UTF-8) at each position of strings of several lengths, with a second one after
  // it: the plain runs before, between and after must be copied whole.
  const std::string plain = "The quick brown fox jumps over the lazy dog, caf\xc3\xa9 \xe2\x82\xac 0123456789";
  for (const int special : {0x00, 0x01, 0x08, 0x0a, 0x1f, 0x20, int{'"'}, int{'\\'}, 0x7f, 0x80, 0xff}) {
    for (std::size_t len : {15u, 16u, 17u, 31u, 32u, 33u, 47u, 64u}) {
      for (std::size_t at = 0; at < len; ++at) {
        std::string s = plain.substr(0, len);
        s[at] = static_cast<char>(special);
        if (at + 5 < len) s[at + 5] = '"';  // a second one in the same or the next block
        std::string out = "x";
        append_json_string(out, s);
        ASSERT_EQ(out, "x" + reference_json_string(s)) << "byte " << special << " at " << at << " of " << len;
      }
    }
  }
  std::string none;
  append_json_string(none, plain);
  EXPECT_EQ(none, reference_json_string(plain));
}

TEST(JsonString, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  std::string out;
  append_json_string(out, "/v1/\xFF\xFE" "caf\xC3\xA9 \xE2\x82");  // stray bytes, then a cut euro sign
  EXPECT_EQ(out, "\"/v1/\xEF\xBF\xBD\xEF\xBF\xBD" "caf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD\"");
  out.clear();
  append_json_string(out, "\xC0\x80\xED\xA0\x80\xF4\x90\x80\x80");  // overlong, surrogate, too high
  EXPECT_EQ(out.find("\xC0"), std::string::npos);
  EXPECT_EQ(out.find("\xED"), std::string::npos);
  EXPECT_EQ(out.find("\xF4"), std::string::npos);
  out.clear();
  append_json_string(out, "\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF");  // U+1F600 and U+10FFFF stay
  EXPECT_EQ(out, "\"\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\"");
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

TEST(Iso8601, MatchesGmtimeAcrossCalendarEdges) {
  auto reference = [](std::int64_t ms) {
    const std::int64_t sec = ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000);
    const std::time_t t = static_cast<std::time_t>(sec);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms - sec * 1000));
    return std::string(buf) + frac;
  };
  // The epoch, leap days (2000 is a leap year, 1900 and 2100 are not), year ends, the
  // last millisecond of a day, times before 1970, and a spread of ordinary times.
  std::vector<std::int64_t> times = {0,           1,          999,         1000,          -1,
                                     -86'400'000, 951'782'400'000, 951'868'799'999, 4'107'542'400'000,
                                     -2'203'891'200'000, 946'684'799'999, 1'714'566'896'789, 253'402'300'799'999};
  std::uint64_t x = 88172645463325252ULL;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    times.push_back(static_cast<std::int64_t>(x % 8'000'000'000'000ULL) - 1'000'000'000'000LL);
  }
  for (std::int64_t ms : times) {
    std::string s;
    append_iso8601(s, ms);
    ASSERT_EQ(s, reference(ms)) << ms;
  }
  // Beyond year 9999: the number itself.
  std::string big;
  append_iso8601(big, 253'402'300'800'000);
  EXPECT_EQ(big, "253402300800000");
}

TEST(RequestId, AppendedAndNewAreThirtyTwoHexDigits) {
  std::string s = "id=";
  append_request_id(s);
  ASSERT_EQ(s.size(), 35u);
  EXPECT_EQ(s.find_first_not_of("0123456789abcdef", 3), std::string::npos);
  EXPECT_NE(s.substr(3), new_request_id());
}

TEST(Base64, Rfc4648Vectors) {
  // RFC 4648 section 10.
  const std::pair<const char*, const char*> cases[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                       {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                       {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, want] : cases) {
    std::string out = "x";
    append_base64(out, in);
    EXPECT_EQ(out, std::string("x") + want) << in;
  }
  std::string bin;
  append_base64(bin, std::string_view("\xff\x00\xfe", 3));
  EXPECT_EQ(bin, "/wD+");
}
