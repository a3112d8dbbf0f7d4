// The simulator's embeddings: the vectors' properties and the request/answer bodies.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/embeddings.hpp"
#include "vectors.hpp"

using namespace sluice;
using namespace sluice::sim;
using sluice::sim::testing::cosine;
using sluice::sim::testing::decode_float32_base64;
using sluice::sim::testing::norm;
namespace json = boost::json;

namespace {

constexpr const char* kCat = "the cat sat on the mat";
constexpr const char* kCatA = "the cat sat on a mat";
const std::vector<std::string> kUnrelated = {
    "stock markets fell sharply after the announcement",
    "quantum computers use qubits",
    "How do I reset my password?",
    "Paris is the capital of France",
};

EmbedRequest parse_ok(Api api, std::string_view body) {
  std::string err;
  auto r = parse_embed_request(api, body, err);
  EXPECT_TRUE(r.has_value()) << err << " for " << body;
  return r.value_or(EmbedRequest{});
}

std::string parse_error(Api api, std::string_view body) {
  std::string err;
  auto r = parse_embed_request(api, body, err);
  EXPECT_FALSE(r.has_value()) << "accepted " << body;
  EXPECT_FALSE(err.empty()) << body;
  return err;
}

}  // namespace

TEST(Embeddings, UnitVectorsOfTheAskedDimension) {
  for (int d : {1, 2, 8, 256, 1000, kMaxEmbeddingDimensions}) {
    auto v = embed_text(kCat, d);
    ASSERT_EQ(v.size(), static_cast<std::size_t>(d));
    EXPECT_NEAR(norm(v), 1.0, 1e-5) << d;
  }
  auto one = embed_text(kCat, 1);
  EXPECT_EQ(std::abs(one[0]), 1.0f);
}

TEST(Embeddings, Deterministic) {
  EXPECT_EQ(embed_text(kCat, 256), embed_text(kCat, 256));
  EXPECT_EQ(embed_text(kUnrelated[0], 64), embed_text(kUnrelated[0], 64));
  // Case and punctuation do not matter; words do.
  EXPECT_EQ(embed_text("The Cat sat on the mat!", 256), embed_text(kCat, 256));
  EXPECT_EQ(embed_text("  the   cat, sat; on the mat ", 256), embed_text(kCat, 256));
  EXPECT_NE(embed_text(kCat, 256), embed_text(kCatA, 256));
  // Pinned (computed independently): a change of the hashing or weights changes every
  // vector a test elsewhere may have recorded.
  EXPECT_EQ(float32_base64(embed_text("hello", 4)), "AAAAALJfmj6yX5o+i49nvw==");
  EXPECT_EQ(float32_base64(embed_text(kCat, 8)), "FuFOPhbhzj0W4U6+AAAAANAoG78AAAAAFuFOvvMENb8=");
}

TEST(Embeddings, SimilarTextsAreNearUnrelatedAreFar) {
  for (int d : {256, 1024}) {
    const auto cat = embed_text(kCat, d);
    const double near = cosine(cat, embed_text(kCatA, d));
    std::printf("[ cosine  ] d=%d '%s' ~ '%s': %.4f\n", d, kCat, kCatA, near);
    EXPECT_GT(near, 0.8) << d;
    for (const auto& u : kUnrelated) {
      const double far = cosine(cat, embed_text(u, d));
      std::printf("[ cosine  ] d=%d '%s' ~ '%s': %.4f\n", d, kCat, u.c_str(), far);
      EXPECT_LT(far, 0.3) << d << " " << u;
      EXPECT_GT(far, -0.3) << d << " " << u;
    }
    // Sharing only function words ("the ... the") and the sentence's shape: in between
    // (hash collisions in 256 dimensions add about +/-0.1 either way).
    const char* kShape = "the dog ran in the park";
    const double shape = cosine(cat, embed_text(kShape, d));
    std::printf("[ cosine  ] d=%d '%s' ~ '%s': %.4f\n", d, kCat, kShape, shape);
    EXPECT_LT(shape, near - 0.3) << d;
  }
  // Shared word pieces count: a paraphrase is nearer than an unrelated text.
  const auto pw = embed_text("How do I reset my password?", 256);
  EXPECT_GT(cosine(pw, embed_text("how can I reset my password", 256)), 0.8);
  EXPECT_LT(cosine(pw, embed_text(kUnrelated[3], 256)), 0.3);
}

