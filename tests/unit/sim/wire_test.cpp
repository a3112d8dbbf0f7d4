#include <gtest/gtest.h>

#include "sse_frames.hpp"

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "sim/wire.hpp"

using namespace sluice;
using namespace sluice::sim;
namespace json = boost::json;

namespace {

GenRequest parse_ok(Api api, std::string_view body) {
  std::string err;
  auto r = parse_request(api, body, err);
  EXPECT_TRUE(r.has_value()) << err << " for " << body;
  return r.value_or(GenRequest{});
}

// Splits SSE frames (strict: an unterminated frame fails the test).
const auto frames = sluice::sim::testing::sse_frames;

ReplyInfo info(Api api, bool include_usage = false) {
  ReplyInfo r;
  r.api = api;
  r.id = api == Api::anthropic ? "msg_1" : "chatcmpl-1";
  r.model = "m1";
  r.created = 1700000000;
  r.prompt_tokens = 12;
  r.include_usage = include_usage;
  return r;
}

// A text answer of these tokens.
Answer text_answer(std::vector<std::string> pieces, Finish finish) {
  Answer a;
  for (const auto& p : pieces) a.content.add(p);
  a.finish = finish;
  return a;
}

}  // namespace

TEST(ParseRequest, OpenAiFields) {
  auto r = parse_ok(Api::openai, R"({"model":"gpt","messages":[{"role":"user","content":"0123456789abcdef"}],
      "stream":true,"stream_options":{"include_usage":true},"max_tokens":9,"max_completion_tokens":4})");
  EXPECT_EQ(r.model, "gpt");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 4);  // max_completion_tokens wins
  EXPECT_EQ(r.prompt_tokens, 4);

  r = parse_ok(Api::openai, R"({"model":"gpt","messages":[{"role":"user","content":[{"type":"text","text":"12345678"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}]})");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.prompt_tokens, 2);
}

TEST(ParseRequest, OllamaDefaultsToStreamAndReadsNumPredict) {
  auto r = parse_ok(Api::ollama, R"({"model":"llama3","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":7}})");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.prompt_tokens, 1);
  r = parse_ok(Api::ollama, R"({"model":"llama3","messages":[],"stream":false,"options":{"num_predict":-1}})");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());  // -1 = no limit
}

TEST(ParseRequest, AnthropicCountsSystem) {
  auto r = parse_ok(Api::anthropic, R"({"model":"claude","max_tokens":3,"system":"abcdefgh","messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"}]}]})");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_EQ(r.prompt_tokens, 4);
}

TEST(ParseRequest, RejectsBadBodies) {
  std::string err;
  for (const char* bad : {"{", "[]", R"({"messages":[]})", R"({"model":"","messages":[]})",
                          R"({"model":"m"})", R"({"model":"m","messages":[1]})",
                          R"({"model":"m","messages":[],"stream":"yes"})",
                          R"({"model":"m","messages":[],"max_tokens":0})",
                          R"({"model":"m","messages":[],"max_tokens":"5"})"}) {
    EXPECT_FALSE(parse_request(Api::openai, bad, err).has_value()) << bad;
  }
}

