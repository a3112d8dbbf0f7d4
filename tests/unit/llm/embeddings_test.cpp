// Embeddings as an internal request: the checks of OpenAI's CreateEmbeddingRequest, the
// token count, the calls per wire and the answers back in OpenAI's shape.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <cstring>
#include <string>

#include "config/config.hpp"
#include "llm/embeddings.hpp"
#include "llm/wire.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice;
using namespace sluice::llm;
namespace json = boost::json;

namespace {

const config::Config& cfg() {
  static const config::Config c;
  return c;
}

ChatRequest ok(std::string_view body) {
  auto r = parse_embeddings_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) {
    ADD_FAILURE() << e->message << " in " << body;
    return {};
  }
  return std::get<ChatRequest>(std::move(r));
}

RequestError refused(std::string_view body) {
  auto r = parse_embeddings_request(body, cfg());
  EXPECT_TRUE(std::holds_alternative<RequestError>(r)) << body;
  return std::holds_alternative<RequestError>(r) ? std::get<RequestError>(r) : RequestError{};
}

// base64 -> bytes (test side, standard alphabet with padding).
std::string unbase64(std::string_view s) {
  static const std::string abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = acc << 6 | static_cast<std::uint32_t>(abc.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

TEST(EmbeddingsRequest, EveryInputShapeOfTheSpecIsAccepted) {
  for (const char* body : {R"({"model":"e","input":"hello"})", R"({"model":"e","input":["a","b"]})",
                           R"({"model":"e","input":[1,2,3]})", R"({"model":"e","input":[[1,2],[3]]})",
                           R"({"model":"e","input":"x","encoding_format":"base64","dimensions":64,"user":"u"})"}) {
    const auto r = ok(body);
    EXPECT_EQ(r.task, Task::embed) << body;
    EXPECT_EQ(r.model, "e");
    EXPECT_FALSE(r.stream);
  }
}

TEST(EmbeddingsRequest, WhatTheSpecRefusesIsRefusedNamingTheField) {
  struct Case {
    const char* body;
    Reason reason;
    const char* param;
  } cases[] = {
      {R"({"input":"x"})", Reason::invalid_request, "model"},
      {R"({"model":"e"})", Reason::invalid_request, "input"},
      {R"({"model":"","input":"x"})", Reason::invalid_request, "model"},
      {R"({"model":"e","input":""})", Reason::invalid_request, "input"},
      {R"({"model":"e","input":[]})", Reason::invalid_request, "input"},
      {R"({"model":"e","input":["a",""]})", Reason::invalid_request, "input[1]"},
      {R"({"model":"e","input":["a",1]})", Reason::invalid_request, "input[1]"},
      {R"({"model":"e","input":[1,-2]})", Reason::invalid_request, "input"},
      {R"({"model":"e","input":[[1],[]]})", Reason::invalid_request, "input[1]"},
      {R"({"model":"e","input":{"a":1}})", Reason::invalid_request, "input"},
      {R"({"model":"e","input":"x","encoding_format":"yaml"})", Reason::invalid_request, "encoding_format"},
      {R"({"model":"e","input":"x","dimensions":0})", Reason::invalid_request, "dimensions"},
      {R"({"model":"e","input":"x","dimensions":1.5})", Reason::invalid_request, "dimensions"},
      {R"({"model":"e","input":"x","stream":true})", Reason::option_not_allowed, "stream"},
      {R"({"model":"e","input":"x","temperature":0})", Reason::option_not_allowed, "temperature"},
      {R"([1])", Reason::bad_json, ""},
      {R"({"model":"e","input":)", Reason::bad_json, ""},
  };
  for (const auto& c : cases) {
    const auto e = refused(c.body);
    EXPECT_EQ(e.reason, c.reason) << c.body << ": " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_FALSE(e.message.empty());
  }
  std::string many = R"({"model":"e","input":[)";
  for (std::size_t i = 0; i <= kMaxEmbeddingInputs; ++i) many += i ? ",\"a\"" : "\"a\"";
  many += "]}";
  EXPECT_EQ(refused(many).param, "input");
}

TEST(EmbeddingsRequest, TheBoundCoversTheCountAndNothingIsReservedForOutput) {
  SLUICE_REQUIRE_RANK_FILES();
  std::string warnings;
  const auto counter = tokenizer::Counter::load_dir(test::rank_dir(), &warnings);
  const auto r = ok(R"({"model":"e","input":["the cat sat on the mat","ünïcödé 文字 text"]})");
  const auto exact = count_prompt_tokens(r, counter, tokenizer::Encoding::cl100k_base);
  // Each input's text, and what a model may add to each (special tokens): an upper bound.
  EXPECT_EQ(exact, static_cast<std::int64_t>(counter.count("the cat sat on the mat", tokenizer::Encoding::cl100k_base) +
                                             counter.count("ünïcödé 文字 text", tokenizer::Encoding::cl100k_base)) +
                       2 * kEmbeddingInputOverhead);
  EXPECT_GE(prompt_token_bound(r), exact);
  const config::Provider wires[] = {config::Provider::openai, config::Provider::ollama};
  const auto res = reservation(r, wires, cfg(), &counter);
  EXPECT_EQ(res.prompt, exact);
  EXPECT_EQ(res.output, 0);
  // Token ids count one each.
  const auto ids = ok(R"({"model":"e","input":[[1,2,3],[4,5]]})");
  EXPECT_EQ(count_prompt_tokens(ids, counter, tokenizer::Encoding::cl100k_base), 5 + 2 * kEmbeddingInputOverhead);
  EXPECT_EQ(prompt_token_bound(ids), 5 + 2 * kEmbeddingInputOverhead);
  // A BERT-style model charges each input's bytes and two special tokens: within the bound.
  std::string many = R"({"model":"e","input":[)";
  for (int i = 0; i < 2048; ++i) many += i ? R"(,"a")" : R"("a")";
  many += "]}";
  EXPECT_GE(prompt_token_bound(ok(many)), 2048 * (1 + 2));
}

TEST(EmbeddingsRequest, WiresThatCannotServeItSaySoAndWhy) {
  const auto text = ok(R"({"model":"e","input":"x"})");
  const auto ids = ok(R"({"model":"e","input":[1,2]})");
  EXPECT_FALSE(unsupported(text, config::Provider::openai));
  EXPECT_FALSE(unsupported(text, config::Provider::ollama));
  EXPECT_FALSE(unsupported(ids, config::Provider::openai));
  auto a = unsupported(text, config::Provider::anthropic);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->param, "model");
  auto o = unsupported(ids, config::Provider::ollama);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->param, "input");
}