TEST(Embeddings, TextWithoutWordsStillHasAUnitVector) {
  auto q = embed_text("???", 256);
  EXPECT_NEAR(norm(q), 1.0, 1e-6);
  EXPECT_NE(q, embed_text("!!!", 256));  // one feature each: in 16 dimensions they happen to meet
  EXPECT_NEAR(norm(embed_text("   ", 16)), 1.0, 1e-6);
  // UTF-8 bytes form words.
  EXPECT_GT(cosine(embed_text("über straße", 256), embed_text("Über straße!", 256)), 0.6);
}

TEST(Embeddings, TokenIdsHashAsWords) {
  const std::vector<std::int64_t> a{1, 2, 3, 4, 5}, b{1, 2, 3, 4, 6}, c{700, 800, 900};
  EXPECT_EQ(embed_tokens(a, 256), embed_tokens(a, 256));
  EXPECT_NEAR(norm(embed_tokens(a, 256)), 1.0, 1e-6);
  EXPECT_GT(cosine(embed_tokens(a, 256), embed_tokens(b, 256)), 0.6);
  EXPECT_LT(std::abs(cosine(embed_tokens(a, 256), embed_tokens(c, 256))), 0.3);
}

TEST(Embeddings, Base64IsLittleEndianFloat32) {
  EXPECT_EQ(float32_base64(std::vector<float>{1.0f}), "AACAPw==");
  EXPECT_EQ(float32_base64(std::vector<float>{1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(float32_base64(std::vector<float>{0.5f, 0.25f, -0.125f}), "AAAAPwAAgD4AAAC+");
  EXPECT_EQ(float32_base64(std::vector<float>{}), "");
  const auto v = embed_text(kCat, 256);
  EXPECT_EQ(decode_float32_base64(float32_base64(v)), v);
}

TEST(Embeddings, OpenAiInputShapes) {
  auto r = parse_ok(Api::openai, R"({"model":"e","input":"hello there, simulator"})");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_FALSE(r.inputs[0].is_tokens);
  EXPECT_EQ(r.inputs[0].text, "hello there, simulator");
  EXPECT_EQ(r.prompt_tokens, 5);  // 22 bytes / 4, as for chat prompts
  EXPECT_EQ(r.dimensions, kDefaultEmbeddingDimensions);
  EXPECT_FALSE(r.base64);
  EXPECT_EQ(r.model, "e");

  r = parse_ok(Api::openai, R"({"model":"e","input":["a","hello there, simulator"],"encoding_format":"base64","dimensions":64,"user":"u1"})");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.prompt_tokens, 1 + 5);  // at least 1 per text
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.dimensions, 64);

  r = parse_ok(Api::openai, R"({"model":"e","input":[1,2,3]})");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_TRUE(r.inputs[0].is_tokens);
  EXPECT_EQ(r.inputs[0].tokens, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(r.prompt_tokens, 3);

  r = parse_ok(Api::openai, R"({"model":"e","input":[[1,2],[3]],"encoding_format":"float","dimensions":null})");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1].tokens, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_FALSE(r.base64);
}

TEST(Embeddings, OpenAiBadRequests) {
  for (const char* body : {
           R"({"model":"e"})",
           R"({"model":"e","input":null})",
           R"({"model":"e","input":""})",
           R"({"model":"e","input":[]})",
           R"({"model":"e","input":[""]})",
           R"({"model":"e","input":["a",1]})",
           R"({"model":"e","input":[1,"a"]})",
           R"({"model":"e","input":[-1]})",
           R"({"model":"e","input":[1.5]})",
           R"({"model":"e","input":[[]]})",
           R"({"model":"e","input":[[1],["a"]]})",
           R"({"model":"e","input":{"text":"a"}})",
           R"({"model":"e","input":7})",
           R"({"input":"a"})",
           R"({"model":"","input":"a"})",
           R"({"model":"e","input":"a","dimensions":0})",
           R"({"model":"e","input":"a","dimensions":4097})",
           R"({"model":"e","input":"a","dimensions":"8"})",
           R"({"model":"e","input":"a","encoding_format":"hex"})",
           R"({"model":"e","input":"a","user":5})",
           "[]",
           "{nope",
       }) {
    parse_error(Api::openai, body);
  }
  EXPECT_EQ(parse_error(Api::openai, R"({"model":"e","input":"a","dimensions":5000})"),
            "'dimensions' must be an integer from 1 to 4096");
  std::string many = R"({"model":"e","input":[)";
  for (std::size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i ? ",\"x\"" : "\"x\"";
  parse_error(Api::openai, many + "]}");
}

TEST(Embeddings, OllamaInputShapes) {
  auto r = parse_ok(Api::ollama, R"({"model":"e","input":"hello there, simulator","truncate":true,"options":{"num_ctx":8},"keep_alive":"5m"})");
  EXPECT_EQ(r.api, Api::ollama);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.prompt_tokens, 5);
  r = parse_ok(Api::ollama, R"({"model":"e","input":["a","b"],"dimensions":32})");
  EXPECT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.dimensions, 32);
  // As Ollama: no input (or an empty one) is no embeddings, not an error; dimensions 0 is unset.
  EXPECT_TRUE(parse_ok(Api::ollama, R"({"model":"e"})").inputs.empty());
  EXPECT_TRUE(parse_ok(Api::ollama, R"({"model":"e","input":""})").inputs.empty());
  EXPECT_TRUE(parse_ok(Api::ollama, R"({"model":"e","input":[]})").inputs.empty());
  EXPECT_EQ(parse_ok(Api::ollama, R"({"model":"e","input":"a","dimensions":0})").dimensions,
            kDefaultEmbeddingDimensions);
}

