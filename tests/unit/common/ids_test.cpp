// Client request ids: only a safe set is taken as is (it is echoed into headers, JSON
// bodies and log lines without escaping); anything else is replaced by a generated id.
#include <gtest/gtest.h>

#include <string>

#include "common/ids.hpp"

namespace sluice {
namespace {

TEST(RequestId, AcceptsLettersDigitsAndSafePunctuation) {
  EXPECT_TRUE(valid_request_id("abc-123"));
  EXPECT_TRUE(valid_request_id("ABC_def.ghi:42"));
  EXPECT_TRUE(valid_request_id("0123456789abcdef0123456789abcdef"));
  EXPECT_TRUE(valid_request_id(std::string(128, 'a')));
  EXPECT_TRUE(valid_request_id(new_request_id()));
}

TEST(RequestId, RefusesCharactersThatNeedEscaping) {
  EXPECT_FALSE(valid_request_id(""));
  EXPECT_FALSE(valid_request_id(std::string(129, 'a')));
  for (std::string bad : {"a\"b", "a\\b", "a b", "a\tb", "a/b", "a<b>", "a'b", "a{b}", "a,b", "a;b", "a=b",
                          "a%22b", "a+b", "\xc3\xa9t\xc3\xa9"}) {
    EXPECT_FALSE(valid_request_id(bad)) << bad;
  }
  EXPECT_FALSE(valid_request_id(std::string("a\0b", 3)));
  EXPECT_FALSE(valid_request_id("a\x7f"));
}

}  // namespace
}  // namespace sluice
