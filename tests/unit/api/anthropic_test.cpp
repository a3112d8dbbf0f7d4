// The Anthropic Messages API on the client side: request conversion, answers, events.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <string>
#include <vector>

#include "api/messages.hpp"
#include "llm/anthropic.hpp"
#include "anthropic_helpers.hpp"

using namespace sluice;
using namespace sluice::llm;
using namespace sluice::api;
namespace json = boost::json;
using namespace sluice::api::testing;

namespace {

std::string chunk(std::string_view delta, std::string_view finish = "null") {
  return "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":" + std::string(delta) +
         ",\"finish_reason\":" + std::string(finish) + "}]}\n\n";
}

}  // namespace

TEST(AnthropicRequest, BecomesTheEquivalentChatRequest) {
  auto o = converted(R"({"model":"claude","max_tokens":64,"system":[{"type":"text","text":"Be brief."}],
    "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "stream":true,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END"],"metadata":{"user_id":"u-1"}})");
  EXPECT_EQ(json::serialize(o["messages"]),
            R"([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"a\nb"}])");
  EXPECT_EQ(o["model"], "claude");
  EXPECT_EQ(o["max_tokens"], 64);
  EXPECT_EQ(o["stream"], true);
  EXPECT_EQ(json::serialize(o["stream_options"]), R"({"include_usage":true})");
  EXPECT_EQ(o["temperature"], 0.5);
  EXPECT_EQ(json::serialize(o["options"]), R"({"top_k":40})");
  EXPECT_EQ(json::serialize(o["stop"]), R"(["END"])");
  EXPECT_EQ(o["user"], "u-1");
  // Not streamed: no stream_options.
  EXPECT_FALSE(converted(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]})").contains("stream_options"));
}

TEST(AnthropicRequest, RefusesWhatItCannotCarryNamingTheField) {
  EXPECT_EQ(refused("{").reason, Reason::bad_json);
  EXPECT_EQ(refused(R"({"model":"m","messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]})").param, "max_tokens");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[]})").param, "messages");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]})").param, "messages[0].role");
  auto img = refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]})");
  EXPECT_EQ(img.param, "messages[0].content[0].type");
  EXPECT_NE(img.message.find("'image' are not supported"), std::string::npos) << img.message;
  auto tools = refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}})");
  EXPECT_EQ(tools.reason, Reason::option_not_allowed);
  EXPECT_EQ(tools.param, "thinking");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stop_sequences":[1]})").param,
            "stop_sequences");
}

TEST(AnthropicAnswer, CarriesTextStopReasonAndUsage) {
  Completion done;
  done.body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":"Hello \"there\""},"finish_reason":"length"}]})";
  done.usage = {12, 3};
  done.finish_reason = "length";
  auto m = json::parse(chat_to_anthropic(done, "claude", "r1")).as_object();
  EXPECT_EQ(m["id"], "msg_r1");
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["model"], "claude");
  EXPECT_EQ(json::serialize(m["content"]), R"([{"type":"text","text":"Hello \"there\""}])");
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(json::serialize(m["usage"]), R"({"input_tokens":12,"output_tokens":3})");
  done.finish_reason = "stop";
  EXPECT_EQ(json::parse(chat_to_anthropic(done, "c", "r")).as_object()["stop_reason"], "end_turn");
}

TEST(AnthropicErrors, TypesFollowTheStatus) {
  auto e = json::parse(anthropic_error_body(Reason::invalid_key, "bad key")).as_object();
  EXPECT_EQ(json::serialize(e), R"({"type":"error","error":{"type":"authentication_error","message":"bad key"}})");
  EXPECT_EQ(json::parse(anthropic_error_body(Reason::rate_limited, "x")).at("error").at("type"), "rate_limit_error");
  EXPECT_EQ(json::parse(anthropic_error_body(Reason::queue_timeout, "x")).at("error").at("type"), "overloaded_error");
  EXPECT_EQ(json::parse(anthropic_error_body(Reason::upstream_error, "x")).at("error").at("type"), "api_error");
  auto passed = json::parse(anthropic_error_from_chat(400, R"({"error":{"message":"context too long","type":"x"}})"));
  EXPECT_EQ(passed.at("error").at("message"), "context too long");
  EXPECT_EQ(passed.at("error").at("type"), "invalid_request_error");
}