TEST(Embeddings, OllamaBadRequests) {
  EXPECT_EQ(parse_error(Api::ollama, R"({"model":"e","input":5})"), "invalid input type");
  EXPECT_EQ(parse_error(Api::ollama, R"({"model":"e","input":["a",1]})"), "invalid input type");
  EXPECT_EQ(parse_error(Api::ollama, R"({"model":"e","input":[[1,2]]})"), "invalid input type");
  EXPECT_EQ(parse_error(Api::ollama, R"({"input":"a"})"), "model is required");
  parse_error(Api::ollama, R"({"model":"e","input":"a","truncate":"yes"})");
  parse_error(Api::ollama, R"({"model":"e","input":"a","options":[]})");
  parse_error(Api::ollama, R"({"model":"e","input":"a","dimensions":-1})");
  parse_error(Api::ollama, R"({"model":"e","input":"a","dimensions":9999})");
}

TEST(Embeddings, OpenAiBody) {
  auto r = parse_ok(Api::openai, R"({"model":"emb \"x\"","input":["the cat","a dog"],"dimensions":16})");
  std::vector<std::vector<float>> vs{embed(r.inputs[0], r.dimensions), embed(r.inputs[1], r.dimensions)};
  auto o = json::parse(openai_embeddings_body(r, vs)).as_object();
  EXPECT_EQ(o.at("object").as_string(), "list");
  EXPECT_EQ(o.at("model").as_string(), "emb \"x\"");
  auto& data = o.at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    auto& e = data[i].as_object();
    EXPECT_EQ(e.at("object").as_string(), "embedding");
    EXPECT_EQ(e.at("index").as_int64(), static_cast<std::int64_t>(i));
    auto& arr = e.at("embedding").as_array();
    ASSERT_EQ(arr.size(), 16u);
    for (std::size_t k = 0; k < 16; ++k)  // the printed number narrows back to the same float
      EXPECT_EQ(static_cast<float>(arr[k].to_number<double>()), vs[i][k]) << i << "," << k;
  }
  auto& u = o.at("usage").as_object();
  EXPECT_EQ(u.at("prompt_tokens").as_int64(), 2);
  EXPECT_EQ(u.at("total_tokens").as_int64(), 2);

  r.base64 = true;
  o = json::parse(openai_embeddings_body(r, vs)).as_object();
  EXPECT_EQ(decode_float32_base64(o.at("data").as_array()[1].as_object().at("embedding").as_string()), vs[1]);
}

TEST(Embeddings, OllamaBody) {
  auto r = parse_ok(Api::ollama, R"({"model":"nomic","input":["x y"],"dimensions":8})");
  std::vector<std::vector<float>> vs{embed(r.inputs[0], r.dimensions)};
  auto o = json::parse(ollama_embed_body(r, vs, 1234, 56)).as_object();
  EXPECT_EQ(o.at("model").as_string(), "nomic");
  ASSERT_EQ(o.at("embeddings").as_array().size(), 1u);
  EXPECT_EQ(o.at("embeddings").as_array()[0].as_array().size(), 8u);
  EXPECT_EQ(o.at("total_duration").as_int64(), 1234);
  EXPECT_EQ(o.at("load_duration").as_int64(), 56);
  EXPECT_EQ(o.at("prompt_eval_count").as_int64(), 1);
  // No inputs: an empty list.
  r.inputs.clear();
  r.prompt_tokens = 0;
  o = json::parse(ollama_embed_body(r, {}, 1, 0)).as_object();
  EXPECT_TRUE(o.at("embeddings").as_array().empty());
}
