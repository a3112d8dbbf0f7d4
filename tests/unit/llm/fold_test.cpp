// A streamed answer folded into the chat.completion it amounts to, and a kept
// chat.completion replayed whole and as chunks (llm/fold.hpp, used by the response cache).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "llm/fold.hpp"

using namespace sluice;
using namespace sluice::llm;
namespace json = boost::json;

namespace {

ChatRequest request(bool stream, bool include_usage) {
  ChatRequest r;
  r.model = "alias";
  r.stream = stream;
  r.include_usage = include_usage;
  return r;
}

std::string frame(std::string_view json) { return "data: " + std::string(json) + "\n\n"; }

// Two choices, text split over chunks, a tool call in fragments, logprobs, usage.
const std::string kStream =
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"logprobs":{"content":[{"token":"Hel","logprob":-0.1,"bytes":null,"top_logprobs":[]}]},"finish_reason":null}]})") +
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"look","arguments":"{\"a\""}}]},"finish_reason":null}]})") +
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":0,"delta":{"content":"lo"},"logprobs":{"content":[{"token":"lo","logprob":-0.2,"bytes":null,"top_logprobs":[]}]},"finish_reason":null}]})") +
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":null}]})") +
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"tool_calls"}]})") +
    frame(R"({"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"m-1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}})") +
    "data: [DONE]\n\n";

std::string fold(std::string_view bytes, std::size_t max_bytes = 1 << 20, std::string* out = nullptr) {
  std::string whole;
  auto t = fold_stream(make_openai_stream(request(true, true)), &whole, max_bytes);
  std::string frames;
  t->feed(bytes, frames);
  t->finish(frames);
  if (out) *out = frames;
  return whole;
}

}  // namespace

TEST(FoldStream, AStreamBecomesItsChatCompletion) {
  std::string relayed;
  const std::string whole = fold(kStream, 1 << 20, &relayed);
  EXPECT_EQ(relayed, kStream) << "the frames pass through unchanged";
  ASSERT_FALSE(whole.empty());
  const auto v = json::parse(whole).as_object();
  EXPECT_EQ(v.at("object"), "chat.completion");
  EXPECT_EQ(v.at("id"), "chatcmpl-up");
  EXPECT_EQ(v.at("model"), "m-1");
  EXPECT_EQ(v.at("system_fingerprint"), "fp");
  const auto& choices = v.at("choices").as_array();
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0].at("message").at("content"), "Hello");
  EXPECT_TRUE(choices[0].at("message").at("refusal").is_null());
  EXPECT_EQ(choices[0].at("finish_reason"), "stop");
  EXPECT_EQ(choices[0].at("logprobs").at("content").as_array().size(), 2u);
  const auto& call = choices[1].at("message").at("tool_calls").at(0);
  EXPECT_EQ(call.at("id"), "call_1");
  EXPECT_EQ(call.at("function").at("name"), "look");
  EXPECT_EQ(call.at("function").at("arguments"), "{\"a\":1}");
  EXPECT_TRUE(choices[1].at("message").at("content").is_null());
  EXPECT_EQ(choices[1].at("finish_reason"), "tool_calls");
  EXPECT_EQ(v.at("usage").at("completion_tokens"), 7);
}

TEST(FoldStream, NothingIsKeptOfAFailedCutOrOversizedStream) {
  // Cut before [DONE].
  const std::string cut = kStream.substr(0, kStream.find("data: [DONE]"));
  EXPECT_EQ(fold(cut), "");
  // An upstream error event.
  EXPECT_EQ(fold(frame(R"({"choices":[{"index":0,"delta":{"content":"a"}}]})") +
                 frame(R"({"error":{"message":"boom","type":"server_error"}})") + "data: [DONE]\n\n"),
            "");
  // Beyond max_bytes.
  EXPECT_EQ(fold(kStream, 64), "");
  EXPECT_FALSE(fold(kStream, kStream.size()).empty());
}

TEST(Replay, WholeUnderANewIdWithItsUsage) {
  const std::string kept = fold(kStream);
  auto c = replay_whole(kept, "req-2");
  ASSERT_TRUE(c);
  const auto v = json::parse(c->body).as_object();
  EXPECT_EQ(v.at("id"), "chatcmpl-req-2");
  EXPECT_EQ(v.at("choices").at(0).at("message").at("content"), "Hello");
  EXPECT_EQ(c->usage.prompt_tokens, 5);
  EXPECT_EQ(c->usage.completion_tokens, 7);
  EXPECT_FALSE(replay_whole("not json", "x"));
  EXPECT_FALSE(replay_whole(R"({"no":"choices"})", "x"));
}

TEST(Replay, AsChunksThatFoldBackToTheSameAnswer) {
  const std::string kept = fold(kStream);
  for (bool include_usage : {false, true}) {
    const std::string chunks = replay_stream(kept, request(true, include_usage), "req-3");
    ASSERT_FALSE(chunks.empty());
    EXPECT_NE(chunks.find("chatcmpl-req-3"), std::string::npos);
    // Through the OpenAI translator as a client gets it: the usage chunk only when asked.
    std::string whole;
    auto t = fold_stream(make_openai_stream(request(true, include_usage)), &whole, 1 << 20);
    std::string frames;
    ASSERT_TRUE(t->feed(chunks, frames));
    ASSERT_TRUE(t->finish(frames));
    EXPECT_EQ(frames.find(R"("usage":{)") != std::string::npos, include_usage) << frames;
    EXPECT_EQ(t->usage().completion_tokens, 7);
    const auto again = json::parse(whole).as_object();
    const auto first = json::parse(kept).as_object();
    EXPECT_EQ(again.at("choices"), first.at("choices")) << "replayed and folded again: the same choices";
  }
  EXPECT_EQ(replay_stream("[]", request(true, false), "x"), "");
}
