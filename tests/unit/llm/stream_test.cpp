#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <string>
#include <vector>

#include "llm/anthropic.hpp"
#include "llm/chat.hpp"

using namespace sluice;
using namespace sluice::llm;
namespace json = boost::json;

namespace {

ChatRequest request(bool stream, bool include_usage, std::string model = "alias") {
  ChatRequest r;
  r.model = std::move(model);
  r.stream = stream;
  r.include_usage = include_usage;
  r.prompt_tokens_estimate = 11;
  return r;
}

// Splits "data: X\n\n" frames into their data payloads; fails on anything else.
std::vector<std::string> frames(std::string_view out) {
  std::vector<std::string> v;
  while (!out.empty()) {
    EXPECT_TRUE(out.starts_with("data: ")) << out;
    auto end = out.find("\n\n");
    EXPECT_NE(end, std::string_view::npos) << out;
    if (!out.starts_with("data: ") || end == std::string_view::npos) break;
    v.emplace_back(out.substr(6, end - 6));
    out.remove_prefix(end + 2);
  }
  return v;
}

std::string chunk(std::string_view choices, std::string_view usage = "null") {
  return R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt",)"
         R"("choices":)" +
         std::string(choices) + R"(,"usage":)" + std::string(usage) + "}";
}

const std::string kRoleChunk =
    chunk(R"([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}])");
const std::string kHel = chunk(R"([{"index":0,"delta":{"content":"Hel"},"finish_reason":null}])");
const std::string kLo = chunk(R"([{"index":0,"delta":{"content":"lo"},"finish_reason":null}])");
const std::string kStop = chunk(R"([{"index":0,"delta":{},"finish_reason":"stop"}])");
const std::string kUsage =
    chunk("[]", R"({"prompt_tokens":9,"completion_tokens":2,"total_tokens":11})");

std::string sse(const std::vector<std::string>& datas, std::string_view eol = "\n") {
  std::string s;
  for (const auto& d : datas) {
    s += "data: ";
    s += d;
    s += eol;
    s += eol;
  }
  return s;
}

const std::string kOpenAiStream = sse({kRoleChunk, kHel, kLo, kStop, kUsage, "[DONE]"});

// A chunk as a client that did not ask for include_usage gets it: without "usage": null.
std::string plain(std::string c) {
  const auto at = c.find(R"(,"usage":null)");
  if (at != std::string::npos) c.erase(at, 13);
  return c;
}

}  // namespace

// ---- OpenAI stream -------------------------------------------------------------------

TEST(OpenAiStream, UsageChunkDroppedWhenClientDidNotAsk) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  ASSERT_TRUE(t->feed(kOpenAiStream, out));
  ASSERT_TRUE(t->finish(out));
  EXPECT_EQ(out, sse({plain(kRoleChunk), plain(kHel), plain(kLo), plain(kStop), "[DONE]"}));
  EXPECT_EQ(t->content_chunks(), 2);
  EXPECT_TRUE(t->first_token_seen());
  EXPECT_EQ(t->usage().prompt_tokens, 9);
  EXPECT_EQ(t->usage().completion_tokens, 2);
  EXPECT_EQ(t->finish_reason(), "stop");
  EXPECT_TRUE(t->done());
  EXPECT_TRUE(t->error().empty());
}

TEST(OpenAiStream, UsageChunkKeptWhenClientAsked) {
  auto t = make_openai_stream(request(true, true));
  std::string out;
  ASSERT_TRUE(t->feed(kOpenAiStream, out));
  ASSERT_TRUE(t->finish(out));
  EXPECT_EQ(out, kOpenAiStream);  // byte for byte
  EXPECT_EQ(t->usage().prompt_tokens, 9);
}

TEST(OpenAiStream, SplitAtEveryByteBoundaryGivesSameOutput) {
  const std::string in = sse({kRoleChunk, kHel, kLo, kStop, kUsage, "[DONE]"}, "\r\n");
  const std::string expected = sse({plain(kRoleChunk), plain(kHel), plain(kLo), plain(kStop), "[DONE]"});
  for (std::size_t i = 0; i <= in.size(); ++i) {
    auto t = make_openai_stream(request(true, false));
    std::string out;
    ASSERT_TRUE(t->feed(std::string_view(in).substr(0, i), out));
    ASSERT_TRUE(t->feed(std::string_view(in).substr(i), out));
    ASSERT_TRUE(t->finish(out));
    ASSERT_EQ(out, expected) << "split at " << i;
    ASSERT_EQ(t->content_chunks(), 2);
  }
}