TEST(OpenAiWire, StreamChunks) {
  auto r = info(Api::openai, true);
  const Answer two = text_answer({"Hello", " world"}, Finish::length);
  auto f0 = frames(stream_token(r, two, 0));
  ASSERT_EQ(f0.size(), 1u);
  auto c0 = json::parse(f0[0].data).as_object();
  EXPECT_EQ(c0.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(c0.at("id").as_string(), "chatcmpl-1");
  auto d0 = c0.at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_EQ(d0.at("role").as_string(), "assistant");
  EXPECT_EQ(d0.at("content").as_string(), "Hello");

  auto f1 = frames(stream_token(r, two, 1));
  auto d1 = json::parse(f1[0].data).as_object().at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_FALSE(d1.contains("role"));

  auto end = frames(stream_end(r, two, {}));
  ASSERT_EQ(end.size(), 3u);
  auto fin = json::parse(end[0].data).as_object();
  EXPECT_EQ(fin.at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "length");
  auto usage = json::parse(end[1].data).as_object();
  EXPECT_TRUE(usage.at("choices").as_array().empty());
  EXPECT_EQ(usage.at("usage").as_object().at("completion_tokens").as_int64(), 2);
  EXPECT_EQ(usage.at("usage").as_object().at("prompt_tokens").as_int64(), 12);
  EXPECT_EQ(usage.at("usage").as_object().at("total_tokens").as_int64(), 14);
  EXPECT_EQ(end[2].data, "[DONE]");

  r.include_usage = false;
  end = frames(stream_end(r, text_answer({"Hello", " world"}, Finish::stop), {}));
  ASSERT_EQ(end.size(), 2u);
  EXPECT_EQ(json::parse(end[0].data).as_object().at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "stop");
}

TEST(OpenAiWire, FullBody) {
  auto b = json::parse(full_body(info(Api::openai), text_answer({"Hello", " world"}, Finish::stop), {})).as_object();
  EXPECT_EQ(b.at("object").as_string(), "chat.completion");
  auto ch = b.at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("message").as_object().at("content").as_string(), "Hello world");
  EXPECT_EQ(ch.at("finish_reason").as_string(), "stop");
  EXPECT_EQ(b.at("usage").as_object().at("completion_tokens").as_int64(), 2);
}

TEST(OllamaWire, NdjsonLines) {
  auto r = info(Api::ollama);
  std::string line = stream_token(r, text_answer({"Hello"}, Finish::stop), 0);
  ASSERT_EQ(line.back(), '\n');
  auto o = json::parse(line).as_object();
  EXPECT_EQ(o.at("model").as_string(), "m1");
  EXPECT_FALSE(o.at("done").as_bool());
  EXPECT_EQ(o.at("message").as_object().at("content").as_string(), "Hello");
  EXPECT_EQ(o.at("created_at").as_string().size(), std::string("2024-01-01T00:00:00.000000000Z").size());

  Timing t{5000, 1000, 2000, 3000};
  auto fin = json::parse(stream_end(r, text_answer({"a", " b", " c"}, Finish::length), t)).as_object();
  EXPECT_TRUE(fin.at("done").as_bool());
  EXPECT_EQ(fin.at("done_reason").as_string(), "length");
  EXPECT_EQ(fin.at("message").as_object().at("content").as_string(), "");
  EXPECT_EQ(fin.at("eval_count").as_int64(), 3);
  EXPECT_EQ(fin.at("prompt_eval_count").as_int64(), 12);
  EXPECT_EQ(fin.at("total_duration").as_int64(), 5000);
  EXPECT_EQ(fin.at("load_duration").as_int64(), 1000);
  EXPECT_EQ(fin.at("prompt_eval_duration").as_int64(), 2000);
  EXPECT_EQ(fin.at("eval_duration").as_int64(), 3000);

  auto full = json::parse(full_body(r, text_answer({"Hello"}, Finish::stop), t)).as_object();
  EXPECT_EQ(full.at("message").as_object().at("content").as_string(), "Hello");
  EXPECT_EQ(full.at("done_reason").as_string(), "stop");
}

TEST(AnthropicWire, EventSequence) {
  auto r = info(Api::anthropic);
  const Answer a = text_answer({"Hello", " world"}, Finish::stop);
  std::string all = stream_token(r, a, 0) + stream_token(r, a, 1) + stream_end(r, a, {});
  auto fs = frames(all);
  std::vector<std::string> types;
  for (auto& f : fs) {
    types.push_back(f.event);
    auto d = json::parse(f.data).as_object();
    EXPECT_EQ(d.at("type").as_string(), f.event);  // event name matches the data's type
  }
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                             "content_block_delta", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  auto start = json::parse(fs[0].data).as_object().at("message").as_object();
  EXPECT_EQ(start.at("id").as_string(), "msg_1");
  EXPECT_EQ(start.at("usage").as_object().at("input_tokens").as_int64(), 12);
  auto delta = json::parse(fs[4].data).as_object().at("delta").as_object();
  EXPECT_EQ(delta.at("type").as_string(), "text_delta");
  EXPECT_EQ(delta.at("text").as_string(), " world");
  auto md = json::parse(fs[6].data).as_object();
  EXPECT_EQ(md.at("delta").as_object().at("stop_reason").as_string(), "end_turn");
  EXPECT_EQ(md.at("usage").as_object().at("output_tokens").as_int64(), 2);
}

