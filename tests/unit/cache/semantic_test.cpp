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

TEST(SemanticSimHash, WordsHashIsTheWordsInOrder) {
  EXPECT_EQ(words_hash("What is the capital of France?"), words_hash("what is THE capital of france"));
  EXPECT_NE(words_hash("may work"), words_hash("may not work"));
  EXPECT_NE(words_hash("a b"), words_hash("b a"));
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
  const auto calls = req(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,)"
                        R"("tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"amount\":100}"}}]},)"
                        R"({"role":"tool","tool_call_id":"c","content":"42"}]})");
  EXPECT_EQ(semantic_text(calls, false), "");
  const std::string with = semantic_text(calls, true);
  EXPECT_NE(with.find("amount"), std::string::npos) << with;
  EXPECT_NE(with.find("tool(c): 42"), std::string::npos) << with;
  // Who speaks is compared too.
  EXPECT_EQ(semantic_text(req(R"({"messages":[{"role":"user","name":"alice","content":"hi"}]})"), false), "user(alice): hi");
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
  EXPECT_NE(p, partition_of(r, req(R"({"messages":[{"role":"user","name":"bob","content":"hi"}],"temperature":0,"max_tokens":5})"), "acme"))
      << "another speaker";
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
                           R"({"data":[{"embedding":[1]},{"embedding":[1]}]})", R"({"embeddings":[[1],[2]]})",
                           R"({"data":[{"embedding":[1e-45,1e-45,1e-45]}]})"}) {
    EXPECT_FALSE(read_embedding(junk)) << junk;
  }
}

TEST(SemanticStream, FieldsRoundTripAndJunkIsRefused) {
  Remembered r{.route = "gpt", .partition = kP, .scope = "acme", .hash = h('b'), .simhash = 0x0123456789abcdefULL,
               .words = 42, .vector = unit({1, 2, 3})};
  const auto f = encode_fields(r);
  auto back = decode_fields(f);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->route, "gpt");
  EXPECT_EQ(back->hash, h('b'));
  EXPECT_EQ(back->simhash, r.simhash);
  EXPECT_EQ(back->words, 42u);
  EXPECT_EQ(back->scope, "acme");
  EXPECT_EQ(back->vector, r.vector);
  auto broken = f;
  broken[9] = "xyz";  // the SimHash
  EXPECT_FALSE(decode_fields(broken));
  broken = f;
  broken[13] = "abc";  // not whole floats
  EXPECT_FALSE(decode_fields(broken));
  broken = f;
  broken[7] = "short";  // the hash
  EXPECT_FALSE(decode_fields(broken));
  EXPECT_FALSE(decode_fields(std::vector<std::string>{"r", "gpt"}));
}

TEST(SemanticIndex, FindsBySimHashAndByCosineWithinItsPartitionOnly) {
  SemanticIndex idx(100, 10);
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 0, 0}), 0.9));
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('1'), .simhash = 0xF0, .words = 0x11, .vector = unit({1, 0.1f, 0})}));
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('2'), .simhash = 0xFFFF0000, .words = 0x22, .vector = unit({0, 1, 0})}));
  EXPECT_FALSE(idx.add({.route = "r", .partition = kP, .hash = h('2'), .simhash = 0xFFFF0000, .words = 0x22, .vector = unit({0, 1, 0})}))
      << "known";
  EXPECT_EQ(idx.entries(), 2u);

  auto m = idx.nearest("r", kP, unit({1, 0, 0}), 0.9);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hash, h('1'));
  EXPECT_GT(m->similarity, 0.99);
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 1, 0}), 0.9)) << "between the two: under the threshold";
  EXPECT_FALSE(idx.nearest("r", std::string(64, 'c'), unit({1, 0, 0}), 0.5)) << "another partition";
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 0}), 0.5)) << "another length";

  // Distance 0: the same words (not merely the same SimHash).
  auto s = idx.by_simhash("r", kP, 0x1234, 0x11, 0, 0.92);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->hash, h('1'));
  EXPECT_TRUE(s->by_simhash);
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF0, 0x12, 0, 0.92)) << "the same SimHash, other words";
  // Near-duplicates, when asked for: within the bits and the threshold.
  s = idx.by_simhash("r", kP, 0xF1, 0x99, 3, 0.92);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->hash, h('1'));
  EXPECT_NEAR(s->similarity, 1 - 1 / 64.0, 1e-9);
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF1, 0x99, 3, 0.99)) << "1 bit: 0.984, under the threshold";
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xFF, 0x99, 3, 0.5)) << "4 bits away";
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF0, 0x11, -1, 0.5)) << "stage off";

  idx.forget("r", kP, h('1'));
  EXPECT_EQ(idx.entries(), 1u);
  EXPECT_FALSE(idx.by_simhash("r", kP, 0xF0, 0x11, 0, 0.5));
  m = idx.nearest("r", kP, unit({1, 0, 0}), 0.0);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hash, h('2')) << "the forgotten one is not found again";

  // Learnt again (from the fleet): found again.
  EXPECT_TRUE(idx.add({.route = "r", .partition = kP, .hash = h('1'), .simhash = 0xF0, .vector = unit({1, 0.1f, 0})}));
  EXPECT_EQ(idx.nearest("r", kP, unit({1, 0, 0}), 0.9)->hash, h('1'));
  // Forgotten by key alone (an operator's drop without a route).
  idx.forget("", "", h('2'));
  EXPECT_EQ(idx.entries(), 1u);
  EXPECT_EQ(idx.drop("r"), 1u);
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_EQ(idx.bytes(), 0u);
}