TEST(EmbeddingsCall, OpenAiKeepsTheBodyWithTheRealModelOllamaGetsApiEmbed) {
  const auto r = ok(R"({"model":"alias","input":["a","b"],"encoding_format":"base64","dimensions":8,"user":"u"})");
  config::Backend b;
  b.model = "text-embedding-3-small";
  b.path_prefix = "/v1";
  auto call = build_call(config::Provider::openai, r, b);
  EXPECT_EQ(call.target, "/v1/embeddings");
  auto body = json::parse(call.body).as_object();
  EXPECT_EQ(body["model"], "text-embedding-3-small");
  EXPECT_EQ(body["encoding_format"], "base64");
  EXPECT_EQ(body["dimensions"], 8);
  b.path_prefix = "";
  EXPECT_EQ(build_call(config::Provider::openai, r, b).target, "/v1/embeddings");

  b.model = "all-minilm";
  b.path_prefix = "/ollama";
  call = build_call(config::Provider::ollama, r, b);
  EXPECT_EQ(call.target, "/ollama/api/embed");
  body = json::parse(call.body).as_object();
  EXPECT_EQ(body["model"], "all-minilm");
  EXPECT_EQ(body["input"], (json::array{"a", "b"}));
  EXPECT_EQ(body["dimensions"], 8);
  EXPECT_FALSE(body.contains("encoding_format"));  // the gateway encodes
  EXPECT_FALSE(body.contains("user"));
}