TEST(OpenAiStream, CommentsAreNotRelayed) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  ASSERT_TRUE(t->feed(": OPENROUTER PROCESSING\n\n" + sse({kHel, "[DONE]"}), out));
  EXPECT_EQ(out, sse({plain(kHel), "[DONE]"}));
}

// "usage": null as the first member, and a chunk whose text holds the same bytes escaped:
// only the member goes.
TEST(OpenAiStream, NullUsageMemberGoesWhereverItIsAndOnlyIt) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  const std::string first = R"({"usage":null,"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]})";
  const std::string text = R"({"id":"c","choices":[{"index":0,"delta":{"content":"x\",\"usage\":null"}}],"usage":null})";
  ASSERT_TRUE(t->feed(sse({first, text, "[DONE]"}), out)) << t->error() << out;
  EXPECT_EQ(out, sse({R"({"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]})",
                      R"({"id":"c","choices":[{"index":0,"delta":{"content":"x\",\"usage\":null"}}]})", "[DONE]"}));
  // A nested member of the same bytes stays; the chunk passes as it came.
  std::string nested_out;
  const std::string nested = R"({"choices":[{"index":0,"x":{"a":1,"usage":null},"delta":{"content":"b"}}],"o":{"usage":null}})";
  ASSERT_TRUE(t->feed(sse({nested}), nested_out));
  EXPECT_EQ(nested_out, "");  // (after [DONE] nothing is relayed)
  auto t2 = make_openai_stream(request(true, false));
  ASSERT_TRUE(t2->feed(sse({nested}), nested_out));
  EXPECT_EQ(nested_out, sse({nested}));
}

TEST(OpenAiStream, TruncatedStream) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  ASSERT_TRUE(t->feed(sse({kRoleChunk, kHel}) + "data: {\"partial", out));
  EXPECT_EQ(out, sse({plain(kRoleChunk), plain(kHel)}));
  std::string tail;
  EXPECT_FALSE(t->finish(tail));
  EXPECT_TRUE(tail.empty());
  EXPECT_FALSE(t->done());
  EXPECT_EQ(t->content_chunks(), 1);
  EXPECT_EQ(t->usage().prompt_tokens, -1);
}

TEST(OpenAiStream, ToolCallDeltasCountAsContent) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  const std::string tc = chunk(
      R"([{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",)"
      R"("function":{"name":"f","arguments":""}}]},"finish_reason":null}])");
  const std::string fin = chunk(R"([{"index":0,"delta":{},"finish_reason":"tool_calls"}])");
  ASSERT_TRUE(t->feed(sse({kRoleChunk, tc, fin, "[DONE]"}), out));
  EXPECT_EQ(t->content_chunks(), 1);
  EXPECT_EQ(t->finish_reason(), "tool_calls");
}

TEST(OpenAiStream, UpstreamErrorEventPassesThrough) {
  auto t = make_openai_stream(request(true, false));
  const std::string err = R"({"error":{"message":"overloaded","type":"server_error"}})";
  std::string out;
  ASSERT_TRUE(t->feed(sse({kHel, err}), out));
  EXPECT_EQ(out, sse({plain(kHel), err}));
  EXPECT_EQ(t->error(), "overloaded");
  std::string tail;
  EXPECT_TRUE(t->finish(tail));  // the error was relayed; the client stream is closed
  EXPECT_EQ(tail, "data: [DONE]\n\n");
  EXPECT_FALSE(t->done());
}

TEST(OpenAiStream, NonJsonEventIsAProtocolError) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  EXPECT_FALSE(t->feed(sse({kHel, "not json", kLo}), out));
  EXPECT_FALSE(t->error().empty());
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 3u);  // kHel, the error, [DONE]; kLo is not relayed
  EXPECT_EQ(f[0], plain(kHel));
  EXPECT_EQ(json::parse(f[1]).at("error").at("code").as_string(), "upstream_bad_response");
  EXPECT_EQ(f[2], "[DONE]");
  EXPECT_FALSE(t->feed(sse({kLo}), out));
}