TEST(SemanticIndex, BoundedOldestFirstAndGrowsItsGraph) {
  SemanticIndex idx(200, 2);
  auto vec = [](int i) { return unit({std::cos(i * 0.01f), std::sin(i * 0.01f), 0.5f}); };
  auto hash = [](int i) {
    std::string s = std::to_string(i);
    return std::string(64 - s.size(), '0') + s;
  };
  for (int i = 0; i < 300; ++i) {
    idx.add({.route = "r", .partition = kP, .hash = hash(i), .simhash = std::uint64_t(i), .words = std::uint64_t(i), .vector = vec(i)});
  }
  EXPECT_EQ(idx.entries(), 200u);
  // The first 100 were replaced; the last 200 are found by their own vector.
  EXPECT_FALSE(idx.by_simhash("r", kP, 5, 5, 0, 0.9));
  for (int i : {100, 150, 299}) {
    auto m = idx.nearest("r", kP, vec(i), 0.9999);
    ASSERT_TRUE(m) << i;
    EXPECT_EQ(m->hash, hash(i));
  }
  // Partitions: the least recently used goes when a third comes.
  idx.add({.route = "r", .partition = std::string(64, 'b'), .hash = h('x'), .simhash = 1, .words = 1, .vector = {}});
  EXPECT_TRUE(idx.by_simhash("r", kP, 299, 299, 0, 0.9));  // (used now)
  idx.add({.route = "r", .partition = std::string(64, 'c'), .hash = h('y'), .simhash = 1, .words = 1, .vector = {}});
  EXPECT_EQ(idx.partitions(), 2u);
  EXPECT_FALSE(idx.by_simhash("r", std::string(64, 'b'), 1, 1, 0, 0.9));
  EXPECT_TRUE(idx.by_simhash("r", kP, 299, 299, 0, 0.9));
  EXPECT_EQ(idx.entries(), 201u);
}

TEST(SemanticIndex, OneTenantsPartitionsNeverPushOutAnothers) {
  SemanticIndex idx(10, 4);
  idx.add({.route = "r", .partition = std::string(64, 'a'), .scope = "acme", .hash = h('1'), .words = 1});
  for (char c : std::string("bcdefgh")) {
    idx.add({.route = "r", .partition = std::string(64, c), .scope = "globex", .hash = h(c), .words = 2});
  }
  EXPECT_EQ(idx.partitions(), 4u);
  EXPECT_TRUE(idx.by_simhash("r", std::string(64, 'a'), 0, 1, 0, 0.9)) << "acme's one partition stays";
  EXPECT_TRUE(idx.by_simhash("r", std::string(64, 'h'), 0, 2, 0, 0.9)) << "globex keeps its newest";
  EXPECT_FALSE(idx.by_simhash("r", std::string(64, 'b'), 0, 2, 0, 0.9)) << "and gave up its oldest";
}

TEST(SemanticIndex, BoundedInBytes) {
  // 256 floats a vector: about 1.2 KB an entry with the graph; 64 KiB hold a few dozen.
  SemanticIndex idx(1000, 1000, 64 << 10);
  std::vector<float> v(256, 0.0625f);
  for (int i = 0; i < 200; ++i) {
    std::string part = std::to_string(i);
    part = std::string(64 - part.size(), '0') + part;
    idx.add({.route = "r", .partition = part, .scope = "t", .hash = h('x'), .vector = v});
  }
  EXPECT_LE(idx.bytes(), std::size_t{64 << 10});
  EXPECT_GT(idx.partitions(), 0u);
  EXPECT_LT(idx.partitions(), 200u);
}

TEST(SemanticIndex, AnotherEmbeddingLengthStartsThePartitionsGraphAfresh) {
  SemanticIndex idx(10, 10);
  idx.add({.route = "r", .partition = kP, .hash = h('1'), .vector = unit({1, 0, 0})});
  idx.add({.route = "r", .partition = kP, .hash = h('2'), .vector = unit({1, 0, 0, 0})});
  EXPECT_FALSE(idx.nearest("r", kP, unit({1, 0, 0}), 0.5)) << "the old vectors are gone";
  auto m = idx.nearest("r", kP, unit({1, 0, 0, 0}), 0.5);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hash, h('2'));
}

TEST(SemanticIndex, InsertionsOnItsOwnThread) {
  SemanticIndex idx(100, 10);
  for (char c : std::string("123456")) idx.add_later({.route = "r", .partition = kP, .hash = h(c), .words = std::uint64_t(c)});
  idx.settle();
  EXPECT_EQ(idx.entries(), 6u);
  EXPECT_TRUE(idx.by_simhash("r", kP, 0, std::uint64_t('4'), 0, 0.9));
  EXPECT_EQ(idx.dropped(), 0u);
}