TEST(AnthropicWire, FullBody) {
  auto b = json::parse(full_body(info(Api::anthropic), text_answer({"Hello"}, Finish::length), {})).as_object();
  EXPECT_EQ(b.at("type").as_string(), "message");
  EXPECT_EQ(b.at("role").as_string(), "assistant");
  EXPECT_EQ(b.at("stop_reason").as_string(), "max_tokens");
  EXPECT_TRUE(b.at("stop_sequence").is_null());
  EXPECT_EQ(b.at("content").as_array()[0].as_object().at("text").as_string(), "Hello");
  EXPECT_EQ(b.at("usage").as_object().at("output_tokens").as_int64(), 1);
}

TEST(Errors, ShapesPerApi) {
  auto o = error_response(Api::openai, ErrorKind::rate_limited, "slow down");
  EXPECT_EQ(o.status, 429);
  ASSERT_EQ(o.headers.size(), 1u);
  EXPECT_EQ(o.headers[0].first, "Retry-After");
  auto oj = json::parse(o.body).as_object().at("error").as_object();
  EXPECT_EQ(oj.at("message").as_string(), "slow down");
  EXPECT_EQ(oj.at("code").as_string(), "rate_limit_exceeded");

  auto l = error_response(Api::ollama, ErrorKind::internal, "boom");
  EXPECT_EQ(l.status, 500);
  EXPECT_EQ(json::parse(l.body).as_object().at("error").as_string(), "boom");

  auto a = error_response(Api::anthropic, ErrorKind::queue_full, "queue full");
  EXPECT_EQ(a.status, 503);
  auto aj = json::parse(a.body).as_object();
  EXPECT_EQ(aj.at("type").as_string(), "error");
  EXPECT_EQ(aj.at("error").as_object().at("type").as_string(), "overloaded_error");
}

TEST(Listings, ModelsAndTags) {
  auto m = json::parse(openai_models_body({"a", "b"}, 1)).as_object();
  EXPECT_EQ(m.at("object").as_string(), "list");
  ASSERT_EQ(m.at("data").as_array().size(), 2u);
  auto m0 = m.at("data").as_array()[0].as_object();
  EXPECT_EQ(m0.at("id").as_string(), "a");
  EXPECT_EQ(m0.at("object").as_string(), "model");
  EXPECT_EQ(m0.at("owned_by").as_string(), "sluice-sim");

  auto t = json::parse(ollama_tags_body({"llama3"})).as_object();
  auto t0 = t.at("models").as_array()[0].as_object();
  EXPECT_EQ(t0.at("name").as_string(), "llama3");
  EXPECT_EQ(t0.at("model").as_string(), "llama3");
  EXPECT_EQ(t0.at("digest").as_string().size(), 64u);
  EXPECT_TRUE(t0.at("details").is_object());
}

// ---------------------------------------------------------------------------------------
// Tool calls, stop sequences and log probabilities on the wire

namespace {

// A call of get_weather with arguments {"city": "Paris"} in 5 pieces (6 tokens).
Answer tool_answer(Finish finish = Finish::tool_calls) {
  Answer a;
  a.tool_call = ToolCall{"call_abc", "get_weather"};
  for (const char* p : {"{", "\"city\":", " \"Paris\"", "}"}) a.content.add(p);
  a.finish = finish;
  return a;
}

json::object chunk_choice(const sluice::sim::testing::SseFrame& f) {
  return json::parse(f.data).as_object().at("choices").as_array()[0].as_object();
}

}  // namespace