TEST(OpenAiStream, OversizeEventIsAProtocolError) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  std::string big = "data: \"" + std::string(2 << 20, 'x');
  EXPECT_FALSE(t->feed(big, out));
  EXPECT_NE(out.find("upstream_bad_response"), std::string::npos);
  EXPECT_TRUE(out.ends_with("data: [DONE]\n\n"));
}

TEST(OpenAiStream, NothingRelayedAfterDone) {
  auto t = make_openai_stream(request(true, false));
  std::string out;
  ASSERT_TRUE(t->feed(sse({kHel, "[DONE]", kLo}), out));
  EXPECT_EQ(out, sse({plain(kHel), "[DONE]"}));
  EXPECT_EQ(t->content_chunks(), 1);
}

// ---- OpenAI non-stream -----------------------------------------------------------------

TEST(OpenAiCompletion, ReadsUsageAndFinishReason) {
  const std::string body =
      R"({"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-4o",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":"hi"},)"
      R"("finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":34,)"
      R"("total_tokens":46}})";
  auto c = read_openai_completion(body);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->body, body);
  EXPECT_EQ(c->usage.prompt_tokens, 12);
  EXPECT_EQ(c->usage.completion_tokens, 34);
  EXPECT_EQ(c->finish_reason, "length");
}

TEST(OpenAiCompletion, MissingUsageIsUnknown) {
  auto c = read_openai_completion(R"({"choices":[]})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->usage.prompt_tokens, -1);
  EXPECT_EQ(c->usage.completion_tokens, -1);
  EXPECT_EQ(c->finish_reason, "");
}

TEST(OpenAiCompletion, NotAnObject) {
  EXPECT_FALSE(read_openai_completion("[1,2]"));
  EXPECT_FALSE(read_openai_completion("{\"a\":"));
  EXPECT_FALSE(read_openai_completion(""));
  EXPECT_FALSE(read_openai_completion("<html>bad gateway</html>"));
}

// ---- Ollama stream ---------------------------------------------------------------------

namespace {

const std::string kOl1 =
    R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"Hel"},"done":false})";
const std::string kOl2 =
    R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"lo \"q\""},"done":false})";
const std::string kOlDone =
    R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":5,"load_duration":1,"prompt_eval_count":26,"prompt_eval_duration":1,"eval_count":2,"eval_duration":1})";
const std::string kOllamaStream = kOl1 + "\n" + kOl2 + "\n" + kOlDone + "\n";

void expect_chunk_header(const json::value& c) {
  EXPECT_EQ(c.at("id").as_string(), "chatcmpl-req42");
  EXPECT_EQ(c.at("object").as_string(), "chat.completion.chunk");
  EXPECT_TRUE(c.at("created").is_int64());
  EXPECT_EQ(c.at("model").as_string(), "alias");
}

}  // namespace

TEST(OllamaStream, TranslatesToChunks) {
  auto t = make_ollama_stream(request(true, false), "req42");
  std::string out;
  ASSERT_TRUE(t->feed(kOllamaStream, out));
  ASSERT_TRUE(t->finish(out));
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 4u);
  auto c0 = json::parse(f[0]);
  expect_chunk_header(c0);
  EXPECT_EQ(c0.at("choices"),
            json::parse(R"([{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}])"));
  auto c1 = json::parse(f[1]);
  expect_chunk_header(c1);
  EXPECT_EQ(c1.at("choices"),
            json::parse(R"([{"index":0,"delta":{"content":"lo \"q\""},"finish_reason":null}])"));
  auto c2 = json::parse(f[2]);
  expect_chunk_header(c2);
  EXPECT_EQ(c2.at("choices"),
            json::parse(R"([{"index":0,"delta":{},"finish_reason":"stop"}])"));
  EXPECT_FALSE(c2.as_object().contains("usage"));
  EXPECT_EQ(f[3], "[DONE]");
  EXPECT_EQ(t->content_chunks(), 2);
  EXPECT_EQ(t->usage().prompt_tokens, 26);
  EXPECT_EQ(t->usage().completion_tokens, 2);
  EXPECT_EQ(t->finish_reason(), "stop");
  EXPECT_TRUE(t->done());
}