TEST(AnthropicStream, ChunksBecomeMessagesEvents) {
  ChatRequest req;
  req.model = "claude";
  req.stream = true;
  req.include_usage = true;
  auto tr = make_anthropic_output(make_openai_stream(req), "claude", "r9", 7);
  std::string out;
  ASSERT_TRUE(tr->feed(chunk(R"({"role":"assistant","content":""})"), out));
  EXPECT_EQ(out, "");  // nothing to say before the first text
  ASSERT_TRUE(tr->feed(chunk(R"({"content":"Hel"})") + chunk(R"({"content":"lo"})"), out));
  ASSERT_TRUE(tr->feed(chunk("{}", "\"stop\"") +
                           "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
                           "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n" +
                           "data: [DONE]\n\n",
                       out));
  ASSERT_TRUE(tr->finish(out));
  auto ev = events(out);
  ASSERT_EQ(ev.size(), 7u) << out;
  EXPECT_EQ(ev[0].first, "message_start");
  EXPECT_EQ(ev[0].second.at("message").at("id"), "msg_r9");
  EXPECT_EQ(ev[0].second.at("message").at("usage").at("input_tokens"), 7);
  EXPECT_EQ(ev[1].first, "content_block_start");
  EXPECT_EQ(ev[2].second.at("delta").at("text"), "Hel");
  EXPECT_EQ(ev[3].second.at("delta").at("text"), "lo");
  EXPECT_EQ(ev[4].first, "content_block_stop");
  EXPECT_EQ(ev[5].first, "message_delta");
  EXPECT_EQ(ev[5].second.at("delta").at("stop_reason"), "end_turn");
  EXPECT_EQ(ev[5].second.at("usage").at("output_tokens"), 2);
  // The upstream's prompt count corrects message_start's estimate (7).
  EXPECT_EQ(ev[5].second.at("usage").at("input_tokens"), 9);
  EXPECT_EQ(ev[6].first, "message_stop");
  // The inner translator's accounting shows through.
  EXPECT_EQ(tr->content_chunks(), 2);
  EXPECT_EQ(tr->usage().completion_tokens, 2);
  EXPECT_TRUE(tr->done());
}

TEST(AnthropicStream, AnUpstreamErrorEventBecomesAnErrorEvent) {
  ChatRequest req;
  req.stream = true;
  auto tr = make_anthropic_output(make_openai_stream(req), "claude", "r", 1);
  std::string out;
  tr->feed(chunk(R"({"content":"a"})") + "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n", out);
  tr->finish(out);
  auto ev = events(out);
  ASSERT_GE(ev.size(), 4u) << out;
  EXPECT_EQ(ev.back().first, "error");
  EXPECT_EQ(ev.back().second.at("error").at("message"), "overloaded");
  EXPECT_EQ(tr->error().empty(), false);
  EXPECT_EQ(events(anthropic_error_event(Reason::upstream_stream_failed, "cut"))[0].second.at("error").at("message"), "cut");
}

TEST(AnthropicUpstream, EventsBecomeChunksWithUsage) {
  ChatRequest req;
  req.model = "claude";
  req.stream = true;
  req.include_usage = true;
  auto tr = make_anthropic_stream(req, "r1");
  const std::string up =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0}\n\n"
      "event: ping\ndata: {\"type\":\"ping\"}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" you\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":2}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  std::string out;
  // Split mid-event: the SSE framing reassembles.
  ASSERT_TRUE(tr->feed(std::string_view(up).substr(0, 150), out));
  ASSERT_TRUE(tr->feed(std::string_view(up).substr(150), out));
  ASSERT_TRUE(tr->finish(out));
  std::vector<json::object> chunks;
  std::string_view rest = out;
  while (!rest.empty()) {
    const auto end = rest.find("\n\n");
    ASSERT_TRUE(rest.starts_with("data: ") && end != std::string_view::npos) << out;
    const auto data = rest.substr(6, end - 6);
    if (data != "[DONE]") chunks.push_back(json::parse(data).as_object());
    rest.remove_prefix(end + 2);
  }
  ASSERT_EQ(chunks.size(), 4u) << out;
  EXPECT_EQ(chunks[0].at("id"), "chatcmpl-r1");
  EXPECT_EQ(chunks[0].at("model"), "claude");
  EXPECT_EQ(json::serialize(chunks[0].at("choices").at(0).at("delta")), R"({"role":"assistant","content":"Hi"})");
  EXPECT_EQ(chunks[1].at("choices").at(0).at("delta").at("content"), " you");
  EXPECT_EQ(chunks[2].at("choices").at(0).at("finish_reason"), "length");
  EXPECT_EQ(json::serialize(chunks[3].at("usage")), R"({"prompt_tokens":9,"completion_tokens":2,"total_tokens":11})");
  EXPECT_TRUE(out.ends_with("data: [DONE]\n\n"));
  EXPECT_EQ(tr->usage().prompt_tokens, 9);
  EXPECT_EQ(tr->usage().completion_tokens, 2);
  EXPECT_EQ(tr->content_chunks(), 2);
}

