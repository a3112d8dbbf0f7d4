// The semantic stage's parts (cache/semantic.hpp): SimHash, the text and partition a
// request is compared by, the embedding answer, the fleet's stream form and the index.
// End to end (the filter, an embedding route, Redis): tests/integration/semantic.test.mjs.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>

#include "cache/semantic.hpp"
#include "config/backend.hpp"
#include "config/models.hpp"
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

config::Route route(std::string alias = "r") {
  config::Route r;
  r.alias = std::move(alias);
  config::Backend b;
  b.provider = config::Provider::openai;
  b.model = "m";
  r.backends.push_back(b);
  return r;
}

std::vector<float> unit(std::vector<float> v) {
  double n = 0;
  for (float x : v) n += double(x) * x;
  for (float& x : v) x = static_cast<float>(x / std::sqrt(n));
  return v;
}

const std::string kP(64, 'a');
std::string h(char c) { return std::string(64, c); }

}  // namespace

TEST(SemanticSimHash, NormalisedTextIsOneHashAndOtherTextIsFar) {
  EXPECT_EQ(simhash("What is the capital of France?"), simhash("what is the CAPITAL of france"));
  EXPECT_EQ(hamming(simhash("a b c"), simhash("a  b\tc!")), 0);
  const std::string longer =
      "Explain in a few sentences how a transformer model uses attention to weigh the words of a sentence, "
      "with an example of a sentence and the words it attends to, for a reader new to machine learning";
  // One word more in a long prompt: a few bits; another question: many.
  EXPECT_LE(hamming(simhash(longer), simhash(longer + " please")), 8);
  EXPECT_GT(hamming(simhash(longer), simhash("How do I bake sourdough bread at home with a starter?")), 16);
}

TEST(SemanticSimHash, TextWithoutSpacesIsShingled) {
  // Chinese: one "word" to a tokenizer by spaces; shingles make a one-character change near.
  const std::string a = "请告诉我法国的首都是哪里，并简单介绍一下这座城市的历史和文化";
  const std::string b = "请告诉我法国的首都是哪里，并简单介绍一下这座城市的历史与文化";
  EXPECT_LT(hamming(simhash(a), simhash(b)), hamming(simhash(a), simhash("今天天气怎么样，适合出去散步吗")));
  EXPECT_NE(simhash(a), simhash(b));
}

TEST(SemanticText, TextOnlyAndNoToolsUnlessAsked) {
  EXPECT_EQ(semantic_text(req(R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]})"), false),
            "system: be brief\nuser: hi");
  EXPECT_EQ(semantic_text(req(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})"), false),
            "user: a\nuser: b");
  EXPECT_EQ(semantic_text(req(R"({"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},)"
                              R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]})"), true),
            "")
      << "an image: never";
  const auto tools = req(R"({"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(semantic_text(tools, false), "");
  EXPECT_EQ(semantic_text(tools, true), "user: hi");
  EXPECT_EQ(semantic_text(req(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,)"
                              R"("tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},)"
                              R"({"role":"tool","tool_call_id":"c","content":"42"}]})"), false),
            "");
}

TEST(SemanticPartition, EverythingButTheMessagesText) {
  const auto r = route();
  const auto p = partition_of(r, req(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"max_tokens":5})"), "acme");
  EXPECT_EQ(p.size(), 64u);
  EXPECT_EQ(p, partition_of(r, req(R"({"max_tokens":5,"messages":[{"role":"user","content":"hello there"}],"temperature":0})"), "acme"));
  EXPECT_NE(p, partition_of(r, req(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"max_tokens":6})"), "acme"));
  EXPECT_NE(p, partition_of(r, req(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"max_tokens":5})"), "globex"));
  EXPECT_NE(p, partition_of(r, req(R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],)"
                                   R"("temperature":0,"max_tokens":5})"), "acme"))
      << "another shape of conversation";
  EXPECT_NE(p, partition_of(route("other"), req(R"({"messages":[{"role":"user","content":"hi"}],"temperature":0,"max_tokens":5})"), "acme"));
}

TEST(SemanticEmbedding, CallAndAnswerForms) {
  EXPECT_EQ(embedding_target(config::Provider::openai, "/v1"), "/v1/embeddings");
  EXPECT_EQ(embedding_target(config::Provider::openai, ""), "/v1/embeddings");
  EXPECT_EQ(embedding_target(config::Provider::ollama, ""), "/api/embed");
  EXPECT_EQ(json::parse(embedding_body("m", "a \"b\"")), json::parse(R"({"model":"m","input":"a \"b\""})"));

  auto v = read_embedding(R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[3,4]}]})");
  ASSERT_TRUE(v);
  EXPECT_FLOAT_EQ((*v)[0], 0.6f);
  EXPECT_FLOAT_EQ((*v)[1], 0.8f);
  EXPECT_TRUE(read_embedding(R"({"embeddings":[[1,0,0]]})"));  // Ollama's /api/embed
  for (const char* junk : {"", "[]", "{}", R"({"data":[]})", R"({"data":[{"embedding":[0,0]}]})",
                           R"({"data":[{"embedding":[1,"x"]}]})", R"({"data":[{"embedding":[1e39]}]})",
                           R"({"data":[{"embedding":[1]},{"embedding":[1]}]})", R"({"embeddings":[[1],[2]]})"}) {
    EXPECT_FALSE(read_embedding(junk)) << junk;
  }
}