TEST(OllamaStream, UsageChunkWhenAsked) {
  auto t = make_ollama_stream(request(true, true), "req42");
  std::string out;
  ASSERT_TRUE(t->feed(kOllamaStream, out));
  ASSERT_TRUE(t->finish(out));
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 5u);
  auto u = json::parse(f[3]);
  expect_chunk_header(u);
  EXPECT_TRUE(u.at("choices").as_array().empty());
  EXPECT_EQ(u.at("usage"),
            json::parse(R"({"prompt_tokens":26,"completion_tokens":2,"total_tokens":28})"));
  EXPECT_EQ(f[4], "[DONE]");
  // The spec: with include_usage every chunk but the last carries "usage": null.
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(json::parse(f[i]).at("usage").is_null()) << f[i];
}

// The same rule for the other translated streams (Anthropic upstream, a canned reply), and
// without include_usage no chunk has the field.
TEST(TranslatedStreams, UsageIsNullOnEveryChunkButTheLastOnlyWhenAsked) {
  const std::string anthropic =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (const bool asked : {false, true}) {
    const auto req = request(true, asked);
    std::vector<std::string> outs;
    for (int k = 0; k < 2; ++k) {
      auto t = k == 0 ? make_anthropic_stream(req, "r") : make_ollama_stream(req, "r");
      std::string out;
      ASSERT_TRUE(t->feed(k == 0 ? anthropic : kOllamaStream, out));
      ASSERT_TRUE(t->finish(out));
      outs.push_back(out);
    }
    {  // a canned reply goes through the OpenAI translator, as an upstream's answer does
      auto t = make_openai_stream(req);
      std::string out;
      ASSERT_TRUE(t->feed(canned_openai_answer(req, "r", "sorry"), out));
      ASSERT_TRUE(t->finish(out));
      outs.push_back(out);
    }
    for (const auto& out : outs) {
      auto f = frames(out);
      ASSERT_GE(f.size(), 3u) << out;
      ASSERT_EQ(f.back(), "[DONE]");
      f.pop_back();
      for (std::size_t i = 0; i < f.size(); ++i) {
        const auto c = json::parse(f[i]).as_object();
        if (!asked) {
          EXPECT_FALSE(c.contains("usage")) << f[i];
        } else if (i + 1 < f.size()) {
          EXPECT_TRUE(c.contains("usage") && c.at("usage").is_null()) << f[i];
        } else {
          EXPECT_TRUE(c.at("usage").is_object()) << f[i];
        }
      }
    }
  }
}

TEST(OllamaStream, SplitAtEveryByteBoundaryGivesSameFrames) {
  std::string whole;
  {
    auto t = make_ollama_stream(request(true, true), "req42");
    ASSERT_TRUE(t->feed(kOllamaStream, whole));
    ASSERT_TRUE(t->finish(whole));
  }
  // "created" may tick between translators; compare with it masked.
  auto mask = [](std::string s) {
    for (auto p = s.find("\"created\":"); p != std::string::npos; p = s.find("\"created\":", p + 1)) {
      auto e = s.find(',', p);
      s.replace(p, e - p, "\"created\":0");
    }
    return s;
  };
  for (std::size_t i = 0; i <= kOllamaStream.size(); ++i) {
    auto t = make_ollama_stream(request(true, true), "req42");
    std::string out;
    ASSERT_TRUE(t->feed(std::string_view(kOllamaStream).substr(0, i), out));
    ASSERT_TRUE(t->feed(std::string_view(kOllamaStream).substr(i), out));
    ASSERT_TRUE(t->finish(out));
    ASSERT_EQ(mask(out), mask(whole)) << "split at " << i;
  }
}

TEST(OllamaStream, FinalLineWithoutNewline) {
  auto t = make_ollama_stream(request(true, false), "r");
  std::string out;
  ASSERT_TRUE(t->feed(kOl1 + "\r\n" + kOlDone, out));
  EXPECT_FALSE(t->done());
  ASSERT_TRUE(t->finish(out));
  EXPECT_TRUE(t->done());
  EXPECT_TRUE(out.ends_with("data: [DONE]\n\n"));
}