TEST(EmbeddingsAnswer, OpenAiPassesThroughWithItsUsage) {
  const auto r = ok(R"({"model":"e","input":"x"})");
  const std::string body =
      R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.25]}],"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}})";
  auto c = read_answer(config::Provider::openai, body, r, "rid");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->body, body);
  EXPECT_EQ(c->usage.prompt_tokens, 7);
  EXPECT_EQ(c->usage.completion_tokens, 0);
  EXPECT_FALSE(read_answer(config::Provider::openai, R"({"choices":[]})", r, "rid"));
  EXPECT_FALSE(read_answer(config::Provider::openai, "not json", r, "rid"));
}

TEST(EmbeddingsAnswer, OllamaBecomesOpenAisListAsFloatsOrBase64) {
  const std::string ollama =
      R"({"model":"all-minilm","embeddings":[[0.5,-0.25,1e-3],[1,2,3]],"total_duration":1,"load_duration":1,"prompt_eval_count":4})";
  auto floats = read_answer(config::Provider::ollama, ollama, ok(R"({"model":"alias","input":["a","b"]})"), "rid");
  ASSERT_TRUE(floats);
  EXPECT_EQ(floats->usage.prompt_tokens, 4);
  EXPECT_EQ(floats->usage.completion_tokens, 0);
  auto v = json::parse(floats->body).as_object();
  EXPECT_EQ(v["object"], "list");
  EXPECT_EQ(v["model"], "alias");
  EXPECT_EQ(v["usage"].as_object()["prompt_tokens"], 4);
  EXPECT_EQ(v["usage"].as_object()["total_tokens"], 4);
  auto& data = v["data"].as_array();
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[1].as_object().at("index"), 1);
  EXPECT_EQ(data[1].as_object().at("object"), "embedding");
  EXPECT_DOUBLE_EQ(data[0].as_object().at("embedding").as_array()[1].to_number<double>(), -0.25);

  auto b64 = read_answer(config::Provider::ollama, ollama,
                         ok(R"({"model":"alias","input":["a","b"],"encoding_format":"base64"})"), "rid");
  ASSERT_TRUE(b64);
  auto w = json::parse(b64->body).as_object();
  const auto bytes = unbase64(w["data"].as_array()[0].as_object().at("embedding").as_string());
  ASSERT_EQ(bytes.size(), 12u);
  float f[3];
  std::memcpy(f, bytes.data(), 12);  // (this host is little-endian, as the encoding is)
  EXPECT_FLOAT_EQ(f[0], 0.5f);
  EXPECT_FLOAT_EQ(f[1], -0.25f);
  EXPECT_FLOAT_EQ(f[2], 1e-3f);

  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embeddings":[["x"]]})", ok(R"({"model":"a","input":"x"})"), "r"));
  // Not one vector per input, vectors of two lengths, a value beyond float32: not an answer.
  const auto two = ok(R"({"model":"a","input":["x","y"]})");
  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embeddings":[[1,2]]})", two, "r"));
  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embeddings":[[1,2],[1,2],[1,2]]})", two, "r"));
  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embeddings":[[1,2],[1]]})", two, "r"));
  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embeddings":[[1,2],[1,1e39]]})", two, "r"));
  EXPECT_TRUE(read_answer(config::Provider::ollama, R"({"embeddings":[[1,2],[3,4]]})", two, "r"));
  EXPECT_FALSE(read_answer(config::Provider::ollama, R"({"embedding":[1]})", ok(R"({"model":"a","input":"x"})"), "r"));
}

}  // namespace