TEST(SemanticStream, FieldsRoundTripAndJunkIsRefused) {
  Remembered r{.route = "gpt", .partition = kP, .hash = h('b'), .simhash = 0x0123456789abcdefULL, .vector = unit({1, 2, 3})};
  const auto f = encode_fields(r);
  auto back = decode_fields(f);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->route, "gpt");
  EXPECT_EQ(back->hash, h('b'));
  EXPECT_EQ(back->simhash, r.simhash);
  EXPECT_EQ(back->vector, r.vector);
  auto broken = f;
  broken[7] = "xyz";  // the SimHash
  EXPECT_FALSE(decode_fields(broken));
  broken = f;
  broken[9] = "abc";  // not whole floats
  EXPECT_FALSE(decode_fields(broken));
  broken = f;
  broken[5] = "short";  // the hash
  EXPECT_FALSE(decode_fields(broken));
  EXPECT_FALSE(decode_fields(std::vector<std::string>{"r", "gpt"}));
}

TEST(SemanticIndex, FindsBySimHashAndByCosineWithinItsPartitionOnly) {
  SemanticIndex idx(100, 10);
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 0, 0}), 0.9));
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('1'), .simhash = 0xF0, .vector = unit({1, 0.1f, 0})}));
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('2'), .simhash = 0xFFFF0000, .vector = unit({0, 1, 0})}));
  EXPECT_FALSE(idx.add({.route = "r", .partition = kP, .hash = h('2'), .simhash = 0xFFFF0000, .vector = unit({0, 1, 0})}))
      << "known";
  EXPECT_EQ(idx.entries(), 2u);

  auto m = idx.nearest("r", kP, unit({1, 0, 0}), 0.9);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hash, h('1'));
  EXPECT_GT(m->similarity, 0.99);
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 1, 0}), 0.9)) << "between the two: under the threshold";
  EXPECT_FALSE(idx.nearest("r", std::string(64, 'c'), unit({1, 0, 0}), 0.5)) << "another partition";
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 0}), 0.5)) << "another length";

  auto s = idx.by_simhash("r", kP, 0xF1, 3);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->hash, h('1'));
  EXPECT_TRUE(s->by_simhash);
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xFF, 3)) << "4 bits away";
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF0, -1)) << "stage off";

  idx.forget("r", kP, h('1'));
  EXPECT_EQ(idx.entries(), 1u);
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF0, 0));
  m = idx.nearest("r", kP, unit({1, 0, 0}), 0.0);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hash, h('2')) << "the forgotten one is not found again";

  // Learnt again (from the fleet): found again.
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('1'), .simhash = 0xF0, .vector = unit({1, 0.1f, 0})}));
  EXPECT_EQ(idx.nearest("r", kP, unit({1, 0, 0}), 0.9)->hash, h('1'));
  EXPECT_EQ(idx.drop("r"), 2u);
  EXPECT_EQ(idx.entries(), 0u);
}

TEST(SemanticIndex, BoundedOldestFirstAndGrowsItsGraph) {
  SemanticIndex idx(200, 2);
  auto vec = [](int i) { return unit({std::cos(i * 0.01f), std::sin(i * 0.01f), 0.5f}); };
  auto hash = [](int i) {
    std::string s = std::to_string(i);
    return std::string(64 - s.size(), '0') + s;
  };
  for (int i = 0; i < 300; ++i) idx.add({.route = "r", .partition = kP, .hash = hash(i), .simhash = std::uint64_t(i), .vector = vec(i)});
  EXPECT_EQ(idx.entries(), 200u);
  // The first 100 were replaced; the last 200 are found by their own vector.
  EXPECT_FALSE(idx.by_simhash("r", kP, 5, 0));
  for (int i : {100, 150, 299}) {
    auto m = idx.nearest("r", kP, vec(i), 0.9999);
    ASSERT_TRUE(m) << i;
    EXPECT_EQ(m->hash, hash(i));
  }
  // Partitions: the least recently used goes when a third comes.
  idx.add({.route = "r", .partition = std::string(64, 'b'), .hash = h('x'), .simhash = 1, .vector = {}});
  EXPECT_TRUE(idx.by_simhash("r", kP, 299, 0));  // (used now)
  idx.add({.route = "r", .partition = std::string(64, 'c'), .hash = h('y'), .simhash = 1, .vector = {}});
  EXPECT_EQ(idx.partitions(), 2u);
  EXPECT_FALSE(idx.by_simhash("r", std::string(64, 'b'), 1, 0));
  EXPECT_TRUE(idx.by_simhash("r", kP, 299, 0));
  EXPECT_EQ(idx.entries(), 201u);
}