TEST(OllamaStream, TruncatedStream) {
  auto t = make_ollama_stream(request(true, false), "r");
  std::string out;
  ASSERT_TRUE(t->feed(kOl1 + "\n" + kOl2 + "\n", out));
  std::string tail;
  EXPECT_FALSE(t->finish(tail));
  EXPECT_TRUE(tail.empty());
  EXPECT_FALSE(t->done());
  EXPECT_EQ(t->content_chunks(), 2);
  EXPECT_EQ(t->usage().prompt_tokens, -1);
}

TEST(OllamaStream, ErrorLine) {
  auto t = make_ollama_stream(request(true, false), "r");
  std::string out;
  EXPECT_FALSE(t->feed(kOl1 + "\n" + R"({"error":"model runner crashed"})" + "\n" + kOl2 + "\n",
                       out));
  EXPECT_EQ(t->error(), "model runner crashed");
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(json::parse(f[0]).at("choices").at(0).at("delta").at("content").as_string(), "Hel");
  EXPECT_TRUE(out.ends_with(error_frame(Reason::upstream_stream_failed, "model runner crashed")));
  std::string tail;
  EXPECT_TRUE(t->finish(tail));  // already closed by the error frame
  EXPECT_TRUE(tail.empty());
}

TEST(OllamaStream, InvalidLineIsAProtocolError) {
  auto t = make_ollama_stream(request(true, false), "r");
  std::string out;
  EXPECT_FALSE(t->feed("<html>oops</html>\n", out));
  EXPECT_NE(out.find("upstream_bad_response"), std::string::npos);
  EXPECT_TRUE(out.ends_with("data: [DONE]\n\n"));
}

TEST(OllamaStream, LengthAndEmptyCompletion) {
  auto t = make_ollama_stream(request(true, true), "r");
  std::string out;
  ASSERT_TRUE(t->feed(
      R"({"message":{"role":"assistant","content":""},"done":true,"done_reason":"length","eval_count":0})"
      "\n",
      out));
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 3u);
  // No content was sent: the closing chunk carries the role.
  EXPECT_EQ(json::parse(f[0]).at("choices"),
            json::parse(R"([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"length"}])"));
  // prompt_eval_count missing (cached prompt): usage chunk falls back to the estimate.
  EXPECT_EQ(json::parse(f[1]).at("usage"),
            json::parse(R"({"prompt_tokens":11,"completion_tokens":0,"total_tokens":11})"));
  EXPECT_EQ(t->usage().prompt_tokens, -1);
  EXPECT_EQ(t->usage().completion_tokens, 0);
  EXPECT_EQ(t->finish_reason(), "length");
  EXPECT_EQ(t->content_chunks(), 0);
}

TEST(OllamaStream, ToolCalls) {
  auto t = make_ollama_stream(request(true, false), "r");
  std::string out;
  ASSERT_TRUE(t->feed(
      R"({"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false})"
      "\n" +
          kOlDone + "\n",
      out));
  const auto f = frames(out);
  ASSERT_EQ(f.size(), 3u);
  const auto c0 = json::parse(f[0]);
  const auto& delta = c0.at("choices").at(0).at("delta");
  EXPECT_EQ(delta.at("role").as_string(), "assistant");
  const auto& call = delta.at("tool_calls").at(0);
  EXPECT_EQ(call.at("index").as_int64(), 0);
  EXPECT_EQ(call.at("type").as_string(), "function");
  EXPECT_FALSE(call.at("id").as_string().empty());
  EXPECT_EQ(call.at("function").at("name").as_string(), "get_weather");
  EXPECT_EQ(json::parse(call.at("function").at("arguments").as_string()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(t->finish_reason(), "tool_calls");
  EXPECT_EQ(t->content_chunks(), 1);
}

// ---- Ollama non-stream -----------------------------------------------------------------

TEST(OllamaCompletion, Translates) {
  const std::string body =
      R"({"model":"llama3.2","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"Hello!"},"done":true,"done_reason":"stop","total_duration":5,"prompt_eval_count":26,"eval_count":3})";
  auto c = translate_ollama_completion(body, request(false, false), "abc");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->usage.prompt_tokens, 26);
  EXPECT_EQ(c->usage.completion_tokens, 3);
  EXPECT_EQ(c->finish_reason, "stop");
  auto v = json::parse(c->body);
  EXPECT_EQ(v.at("id").as_string(), "chatcmpl-abc");
  EXPECT_EQ(v.at("object").as_string(), "chat.completion");
  EXPECT_GT(v.at("created").as_int64(), 1700000000);
  EXPECT_EQ(v.at("model").as_string(), "alias");
  EXPECT_EQ(v.at("choices"),
            json::parse(R"([{"index":0,"message":{"role":"assistant","refusal":null,"content":"Hello!"},"logprobs":null,"finish_reason":"stop"}])"));
  EXPECT_EQ(v.at("usage"),
            json::parse(R"({"prompt_tokens":26,"completion_tokens":3,"total_tokens":29})"));
  EXPECT_EQ(v.as_object().size(), 6u);
}

