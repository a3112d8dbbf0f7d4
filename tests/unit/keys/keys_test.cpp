#include "keys/keys.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <thread>

namespace sluice::keys {
namespace {

config::ApiKey key(std::string name, std::string secret, std::string tier = "standard") {
  config::ApiKey k;
  k.name = std::move(name);
  k.key = std::move(secret);
  k.tier = std::move(tier);
  k.models = {"*"};
  return k;
}

TEST(Hasher, IsHmacSha256) {
  // RFC 4231, test case 2 (a short key) and 6 (a key longer than the block: hashed first).
  EXPECT_EQ(Hasher("Jefe").hex("what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hasher(std::string(131, '\xaa')).hex("Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Hasher, ADifferentServerKeyGivesAnotherDigest) {
  EXPECT_NE(Hasher("a").hex("sk-secret-0000000000"), Hasher("b").hex("sk-secret-0000000000"));
  EXPECT_NE(Hasher().hex("x"), Hasher().hex("x")) << "without a server key, a random one";
}

TEST(KeySet, FindsByDigestAndName) {
  Hasher h("server");
  auto set = KeySet::from_config({key("a", "sk-aaaaaaaaaaaaaaaa", "gold"), key("b", "sk-bbbbbbbbbbbbbbbb")}, h,
                                 [](std::string_view t) { return t == "gold" ? 3 : -1; });
  const Entry* a = set->find(h.digest("sk-aaaaaaaaaaaaaaaa"), 0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->key.name, "a");
  EXPECT_EQ(a->metrics_tier, 3);
  EXPECT_EQ(a->masked, "sk-***aaaa");
  EXPECT_TRUE(a->from_config);
  EXPECT_EQ(set->find(h.digest("sk-aaaaaaaaaaaaaaab"), 0), nullptr);
  EXPECT_EQ(set->find(h.digest(""), 0), nullptr);
  EXPECT_EQ(set->find_name("b")->key.key, "sk-bbbbbbbbbbbbbbbb");
  EXPECT_EQ(set->find_name("c"), nullptr);
  EXPECT_EQ(set->size(), 2u);
}

TEST(Registry, AReaderSeesAnInstalledSetAndARequestKeepsItsOwn) {
  auto h = std::make_shared<Hasher>("server");
  Registry reg(KeySet::from_config({key("a", "sk-aaaaaaaaaaaaaaaa")}, *h), h);
  Registry::Reader reader(reg);
  Snapshot held = reader.find("sk-aaaaaaaaaaaaaaaa", 0);
  ASSERT_NE(held.entry, nullptr);
  reg.install(KeySet::from_config({key("b", "sk-bbbbbbbbbbbbbbbb")}, *h));
  EXPECT_EQ(reader.find("sk-aaaaaaaaaaaaaaaa", 0).entry, nullptr) << "revoked: refused at once";
  EXPECT_NE(reader.find("sk-bbbbbbbbbbbbbbbb", 0).entry, nullptr);
  EXPECT_EQ(held.entry->key.name, "a") << "the running request's key stays valid";
}

TEST(Registry, ReadersOnOtherThreadsSeeEveryInstall) {
  auto h = std::make_shared<Hasher>("server");
  Registry reg(KeySet::from_config({}, *h), h);
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  std::thread t([&] {
    Registry::Reader r(reg);
    while (!stop.load()) {
      if (r.find("sk-bbbbbbbbbbbbbbbb", 0).entry) seen.store(1);
    }
  });
  reg.install(KeySet::from_config({key("b", "sk-bbbbbbbbbbbbbbbb")}, *h));
  while (seen.load() == 0) std::this_thread::yield();
  stop.store(true);
  t.join();
  EXPECT_EQ(seen.load(), 1);
}

Stored stored(std::string name, const Hasher& h, std::string_view secret) {
  Stored s;
  s.key.name = std::move(name);
  s.key.tier = "standard";
  s.key.models = {"*"};
  s.masked = "sk-***" + std::string(secret.substr(secret.size() - 4));
  s.digest = h.digest(secret);
  return s;
}

TEST(KeySet, StoredKeysExpireDisableRotateAndYieldToTheFile) {
  Hasher h("server");
  std::vector<Stored> st;
  st.push_back(stored("live", h, "sk-live-000000000000"));
  st.push_back(stored("off", h, "sk-off-0000000000000"));
  st.back().enabled = false;
  st.push_back(stored("ends", h, "sk-ends-000000000000"));
  st.back().expires_ms = 1000;
  st.push_back(stored("rotated", h, "sk-new-0000000000000"));
  st.back().has_old = true;
  st.back().old_digest = h.digest("sk-old-0000000000000");
  st.back().old_until_ms = 500;
  st.push_back(stored("a", h, "sk-shadow-0000000000"));  // the file has a key named a
  std::vector<std::string> shadowed;
  auto set = KeySet::build({key("a", "sk-aaaaaaaaaaaaaaaa")}, st, h, {}, &shadowed);
  EXPECT_EQ(shadowed, std::vector<std::string>{"a"});
  EXPECT_EQ(set->find(h.digest("sk-shadow-0000000000"), 0), nullptr);
  EXPECT_TRUE(set->find_name("a")->from_config);
  ASSERT_NE(set->find(h.digest("sk-live-000000000000"), 0), nullptr);
  EXPECT_FALSE(set->find(h.digest("sk-live-000000000000"), 0)->from_config);
  EXPECT_EQ(set->find(h.digest("sk-off-0000000000000"), 0), nullptr) << "disabled";
  EXPECT_NE(set->find_name("off"), nullptr) << "but listed";
  EXPECT_NE(set->find(h.digest("sk-ends-000000000000"), 999), nullptr);
  EXPECT_EQ(set->find(h.digest("sk-ends-000000000000"), 1000), nullptr) << "expired";
  EXPECT_NE(set->find(h.digest("sk-new-0000000000000"), 10'000), nullptr);
  EXPECT_NE(set->find(h.digest("sk-old-0000000000000"), 499), nullptr) << "the old secret within its grace";
  EXPECT_EQ(set->find(h.digest("sk-old-0000000000000"), 500), nullptr) << "and not after";
}

TEST(Digest, ParsesLowerCaseHexOnly) {
  Hasher h("server");
  Digest d{};
  ASSERT_TRUE(parse_digest(h.hex("x"), d));
  EXPECT_EQ(d, h.digest("x"));
  EXPECT_FALSE(parse_digest("abc", d));
  EXPECT_FALSE(parse_digest(std::string(64, 'G'), d));
  std::string upper = h.hex("x");
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_FALSE(parse_digest(upper, d) && upper != h.hex("x"));
}

}  // namespace
}  // namespace sluice::keys
