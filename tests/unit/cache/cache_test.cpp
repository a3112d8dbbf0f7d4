// The response cache's keys and its memory layer (cache/cache.hpp); the Redis store and
// the filter are exercised end to end in tests/integration/cache.test.mjs.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <thread>

#include "cache/cache.hpp"
#include "cache/memory.hpp"
#include "llm/chat.hpp"

using namespace sluice;
using namespace sluice::cache;
namespace json = boost::json;

namespace {

llm::ChatRequest req(std::string_view body) {
  llm::ChatRequest r;
  r.body = json::parse(body).as_object();
  return r;
}

std::string hash(std::string_view body, std::string_view route = "r", std::string_view scope = "acme") {
  return key_of(req(body), route, scope).hash;
}

Entry entry(std::string text, std::int64_t ms = 0) { return Entry{.completion = std::move(text), .prompt_tokens = 1, .completion_tokens = 2, .stored_ms = ms}; }

}  // namespace

TEST(CacheKey, SameRequestSameKeyWhateverTheOrderAndDelivery) {
  const auto a = hash(R"({"model":"x","messages":[{"role":"user","content":"hi"}],"temperature":0})");
  EXPECT_TRUE(valid_hash(a));
  EXPECT_EQ(a, hash(R"({"temperature":0,"messages":[{"content":"hi","role":"user"}],"model":"y"})"));
  EXPECT_EQ(a, hash(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"stream":true,)"
                    R"("stream_options":{"include_usage":true},"user":"u","metadata":{"a":"b"},"store":true})"));
}

TEST(CacheKey, OneValueHoweverWritten) {
  EXPECT_EQ(hash(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0})"),
            hash(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":0.0})"));
  EXPECT_EQ(hash(R"({"messages":[],"max_tokens":5})"), hash(R"({"messages":[],"max_completion_tokens":5})"));
  EXPECT_NE(hash(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"!"}]}]})"),
            hash(R"({"messages":[{"role":"user","content":"hi!"}]})"));
  EXPECT_NE(hash(R"({"messages":[],"temperature":0.5})"), hash(R"({"messages":[],"temperature":0})"));
  EXPECT_NE(key_of(req(R"({"messages":[]})"), "r", "acme", "openai/a\n").hash,
            key_of(req(R"({"messages":[]})"), "r", "acme", "openai/b\n").hash)
      << "another backend model, another key";
}

TEST(CacheKey, WhatChangesTheAnswerChangesTheKey) {
  const std::string base = R"({"messages":[{"role":"user","content":"hi"}],"temperature":0)";
  const auto a = hash(base + "}");
  EXPECT_NE(a, hash(base + R"(,"n":2})"));
  EXPECT_NE(a, hash(base + R"(,"max_tokens":3})"));
  EXPECT_NE(a, hash(base + R"(,"logprobs":true})"));
  EXPECT_NE(a, hash(base + R"(,"tools":[]})"));
  EXPECT_NE(a, hash(R"({"messages":[{"role":"user","content":"hi!"}],"temperature":0})"));
  EXPECT_NE(a, hash(R"({"messages":[{"role":"system","content":"hi"}],"temperature":0})"));
  EXPECT_NE(a, hash(base + "}", "other-route"));
  EXPECT_NE(a, hash(base + "}", "r", "globex")) << "per tenant";
  EXPECT_NE(a, hash(base + "}", "r", "")) << "shared is its own scope";
  // Scope and route cannot run into each other.
  EXPECT_NE(hash(base + "}", "b", "a\nb"), hash(base + "}", "a\nb", "b"));
}

TEST(CacheKey, DeterministicMeansTemperatureZeroOrASeed) {
  EXPECT_TRUE(deterministic(req(R"({"temperature":0})")));
  EXPECT_TRUE(deterministic(req(R"({"temperature":0.0,"top_p":0.5})")));
  EXPECT_TRUE(deterministic(req(R"({"seed":42,"temperature":1})")));
  EXPECT_TRUE(deterministic(req(R"({"options":{"temperature":0}})")));
  EXPECT_TRUE(deterministic(req(R"({"options":{"seed":1}})")));
  EXPECT_FALSE(deterministic(req(R"({})")));
  EXPECT_FALSE(deterministic(req(R"({"temperature":0.2})")));
  EXPECT_FALSE(deterministic(req(R"({"seed":null})")));
}

TEST(CacheMemory, KeepsDropsAndEvictsTheLeastRecentlyUsed) {
  const std::size_t one = entry(std::string(100, 'x')).bytes() + 1 + 64;
  Cache::Memory m(3 * one);
  auto k = [](char c, std::string route = "r") { return Key{route, std::string(64, c)}; };
  m.put(k('a'), entry(std::string(100, 'x')), std::chrono::hours(1));
  m.put(k('b'), entry(std::string(100, 'x')), std::chrono::hours(1));
  m.put(k('c', "s"), entry(std::string(100, 'x')), std::chrono::hours(1));
  EXPECT_EQ(m.size(), 3u);
  ASSERT_TRUE(m.get(k('a').hash));  // a is now the most recent: b goes first
  m.put(k('d'), entry(std::string(100, 'x')), std::chrono::hours(1));
  EXPECT_FALSE(m.get(k('b').hash));
  EXPECT_TRUE(m.get(k('a').hash));
  EXPECT_LE(m.bytes(), 3 * one);
  // Too large for the whole layer: not kept.
  m.put(k('e'), entry(std::string(4 * one, 'x')), std::chrono::hours(1));
  EXPECT_FALSE(m.get(k('e').hash));
  // Listing: most recent first, per route.
  auto all = m.list("", 10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(m.list("s", 10).size(), 1u);
  EXPECT_EQ(m.list("", 1).size(), 1u);
  EXPECT_EQ(all[0].tokens, 3);
  // Drops: one (of another route: none), a route, all.
  EXPECT_EQ(m.drop("s", k('a').hash), 0u);
  EXPECT_EQ(m.drop("", k('a').hash), 1u);
  EXPECT_EQ(m.drop("s", ""), 1u);
  EXPECT_EQ(m.drop("", ""), 1u);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.bytes(), 0u);
}

TEST(CacheMemory, EntriesExpire) {
  Cache::Memory m(1 << 20);
  const Key k{"r", std::string(64, 'a')};
  m.put(k, entry("x"), std::chrono::milliseconds(30));
  EXPECT_TRUE(m.get(k.hash));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_FALSE(m.get(k.hash));
  EXPECT_TRUE(m.list("", 10).empty());
  m.put(k, entry("x"), std::chrono::milliseconds(0));
  EXPECT_FALSE(m.get(k.hash)) << "ttl 0 keeps nothing";
}
