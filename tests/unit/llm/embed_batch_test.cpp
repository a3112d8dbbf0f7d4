// Embeddings micro-batching's pure half (llm/embed_batch.cpp): which requests may share a
// call, the merged request, the answer split back. End to end: embed_batch.test.mjs.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "llm/embeddings.hpp"

using namespace sluice;
namespace json = boost::json;

namespace {

llm::ChatRequest req(std::string_view body) {
  llm::ChatRequest r;
  r.task = llm::Task::embed;
  r.body = json::parse(body).as_object();
  return r;
}

}  // namespace

TEST(EmbedBatch, KeyAndInputs) {
  EXPECT_EQ(llm::embedding_batch_key(req(R"({"model":"e","input":"a"})")),
            llm::embedding_batch_key(req(R"({"model":"e","input":["b","c"],"user":"u"})")));
  EXPECT_NE(llm::embedding_batch_key(req(R"({"input":"a"})")), llm::embedding_batch_key(req(R"({"input":"a","dimensions":8})")));
  EXPECT_NE(llm::embedding_batch_key(req(R"({"input":"a"})")),
            llm::embedding_batch_key(req(R"({"input":"a","encoding_format":"base64"})")));
  EXPECT_NE(llm::embedding_batch_key(req(R"({"input":"a"})")), llm::embedding_batch_key(req(R"({"input":[1,2]})")))
      << "text and token ids never share a call";
  EXPECT_EQ(llm::embedding_inputs(req(R"({"input":"a"})")).size(), 1u);
  EXPECT_EQ(llm::embedding_inputs(req(R"({"input":["a","b"]})")).size(), 2u);
  EXPECT_EQ(llm::embedding_inputs(req(R"({"input":[1,2,3]})")).size(), 1u) << "one input of token ids";
  EXPECT_EQ(llm::embedding_inputs(req(R"({"input":[[1],[2,3]]})")).size(), 2u);
  auto m = llm::merge_embeddings(req(R"({"model":"e","input":"a","user":"u","dimensions":4})"), json::array{"x", "y"});
  EXPECT_EQ(json::value(m.body), json::parse(R"({"model":"e","dimensions":4,"input":["x","y"]})"));
}

TEST(EmbedBatch, OpenAiAnswerSplitByIndexWithUsageShared) {
  // Listed out of order: placed by index.
  const std::string body =
      R"({"object":"list","model":"m","data":[{"object":"embedding","index":2,"embedding":[2]},)"
      R"({"object":"embedding","index":0,"embedding":[0]},{"object":"embedding","index":1,"embedding":[1]}],)"
      R"("usage":{"prompt_tokens":10,"total_tokens":10}})";
  const std::size_t counts[] = {1, 2};
  const std::int64_t weights[] = {1, 2};
  auto parts = llm::split_embeddings_answer(config::Provider::openai, body, counts, weights);
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 2u);
  const auto a = json::parse((*parts)[0]).as_object();
  const auto b = json::parse((*parts)[1]).as_object();
  EXPECT_EQ(a.at("data").as_array().size(), 1u);
  EXPECT_EQ(a.at("data").as_array()[0].at("embedding"), json::parse("[0]"));
  EXPECT_EQ(b.at("data").as_array()[0].at("index"), 0);
  EXPECT_EQ(b.at("data").as_array()[1].at("index"), 1);
  EXPECT_EQ(b.at("data").as_array()[1].at("embedding"), json::parse("[2]"));
  const auto pa = a.at("usage").at("prompt_tokens").as_int64(), pb = b.at("usage").at("prompt_tokens").as_int64();
  EXPECT_EQ(pa + pb, 10) << "the shares add up to the total";
  EXPECT_EQ(pa, 3);
  EXPECT_EQ(b.at("model"), "m");
  // Read back as the usual answer.
  auto done = llm::read_openai_embeddings((*parts)[1]);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->usage.prompt_tokens, pb);
}

TEST(EmbedBatch, OllamaAnswerSplit) {
  const std::size_t counts[] = {2, 1};
  const std::int64_t weights[] = {5, 5};
  auto parts = llm::split_embeddings_answer(config::Provider::ollama,
                                            R"({"model":"n","embeddings":[[1],[2],[3]],"prompt_eval_count":7})", counts, weights);
  ASSERT_TRUE(parts);
  EXPECT_EQ(json::parse((*parts)[0]), json::parse(R"({"model":"n","embeddings":[[1],[2]],"prompt_eval_count":4})"));
  EXPECT_EQ(json::parse((*parts)[1]), json::parse(R"({"model":"n","embeddings":[[3]],"prompt_eval_count":3})"));
}

TEST(EmbedBatch, AnOllamaAnswerWithoutItsCountLeavesEachRequestToCountItsOwn) {
  const std::size_t counts[] = {1, 1};
  const std::int64_t weights[] = {1, 1};
  auto parts = llm::split_embeddings_answer(config::Provider::ollama, R"({"embeddings":[[1],[2]]})", counts, weights);
  ASSERT_TRUE(parts);
  EXPECT_FALSE(json::parse((*parts)[0]).as_object().contains("prompt_eval_count"));
}

TEST(EmbedBatch, EveryRequestIsChargedSomethingWhenTheTotalAllows) {
  const std::size_t counts[] = {1, 1, 1};
  const std::int64_t weights[] = {1000, 1, 1};
  auto parts = llm::split_embeddings_answer(config::Provider::ollama,
                                            R"({"embeddings":[[1],[2],[3]],"prompt_eval_count":5})", counts, weights);
  ASSERT_TRUE(parts);
  std::int64_t sum = 0;
  for (const auto& p : *parts) {
    const auto n = json::parse(p).at("prompt_eval_count").as_int64();
    EXPECT_GE(n, 1);
    sum += n;
  }
  EXPECT_EQ(sum, 5);
}

TEST(EmbedBatch, AnswersThatDoNotHoldOneVectorPerInputAreRefused) {
  const std::size_t counts[] = {1, 1};
  const std::int64_t weights[] = {1, 1};
  for (const char* bad : {"", "[]", R"({"data":[{"index":0,"embedding":[1]}]})",
                          R"({"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]})",
                          R"({"data":[{"index":0,"embedding":[1]},{"index":5,"embedding":[1]}]})",
                          R"({"data":[{"embedding":[1]},{"embedding":[1]}]})"}) {
    EXPECT_FALSE(llm::split_embeddings_answer(config::Provider::openai, bad, counts, weights)) << bad;
  }
  EXPECT_FALSE(llm::split_embeddings_answer(config::Provider::ollama, R"({"embeddings":[[1]]})", counts, weights));
}