TEST(OpenAiWire, ToolCallStreamedAndWhole) {
  auto r = info(Api::openai, true);
  const Answer a = tool_answer();
  ASSERT_EQ(a.tokens(), 5);
  // Token 0: the head with id, type and name; then one arguments piece per token.
  auto head = chunk_choice(frames(stream_token(r, a, 0))[0]);
  auto d0 = head.at("delta").as_object();
  EXPECT_EQ(d0.at("role"), "assistant");
  EXPECT_TRUE(d0.at("content").is_null());
  auto tc0 = d0.at("tool_calls").as_array()[0].as_object();
  EXPECT_EQ(tc0.at("index"), 0);
  EXPECT_EQ(tc0.at("id"), "call_abc");
  EXPECT_EQ(tc0.at("type"), "function");
  EXPECT_EQ(tc0.at("function").as_object().at("name"), "get_weather");
  EXPECT_EQ(tc0.at("function").as_object().at("arguments"), "");
  std::string args;
  for (std::int64_t i = 1; i < a.tokens(); ++i) {
    auto d = chunk_choice(frames(stream_token(r, a, i))[0]).at("delta").as_object();
    EXPECT_FALSE(d.contains("role"));
    auto tc = d.at("tool_calls").as_array()[0].as_object();
    EXPECT_EQ(tc.at("index"), 0);
    EXPECT_FALSE(tc.contains("id"));
    args += tc.at("function").as_object().at("arguments").as_string();
  }
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  auto end = frames(stream_end(r, a, {}));
  EXPECT_EQ(chunk_choice(end[0]).at("finish_reason"), "tool_calls");
  EXPECT_EQ(json::parse(end[1].data).as_object().at("usage").as_object().at("completion_tokens"), 5);

  auto b = json::parse(full_body(info(Api::openai), a, {})).as_object();
  auto ch = b.at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("finish_reason"), "tool_calls");
  auto m = ch.at("message").as_object();
  EXPECT_TRUE(m.at("content").is_null());
  auto call = m.at("tool_calls").as_array()[0].as_object();
  EXPECT_EQ(call.at("id"), "call_abc");
  EXPECT_FALSE(call.contains("index"));
  EXPECT_EQ(call.at("function").as_object().at("arguments"), "{\"city\": \"Paris\"}");
  // Cut by the limit: finish "length", the arguments as far as they came.
  Answer cut = tool_answer(Finish::length);
  cut.content.truncate(2);
  ch = json::parse(full_body(info(Api::openai), cut, {})).as_object().at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("finish_reason"), "length");
  EXPECT_EQ(ch.at("message").as_object().at("tool_calls").as_array()[0].as_object().at("function").as_object().at("arguments"),
            "{\"city\":");
}

