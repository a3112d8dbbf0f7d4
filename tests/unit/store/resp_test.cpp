// The RESP reader (store/resp.hpp) on its own: no server needed.
#include <gtest/gtest.h>

#include <string_view>

#include "store/resp.hpp"

using sluice::store::RedisReply;
using sluice::store::detail::RespReader;

namespace {

bool feed(RespReader& r, std::string_view s) { return r.feed(s.data(), s.size()); }

}  // namespace

TEST(RespReader, NestedArraysArriveWholeAcrossReads) {
  RespReader r;
  const std::string_view bytes = "*4\r\n:1\r\n*2\r\n$3\r\nfoo\r\n*1\r\n+ok\r\n$-1\r\n-ERR x\r\n+next\r\n";
  std::unique_ptr<RedisReply> reply;
  for (char c : bytes.substr(0, bytes.size() - 7)) {  // byte by byte, the last reply left out
    ASSERT_TRUE(r.feed(&c, 1));
  }
  ASSERT_TRUE(r.next(reply));
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->type, RedisReply::Type::array);
  ASSERT_EQ(reply->elements.size(), 4u);
  EXPECT_EQ(reply->elements[0].integer, 1);
  ASSERT_EQ(reply->elements[1].elements.size(), 2u);
  EXPECT_EQ(reply->elements[1].elements[0].str, "foo");
  ASSERT_EQ(reply->elements[1].elements[1].elements.size(), 1u);
  EXPECT_EQ(reply->elements[1].elements[1].elements[0].type, RedisReply::Type::status);
  EXPECT_EQ(reply->elements[2].type, RedisReply::Type::nil);
  EXPECT_EQ(reply->elements[3].type, RedisReply::Type::error);
  EXPECT_EQ(reply->elements[3].str, "ERR x");
  ASSERT_TRUE(r.next(reply));
  EXPECT_FALSE(reply);  // "+next" not complete yet
  ASSERT_TRUE(feed(r, bytes.substr(bytes.size() - 7)));
  ASSERT_TRUE(r.next(reply));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->str, "next");
}

// Found by fuzz_resp: an array header announcing two billion elements made the reader
// allocate them all at once (~150 GB: out of memory, the connection broken) before any
// arrived. Now the array grows as its elements come, and the reader simply waits.
TEST(RespReader, HugeArrayHeaderAllocatesNothingUpFront) {
  RespReader r;
  ASSERT_TRUE(feed(r, "*2000000000\r\n:1\r\n:2\r\n"));
  std::unique_ptr<RedisReply> reply;
  ASSERT_TRUE(r.next(reply)) << r.error();
  EXPECT_FALSE(reply);
}

TEST(RespReader, ProtocolErrorIsReported) {
  RespReader r;
  ASSERT_TRUE(feed(r, "?what\r\n"));
  std::unique_ptr<RedisReply> reply;
  EXPECT_FALSE(r.next(reply));
  EXPECT_FALSE(r.error().empty());
}
