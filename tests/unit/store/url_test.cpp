// parse_redis_url, describe and RedisScript: no server needed.
#include <gtest/gtest.h>

#include "store/redis.hpp"

using namespace sluice::store;

namespace {

RedisEndpoint parse_ok(std::string_view url) {
  std::string err;
  auto ep = parse_redis_url(url, &err);
  EXPECT_TRUE(ep.has_value()) << url << ": " << err;
  return ep.value_or(RedisEndpoint{});
}

std::string parse_error(std::string_view url) {
  std::string err;
  auto ep = parse_redis_url(url, &err);
  EXPECT_FALSE(ep.has_value()) << url << " was accepted";
  EXPECT_FALSE(err.empty()) << url;
  return err;
}

}  // namespace

TEST(RedisUrl, ParsesValidForms) {
  auto a = parse_ok("redis://localhost");
  EXPECT_EQ(a.host, "localhost");
  EXPECT_EQ(a.port, 6379);
  EXPECT_EQ(a.db, 0);
  EXPECT_TRUE(a.username.empty());
  EXPECT_TRUE(a.password.empty());
  EXPECT_FALSE(a.tls);

  auto b = parse_ok("redis://10.0.0.5:6380/2");
  EXPECT_EQ(b.host, "10.0.0.5");
  EXPECT_EQ(b.port, 6380);
  EXPECT_EQ(b.db, 2);

  auto c = parse_ok("redis://:s3cret@cache.internal");
  EXPECT_EQ(c.host, "cache.internal");
  EXPECT_TRUE(c.username.empty());
  EXPECT_EQ(c.password, "s3cret");

  auto d = parse_ok("redis://alice:p%40ss:w@rd@host:7000/15");  // '@' and ':' in the password
  EXPECT_EQ(d.username, "alice");
  EXPECT_EQ(d.password, "p@ss:w@rd");
  EXPECT_EQ(d.host, "host");
  EXPECT_EQ(d.port, 7000);
  EXPECT_EQ(d.db, 15);

  auto e = parse_ok("redis://[::1]:6390/1");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 6390);
  EXPECT_EQ(e.db, 1);

  auto f = parse_ok("REDIS://Host/");
  EXPECT_EQ(f.host, "Host");
  EXPECT_EQ(f.db, 0);

  EXPECT_EQ(parse_ok("redis://h:65535").port, 65535);
  EXPECT_EQ(parse_ok("redis://[fe80::1]").port, 6379);
}