TEST(OpenAiWire, LogprobsInTheBodyAndInEachChunk) {
  auto r = info(Api::openai);
  r.logprobs = true;
  r.top_logprobs = 2;
  Answer a;
  for (const char* p : {"Science", " home"}) a.content.add(p);
  a.seed = 0;
  auto b = json::parse(full_body(r, a, {})).as_object();
  auto lp = b.at("choices").as_array()[0].as_object().at("logprobs").as_object();
  EXPECT_TRUE(lp.at("refusal").is_null());
  auto content = lp.at("content").as_array();
  ASSERT_EQ(content.size(), 2u);
  auto e1 = content[1].as_object();
  EXPECT_EQ(e1.at("token"), " home");
  EXPECT_EQ(e1.at("logprob").to_number<double>(), token_logprob(0, 1));
  EXPECT_EQ(e1.at("bytes"), json::parse("[32,104,111,109,101]"));
  auto top = e1.at("top_logprobs").as_array();
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].as_object().at("token"), " home");
  EXPECT_TRUE(top[1].as_object().contains("bytes"));
  EXPECT_LT(top[1].as_object().at("logprob").to_number<double>(), e1.at("logprob").to_number<double>());
  // Written in plain decimals.
  EXPECT_NE(full_body(r, a, {}).find("\"logprob\":-0.664,"), std::string::npos);

  for (std::int64_t i = 0; i < 2; ++i) {
    auto c = chunk_choice(frames(stream_token(r, a, i))[0]);
    auto entries = c.at("logprobs").as_object().at("content").as_array();
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].as_object().at("token").as_string(), a.token(i));
    EXPECT_EQ(c.at("delta").as_object().at("content").as_string(), a.token(i));
    EXPECT_EQ(c.at("delta").as_object().contains("role"), i == 0);
  }
  EXPECT_TRUE(chunk_choice(frames(stream_end(r, a, {}))[0]).at("logprobs").is_null());
  // Not asked: null.
  r.logprobs = false;
  EXPECT_TRUE(json::parse(full_body(r, a, {})).as_object().at("choices").as_array()[0].as_object().at("logprobs").is_null());
  EXPECT_TRUE(chunk_choice(frames(stream_token(r, a, 1))[0]).at("logprobs").is_null());
}

TEST(AnthropicWire, ToolUseStreamedAndWhole) {
  auto r = info(Api::anthropic);
  Answer a = tool_answer();
  a.tool_call->id = "toolu_abc";
  std::string all;
  for (std::int64_t i = 0; i < a.tokens(); ++i) all += stream_token(r, a, i);
  all += stream_end(r, a, {});
  std::vector<std::string> types;
  std::string partial;
  for (const auto& f : frames(all)) {
    types.push_back(f.event);
    auto d = json::parse(f.data).as_object();
    if (f.event == "content_block_start") {
      auto block = d.at("content_block").as_object();
      EXPECT_EQ(block.at("type"), "tool_use");
      EXPECT_EQ(block.at("id"), "toolu_abc");
      EXPECT_EQ(block.at("name"), "get_weather");
      EXPECT_TRUE(block.at("input").as_object().empty());
    }
    if (f.event == "content_block_delta") {
      EXPECT_EQ(d.at("delta").as_object().at("type"), "input_json_delta");
      partial += d.at("delta").as_object().at("partial_json").as_string();
    }
    if (f.event == "message_delta") {
      EXPECT_EQ(d.at("delta").as_object().at("stop_reason"), "tool_use");
      EXPECT_EQ(d.at("usage").as_object().at("output_tokens"), 5);
    }
  }
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "content_block_start", "ping", "content_block_delta",
                                             "content_block_delta", "content_block_delta", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(json::parse(partial), json::parse(R"({"city":"Paris"})"));

  auto b = json::parse(full_body(r, a, {})).as_object();
  EXPECT_EQ(b.at("stop_reason"), "tool_use");
  auto block = b.at("content").as_array()[0].as_object();
  EXPECT_EQ(block.at("type"), "tool_use");
  EXPECT_EQ(block.at("input"), json::parse(R"({"city":"Paris"})"));
  // Cut short: the input is {} and the stop reason max_tokens.
  Answer cut = tool_answer(Finish::length);
  cut.content.truncate(2);
  b = json::parse(full_body(r, cut, {})).as_object();
  EXPECT_EQ(b.at("stop_reason"), "max_tokens");
  EXPECT_TRUE(b.at("content").as_array()[0].as_object().at("input").as_object().empty());
}