TEST(AnthropicUpstream, AnErrorEventEndsTheStreamAndATruncatedOneIsNotDone) {
  ChatRequest req;
  req.stream = true;
  auto tr = make_anthropic_stream(req, "r");
  std::string out;
  EXPECT_FALSE(tr->feed("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", out));
  EXPECT_EQ(tr->error(), "Overloaded");
  EXPECT_NE(out.find("\"error\""), std::string::npos);
  auto cut = make_anthropic_stream(req, "r");
  std::string o2;
  ASSERT_TRUE(cut->feed("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"x\"}}\n\n", o2));
  EXPECT_FALSE(cut->finish(o2));  // message_stop never came
}

TEST(AnthropicUpstream, RequestAndAnswerTranslation) {
  ChatRequest req;
  req.model = "alias";
  req.body = json::parse(R"({"model":"alias","messages":[{"role":"developer","content":"D"},{"role":"user","content":[{"type":"text","text":"q"}]},
    {"role":"assistant","content":null},{"role":"tool","content":"42"}],"top_p":0.5})").as_object();
  sluice::config::Backend b;
  b.model = "claude-3";
  b.path_prefix = "/v1";
  auto call = build_anthropic_call(req, b);
  EXPECT_EQ(call.target, "/v1/messages");
  EXPECT_EQ(call.body,
            R"({"model":"claude-3","system":"D","messages":[{"role":"user","content":"q\n\n[tool result] 42"}],"max_tokens":4096,"top_p":5E-1})");
  auto done = translate_anthropic_completion(
      R"({"content":[{"type":"text","text":"A"},{"type":"text","text":"B"}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":2}})",
      req, "id7");
  ASSERT_TRUE(done);
  auto c = json::parse(done->body).as_object();
  EXPECT_EQ(c.at("choices").at(0).at("message").at("content"), "AB");
  EXPECT_EQ(c.at("choices").at(0).at("finish_reason"), "tool_calls");
  EXPECT_EQ(done->usage.prompt_tokens, 3);
  EXPECT_FALSE(translate_anthropic_completion(R"({"type":"error","error":{"message":"x"}})", req, "i"));
  EXPECT_EQ(chat_error_from_anthropic(R"({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})"),
            R"({"error":{"message":"slow down","type":"rate_limit_error","code":null,"param":null}})");
}

// Found by fuzz_chat_request (the same defect on this side): a number beyond double's
// range became `Infinity`, which is not JSON, in the converted body or the answer.
TEST(AnthropicRequest, NumberBeyondDoubleRangeIsRefused) {
  EXPECT_EQ(refused(R"({"model":"c","max_tokens":16,"temperature":1e400,"messages":[{"role":"user","content":"hi"}]})")
                .reason,
            Reason::bad_json);
}

TEST(AnthropicAnswer, ToolArgumentsBeyondDoubleRangeBecomeEmptyInput) {
  Completion done;
  done.body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[)"
              R"({"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":1e400}"}}]},)"
              R"("finish_reason":"tool_calls"}]})";
  done.finish_reason = "tool_calls";
  const std::string out = chat_to_anthropic(done, "c", "r");
  boost::system::error_code ec;
  auto v = json::parse(out, ec);
  ASSERT_FALSE(ec) << out;
  EXPECT_EQ(out.find("Infinity"), std::string::npos) << out;
  EXPECT_NE(out.find(R"("input":{})"), std::string::npos) << out;
}