TEST(OllamaCompletion, LengthAndMissingCounts) {
  auto c = translate_ollama_completion(
      R"({"message":{"role":"assistant","content":"abcdefgh"},"done":true,"done_reason":"length"})",
      request(false, false), "x");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->finish_reason, "length");
  EXPECT_EQ(c->usage.prompt_tokens, -1);
  EXPECT_EQ(c->usage.completion_tokens, -1);
  auto v = json::parse(c->body);
  EXPECT_EQ(v.at("choices").at(0).at("finish_reason").as_string(), "length");
  // Unknown counts: the body carries the estimates (prompt estimate, content estimate).
  const auto completion = estimate_tokens("abcdefgh");
  EXPECT_EQ(v.at("usage").at("prompt_tokens").as_int64(), 11);
  EXPECT_EQ(v.at("usage").at("completion_tokens").as_int64(), completion);
  EXPECT_EQ(v.at("usage").at("total_tokens").as_int64(), 11 + completion);
}

TEST(OllamaCompletion, ToolCalls) {
  auto c = translate_ollama_completion(
      R"({"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":true,"done_reason":"stop","prompt_eval_count":5,"eval_count":7})",
      request(false, false), "x");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->finish_reason, "tool_calls");
  auto v = json::parse(c->body);
  const auto& msg = v.at("choices").at(0).at("message");
  EXPECT_TRUE(msg.at("content").is_null());
  EXPECT_EQ(msg.at("tool_calls").at(0).at("function").at("name").as_string(), "f");
  EXPECT_EQ(json::parse(msg.at("tool_calls").at(0).at("function").at("arguments").as_string()),
            json::parse(R"({"a":1})"));
}

TEST(OllamaCompletion, ErrorsAndGarbage) {
  const auto req = request(false, false);
  EXPECT_FALSE(translate_ollama_completion(R"({"error":"model 'x' not found"})", req, "x"));
  EXPECT_FALSE(translate_ollama_completion("not json", req, "x"));
  EXPECT_FALSE(translate_ollama_completion("[]", req, "x"));
  EXPECT_FALSE(translate_ollama_completion(R"({"done":true})", req, "x"));
}

TEST(ErrorFrame, Shape) {
  EXPECT_EQ(error_frame(Reason::upstream_stream_failed, "boom"),
            "data: " + error_body(Reason::upstream_stream_failed, "boom") +
                "\n\ndata: [DONE]\n\n");
}

// Found by fuzz_stream: a "data" line without a colon gives an event whose data is an
// empty view with a null pointer, and the JSON buffer copied it with memcpy(dst, nullptr,
// 0) — undefined behaviour (UBSan's nonnull-attribute report in the sanitizer build).
// Such an event is not JSON: the stream fails cleanly with an error frame.
TEST(OpenAiStream, DataLineWithoutColonFailsCleanly) {
  for (const char* bytes : {"data\n\n", "data\r\r", "data:\n\n"}) {
    SCOPED_TRACE(bytes);
    auto t = make_openai_stream(request(true, false));
    std::string out;
    EXPECT_FALSE(t->feed(std::string("data: ") + kHel + "\n\n" + bytes, out));
    EXPECT_TRUE(out.ends_with("data: [DONE]\n\n")) << out;
    EXPECT_FALSE(t->error().empty());
  }
}