TEST(AnthropicWire, StopSequenceNamed) {
  auto r = info(Api::anthropic);
  Answer a;
  a.content.add("Hello");
  a.finish = Finish::stop_sequence;
  a.stop_sequence = "\n\nHuman:";
  auto b = json::parse(full_body(r, a, {})).as_object();
  EXPECT_EQ(b.at("stop_reason"), "stop_sequence");
  EXPECT_EQ(b.at("stop_sequence"), "\n\nHuman:");
  auto fs = frames(stream_token(r, a, 0) + stream_end(r, a, {}));
  auto md = json::parse(fs[fs.size() - 2].data).as_object();
  EXPECT_EQ(md.at("delta").as_object().at("stop_reason"), "stop_sequence");
  EXPECT_EQ(md.at("delta").as_object().at("stop_sequence"), "\n\nHuman:");
  // OpenAI and Ollama say "stop".
  EXPECT_EQ(json::parse(full_body(info(Api::openai), a, {})).as_object().at("choices").as_array()[0].as_object().at("finish_reason"), "stop");
  EXPECT_EQ(json::parse(full_body(info(Api::ollama), a, {})).as_object().at("done_reason"), "stop");
}

TEST(OllamaWire, ToolCallInOneLineWithObjectArguments) {
  auto r = info(Api::ollama);
  const Answer a = tool_answer();
  // Only the last token's line carries the call, whole.
  for (std::int64_t i = 0; i + 1 < a.tokens(); ++i) EXPECT_EQ(stream_token(r, a, i), "") << i;
  auto line = json::parse(stream_token(r, a, a.tokens() - 1)).as_object();
  EXPECT_FALSE(line.at("done").as_bool());
  auto m = line.at("message").as_object();
  EXPECT_EQ(m.at("content"), "");
  auto fn = m.at("tool_calls").as_array()[0].as_object().at("function").as_object();
  EXPECT_EQ(fn.at("name"), "get_weather");
  EXPECT_EQ(fn.at("arguments"), json::parse(R"({"city":"Paris"})"));
  auto fin = json::parse(stream_end(r, a, {})).as_object();
  EXPECT_EQ(fin.at("done_reason"), "stop");
  EXPECT_EQ(fin.at("eval_count"), 5);
  auto full = json::parse(full_body(r, a, {})).as_object();
  EXPECT_EQ(full.at("message").as_object().at("tool_calls").as_array()[0].as_object().at("function").as_object().at("arguments"),
            json::parse(R"({"city":"Paris"})"));
}

TEST(ParseRequest, OllamaLoadOptionsAndKeepAlive) {
  std::string err;
  auto r = parse_request(Api::ollama,
                         R"({"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"0s",)"
                         R"("options":{"num_ctx":8192,"num_gpu":-1,"num_batch":64}})",
                         err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->load.num_ctx, 8192);
  EXPECT_EQ(r->load.num_gpu, -1);
  EXPECT_EQ(r->load.num_batch, 64);
  EXPECT_TRUE(r->unload_after);
  r = parse_request(Api::ollama, R"({"model":"m","messages":[{"role":"user","content":"hi"}],"keep_alive":"5m"})", err);
  ASSERT_TRUE(r) << err;
  EXPECT_FALSE(r->unload_after);
  EXPECT_EQ(r->load, LoadOptions{});  // Ollama's defaults
  const auto ka = [](const char* json) {
    const auto v = boost::json::parse(json);
    return keep_alive_zero(&v);
  };
  EXPECT_TRUE(ka("0"));
  EXPECT_TRUE(ka(R"("0ms")"));
  EXPECT_TRUE(ka(R"("0.0m")"));
  EXPECT_TRUE(ka(R"("0")"));
  EXPECT_FALSE(ka(R"("10ms")"));
  EXPECT_FALSE(ka(R"("")"));
  EXPECT_FALSE(ka(R"("0x")"));
  EXPECT_FALSE(ka("-1"));
  for (const char* bad : {R"({"num_ctx":0})", R"({"num_gpu":-2})", R"({"num_batch":"64"})", R"({"num_ctx":1.5})",
                          R"({"num_ctx":9223372036854775807})"}) {
    err.clear();
    EXPECT_FALSE(parse_request(Api::ollama,
                               std::string(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"options":)") + bad + "}",
                               err))
        << bad;
    EXPECT_NE(err.find("options.num_"), std::string::npos) << err;
  }
}
