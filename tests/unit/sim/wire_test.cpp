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
  auto f0 = frames(stream_token(r, 0, "tok0 "));
  ASSERT_EQ(f0.size(), 1u);
  auto c0 = json::parse(f0[0].data).as_object();
  EXPECT_EQ(c0.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(c0.at("id").as_string(), "chatcmpl-1");
  auto d0 = c0.at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_EQ(d0.at("role").as_string(), "assistant");
  EXPECT_EQ(d0.at("content").as_string(), "tok0 ");

  auto f1 = frames(stream_token(r, 1, "tok1 "));
  auto d1 = json::parse(f1[0].data).as_object().at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_FALSE(d1.contains("role"));

  auto end = frames(stream_end(r, 2, true, {}));
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
  end = frames(stream_end(r, 2, false, {}));
  ASSERT_EQ(end.size(), 2u);
  EXPECT_EQ(json::parse(end[0].data).as_object().at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "stop");
}

TEST(OpenAiWire, FullBody) {
  auto b = json::parse(full_body(info(Api::openai), "tok0 tok1 ", 2, false, {})).as_object();
  EXPECT_EQ(b.at("object").as_string(), "chat.completion");
  auto ch = b.at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("message").as_object().at("content").as_string(), "tok0 tok1 ");
  EXPECT_EQ(ch.at("finish_reason").as_string(), "stop");
  EXPECT_EQ(b.at("usage").as_object().at("completion_tokens").as_int64(), 2);
}

TEST(OllamaWire, NdjsonLines) {
  auto r = info(Api::ollama);
  std::string line = stream_token(r, 0, "tok0 ");
  ASSERT_EQ(line.back(), '\n');
  auto o = json::parse(line).as_object();
  EXPECT_EQ(o.at("model").as_string(), "m1");
  EXPECT_FALSE(o.at("done").as_bool());
  EXPECT_EQ(o.at("message").as_object().at("content").as_string(), "tok0 ");
  EXPECT_EQ(o.at("created_at").as_string().size(), std::string("2024-01-01T00:00:00.000000000Z").size());

  Timing t{5000, 1000, 2000, 3000};
  auto fin = json::parse(stream_end(r, 3, true, t)).as_object();
  EXPECT_TRUE(fin.at("done").as_bool());
  EXPECT_EQ(fin.at("done_reason").as_string(), "length");
  EXPECT_EQ(fin.at("message").as_object().at("content").as_string(), "");
  EXPECT_EQ(fin.at("eval_count").as_int64(), 3);
  EXPECT_EQ(fin.at("prompt_eval_count").as_int64(), 12);
  EXPECT_EQ(fin.at("total_duration").as_int64(), 5000);
  EXPECT_EQ(fin.at("load_duration").as_int64(), 1000);
  EXPECT_EQ(fin.at("prompt_eval_duration").as_int64(), 2000);
  EXPECT_EQ(fin.at("eval_duration").as_int64(), 3000);

  auto full = json::parse(full_body(r, "tok0 ", 1, false, t)).as_object();
  EXPECT_EQ(full.at("message").as_object().at("content").as_string(), "tok0 ");
  EXPECT_EQ(full.at("done_reason").as_string(), "stop");
}

TEST(AnthropicWire, EventSequence) {
  auto r = info(Api::anthropic);
  std::string all = stream_token(r, 0, "tok0 ") + stream_token(r, 1, "tok1 ") + stream_end(r, 2, false, {});
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
  EXPECT_EQ(delta.at("text").as_string(), "tok1 ");
  auto md = json::parse(fs[6].data).as_object();
  EXPECT_EQ(md.at("delta").as_object().at("stop_reason").as_string(), "end_turn");
  EXPECT_EQ(md.at("usage").as_object().at("output_tokens").as_int64(), 2);
}

TEST(AnthropicWire, FullBody) {
  auto b = json::parse(full_body(info(Api::anthropic), "tok0 ", 1, true, {})).as_object();
  EXPECT_EQ(b.at("type").as_string(), "message");
  EXPECT_EQ(b.at("role").as_string(), "assistant");
  EXPECT_EQ(b.at("stop_reason").as_string(), "max_tokens");
  EXPECT_TRUE(b.at("stop_sequence").is_null());
  EXPECT_EQ(b.at("content").as_array()[0].as_object().at("text").as_string(), "tok0 ");
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