TEST(RedisUrl, RejectsBadUrls) {
  for (auto url : {"redis://h:0", "redis://h:65536", "redis://h:abc", "redis://h:", "redis://h:-1",
                   "redis://h:99999999999999999999", "redis://[::1]:"}) {
    EXPECT_NE(parse_error(url).find("port"), std::string::npos) << url;
  }
  for (auto url : {"redis://h/x", "redis://h/-1", "redis://h/1x", "redis://h/99999999999"}) {
    EXPECT_NE(parse_error(url).find("database"), std::string::npos) << url;
  }
  EXPECT_NE(parse_error("rediss://h:6380").find("TLS"), std::string::npos);
  EXPECT_NE(parse_error("http://h").find("redis://"), std::string::npos);
  EXPECT_NE(parse_error("h:6379").find("redis://"), std::string::npos);
  EXPECT_NE(parse_error("redis://").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis://:pw@").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis://::1:6379").find("brackets"), std::string::npos);
  EXPECT_NE(parse_error("redis://user@h").find("password"), std::string::npos);
  EXPECT_NE(parse_error("redis://:p%zz@h").find("percent"), std::string::npos);
  EXPECT_NE(parse_error("redis://h?timeout=1").find("query"), std::string::npos);
  EXPECT_FALSE(parse_redis_url("rediss://h", nullptr).has_value());  // error text is optional
}

TEST(RedisUrl, Sentinel) {
  auto a = parse_ok("redis-sentinel://:pw@10.0.0.1,10.0.0.2:26380,[::1]:26381/mymaster/3");
  ASSERT_EQ(a.sentinels.size(), 3u);
  EXPECT_EQ(a.sentinels[0].host, "10.0.0.1");
  EXPECT_EQ(a.sentinels[0].port, 26379) << "the sentinels' default port";
  EXPECT_EQ(a.sentinels[1].port, 26380);
  EXPECT_EQ(a.sentinels[2].host, "::1");
  EXPECT_EQ(a.sentinels[2].port, 26381);
  EXPECT_EQ(a.master, "mymaster");
  EXPECT_EQ(a.db, 3);
  EXPECT_EQ(a.password, "pw");
  EXPECT_EQ(describe(a), "redis-sentinel://:***@10.0.0.1:26379,10.0.0.2:26380,[::1]:26381/mymaster/3");
  auto b = parse_ok("Redis-Sentinel://s1/m");
  EXPECT_EQ(b.master, "m");
  EXPECT_EQ(b.db, 0);
  EXPECT_TRUE(parse_ok("redis://h").sentinels.empty());
  EXPECT_NE(parse_error("redis-sentinel://s1").find("master name"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel://s1/").find("master name"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel:///m").find("sentinel host"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel://s1,/m").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel://s1,,s2/m").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel://s1:0/m").find("port"), std::string::npos);
  EXPECT_NE(parse_error("redis-sentinel://s1/m/x").find("database"), std::string::npos);
}

TEST(RedisUrl, DescribeMasksThePassword) {
  EXPECT_EQ(describe(parse_ok("redis://:s3cret@cache:6380/3")), "redis://:***@cache:6380/3");
  EXPECT_EQ(describe(parse_ok("redis://alice:s3cret@cache")), "redis://alice:***@cache:6379/0");
  EXPECT_EQ(describe(RedisEndpoint{}), "redis://127.0.0.1:6379/0");
  EXPECT_EQ(describe(parse_ok("redis://[::1]:7000")), "redis://[::1]:7000/0");
  EXPECT_EQ(describe(parse_ok("redis://alice:p%40ss@h")).find("p@ss"), std::string::npos);
}

TEST(RedisScript, Sha1IsHexOfTheSource) {
  // Known SHA1s: what SCRIPT LOAD answers for these sources.
  EXPECT_EQ(RedisScript("return 1").sha1, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  EXPECT_EQ(RedisScript("").sha1, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  EXPECT_EQ(RedisScript("return 1").source, "return 1");
}

TEST(RedisUrl, Cluster) {
  auto a = parse_ok("redis-cluster://u:pw@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_EQ(a.cluster.size(), 3u);
  EXPECT_EQ(a.cluster[0].host, "10.0.0.1");
  EXPECT_EQ(a.cluster[0].port, 7000);
  EXPECT_EQ(a.cluster[1].port, 6379) << "a node's default port";
  EXPECT_EQ(a.cluster[2].host, "::1");
  EXPECT_EQ(a.username, "u");
  EXPECT_EQ(a.password, "pw");
  EXPECT_TRUE(a.sentinels.empty());
  EXPECT_EQ(describe(a), "redis-cluster://u:***@10.0.0.1:7000,10.0.0.2:6379,[::1]:7002");
  EXPECT_EQ(parse_ok("redis-cluster://n1:7000/").cluster.size(), 1u);
  EXPECT_EQ(parse_ok("redis-cluster://n1:7000/0").db, 0);
  EXPECT_TRUE(parse_ok("redis://h").cluster.empty());
  EXPECT_NE(parse_error("redis-cluster://n1/3").find("database 0"), std::string::npos);
  EXPECT_NE(parse_error("redis-cluster://").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis-cluster://n1,").find("host"), std::string::npos);
  EXPECT_NE(parse_error("redis-cluster://n1:0").find("port"), std::string::npos);
  EXPECT_NE(parse_error("redis-clusters://n1").find("redis-cluster://"), std::string::npos);
}

TEST(RedisCluster, KeySlotIsCrc16OfTheHashTag) {
  // The Redis Cluster specification's examples, and what CLUSTER KEYSLOT answers.
  EXPECT_EQ(sluice::store::key_slot("123456789"), 0x31C3 & 16383);
  EXPECT_EQ(sluice::store::key_slot("foo"), 12182);
  EXPECT_EQ(sluice::store::key_slot("bar"), 5061);
  EXPECT_EQ(sluice::store::key_slot(""), 0);
  // The tag: between the first '{' and the next '}', when not empty.
  EXPECT_EQ(sluice::store::key_slot("{user1000}.following"), sluice::store::key_slot("{user1000}.followers"));
  EXPECT_EQ(sluice::store::key_slot("{user1000}.following"), sluice::store::key_slot("user1000"));
  EXPECT_EQ(sluice::store::key_slot("foo{bar}{zap}"), sluice::store::key_slot("bar"));
  EXPECT_EQ(sluice::store::key_slot("foo{{bar}}zap"), sluice::store::key_slot("{bar"));
  EXPECT_NE(sluice::store::key_slot("foo{}{bar}"), sluice::store::key_slot("bar")) << "an empty tag: the whole key";
  EXPECT_EQ(sluice::store::key_slot("sluice:{t:acme}:k:app:r0.fw.60000"), sluice::store::key_slot("t:acme"));
}
