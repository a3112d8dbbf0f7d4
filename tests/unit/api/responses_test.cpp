// The Responses API's codec: requests to chat form, answers to Response objects, the
// output back to messages, and the memory store of responses.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "api/responses.hpp"

#include <vector>

using namespace sluice;
using namespace sluice::api;
namespace json = boost::json;

namespace {

json::object chat_of(std::string_view body) {
  auto r = responses_to_chat(body);
  if (auto* e = std::get_if<llm::RequestError>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return json::parse(std::get<ResponsesConversion>(r).chat).as_object();
}

llm::RequestError refused(std::string_view body) {
  auto r = responses_to_chat(body);
  EXPECT_TRUE(std::holds_alternative<llm::RequestError>(r)) << body;
  return std::holds_alternative<llm::RequestError>(r) ? std::get<llm::RequestError>(r) : llm::RequestError{};
}

TEST(ResponsesRequest, InputsInstructionsToolsAndFormatsBecomeTheChatRequest) {
  auto c = chat_of(R"({"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":9,"stream":true,
      "tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}],
      "tool_choice":{"type":"function","name":"f"},"text":{"format":{"type":"json_schema","name":"s","schema":{}}},
      "reasoning":{"effort":"low"},"metadata":{"a":"b"},"store":false})");
  EXPECT_EQ(c["messages"], json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])"));
  EXPECT_EQ(c["max_completion_tokens"], 9);
  EXPECT_EQ(c["stream"], true);
  EXPECT_EQ(c["stream_options"], json::parse(R"({"include_usage":true})"));
  EXPECT_EQ(c["tools"], json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}])"));
  EXPECT_EQ(c["tool_choice"], json::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(c["response_format"], json::parse(R"({"type":"json_schema","json_schema":{"name":"s","schema":{}}})"));
  EXPECT_EQ(c["reasoning_effort"], "low");
  EXPECT_FALSE(c.contains("metadata"));  // echoed, not sent
  EXPECT_FALSE(c.contains("store"));
}

TEST(ResponsesRequest, ItemsBecomeMessagesToolCallsAndToolResults) {
  auto c = chat_of(R"({"model":"m","input":[
      {"role":"user","content":[{"type":"input_text","text":"Weather?"},{"type":"input_image","image_url":"https://x/i.png","detail":"low"}]},
      {"type":"function_call","call_id":"c1","name":"w","arguments":"{}"},
      {"type":"function_call","call_id":"c2","name":"w","arguments":"{\"a\":1}"},
      {"type":"function_call_output","call_id":"c1","output":"sunny"},
      {"type":"reasoning","id":"r","summary":[]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]})");
  const auto& m = c["messages"].as_array();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].at("content").as_array()[1], json::parse(R"({"type":"image_url","image_url":{"url":"https://x/i.png","detail":"low"}})"));
  EXPECT_EQ(m[1].at("role"), "assistant");
  EXPECT_EQ(m[1].at("tool_calls").as_array().size(), 2u);  // consecutive calls: one message
  EXPECT_EQ(m[2], json::parse(R"({"role":"tool","tool_call_id":"c1","content":"sunny"})"));
  EXPECT_EQ(m[3], json::parse(R"({"role":"assistant","content":"ok"})"));
}

TEST(ResponsesRequest, WhatCannotBeHonouredIsRefusedNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"model":"m","input":"x","background":true})", "background"},
      {R"({"model":"m","input":"x","conversation":"c"})", "conversation"},
      {R"({"model":"m","input":[{"type":"item_reference"}]})", "input[0].id"},
      {R"({"model":"m","input":[{"type":7}]})", "input[0].type"},
      {R"({"model":"m","input":"x","tools":[{"name":"f"}]})", "tools[0].type"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"yaml"}}})", "text.format.type"},
      {R"({"model":"m","input":"x","truncation":"sometimes"})", "truncation"},
      {R"({"model":"m","input":"x","previous_response_id":""})", "previous_response_id"},
      {R"({"model":"m","input":"x","extra":1})", "extra"},
      {R"({"model":"m"})", "input"},
      {R"({"model":"m","input":[]})", "input"},
  };
  for (const auto& c : cases) EXPECT_EQ(refused(c.body).param, c.param) << c.body;
  EXPECT_EQ(refused("[1]").reason, Reason::bad_json);
}

// What only a backend serving the Responses API itself can do is not refused here: it is
// named (the route refuses it unless all its backends are such), left out of the chat
// form, and kept in the native form.
TEST(ResponsesRequest, WhatOnlyANativeBackendCanServeIsNamedAndKept) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"model":"m","input":"x","tools":[{"type":"web_search_preview"},{"type":"function","name":"f"}]})", "tools[0].type"},
      {R"({"model":"m","input":[{"role":"user","content":"q"},{"type":"computer_call_output","call_id":"x"}]})", "input[1].type"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_file","file_id":"f"}]}]})",
       "input[0].content[1].type"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}})", "tool_choice.type"},
      {R"({"model":"m","input":"x","top_logprobs":2})", "top_logprobs"},
      {R"({"model":"m","input":"x","prompt":{"id":"p"}})", "prompt"},
  };
  for (const auto& c : cases) {
    auto r = responses_to_chat(c.body);
    ASSERT_TRUE(std::holds_alternative<ResponsesConversion>(r)) << c.body << ": " << std::get<llm::RequestError>(r).message;
    const auto& conv = std::get<ResponsesConversion>(r);
    ASSERT_TRUE(conv.native_only) << c.body;
    EXPECT_EQ(conv.native_only->param, c.param);
    EXPECT_EQ(conv.native_only->reason, Reason::option_not_allowed);
    EXPECT_EQ(json::serialize(conv.native.at("input")).find("item_reference"), std::string::npos);
    EXPECT_TRUE(conv.native.at("input").is_array()) << c.body;
  }
  // The chat form keeps what it can hold; the native form everything, but the gateway's
  // own previous_response_id.
  auto r = std::get<ResponsesConversion>(responses_to_chat(
      R"({"model":"m","input":"x","previous_response_id":"resp_1","tools":[{"type":"web_search_preview"},{"type":"function","name":"f"}]})"));
  EXPECT_EQ(json::parse(r.chat).at("tools").as_array().size(), 1u);
  EXPECT_EQ(r.native.at("tools").as_array().size(), 2u);
  EXPECT_FALSE(r.native.contains("previous_response_id"));
  EXPECT_EQ(r.native.at("input"), json::parse(R"([{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}])"));
  EXPECT_FALSE(std::get<ResponsesConversion>(responses_to_chat(R"({"model":"m","input":"x"})")).native_only);
}

TEST(ResponsesAnswer, ACompletionBecomesAResponseWithItsItemsAndUsage) {
  auto conv = std::get<ResponsesConversion>(responses_to_chat(R"({"model":"m","input":"x","instructions":"i","user":"u"})"));
  llm::ChatRequest req;
  req.model = "alias";
  req.extra = conv.extra;
  llm::Completion done;
  done.body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":"Hi","tool_calls":[{"id":"c9","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]})";
  done.usage = {7, 3};
  done.finish_reason = "tool_calls";
  auto r = json::parse(chat_to_response(done, req)).as_object();
  EXPECT_EQ(r["id"], conv.extra["id"]);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "alias");
  EXPECT_EQ(r["instructions"], "i");
  EXPECT_EQ(r["user"], "u");
  const auto& out = r["output"].as_array();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].at("content").as_array()[0].at("text"), "Hi");
  EXPECT_EQ(out[1].at("call_id"), "c9");
  EXPECT_EQ(r["usage"].at("total_tokens"), 10);
  // Back to messages: one assistant message with its text and tool calls.
  auto m = response_output_messages(r);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].at("content"), "Hi");
  EXPECT_EQ(m[0].at("tool_calls").as_array()[0].at("id"), "c9");
  done.finish_reason = "length";
  EXPECT_EQ(json::parse(chat_to_response(done, req)).at("status"), "incomplete");
}

}  // namespace

namespace {

// The chunks an OpenAI upstream sends, through the Responses encoder.
std::vector<json::object> events_of(const std::vector<std::string>& chunks, llm::ChatRequest& req, bool fail_midway = false) {
  req.model = "alias";
  req.stream = true;
  auto conv = std::get<ResponsesConversion>(responses_to_chat(R"({"model":"m","input":"x","stream":true})"));
  req.extra = conv.extra;
  auto t = make_responses_output(llm::make_openai_stream(req), req);
  std::string in, out;
  for (const auto& c : chunks) in += "data: " + c + "\n\n";
  if (!fail_midway) in += "data: [DONE]\n\n";
  EXPECT_TRUE(t->feed(in, out));
  if (fail_midway) out += t->error_event(Reason::upstream_idle_timeout, "the upstream went silent");
  else EXPECT_TRUE(t->finish(out));
  std::vector<json::object> events;
  std::string_view rest = out;
  while (!rest.empty()) {
    const auto d = rest.find("data: ");
    const auto end = rest.find("\n\n", d);
    if (d == std::string_view::npos || end == std::string_view::npos) break;
    events.push_back(json::parse(rest.substr(d + 6, end - d - 6)).as_object());
    rest.remove_prefix(end + 2);
  }
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].at("sequence_number"), i);
  return events;
}

std::string call_chunk(int index, std::string_view id, std::string_view name, std::string_view args) {
  json::object fn{{"arguments", args}};
  if (!name.empty()) fn["name"] = name;
  json::object call{{"index", index}, {"function", fn}};
  if (!id.empty()) call["id"] = id;
  return json::serialize(json::object{
      {"choices", json::array{json::object{{"index", 0}, {"delta", json::object{{"tool_calls", json::array{call}}}}}}}});
}

TEST(ResponsesStream, InterleavedCallsKeepTheirArgumentsAndTextAfterACallIsAnotherMessage) {
  llm::ChatRequest req;
  const auto events = events_of(
      {call_chunk(0, "c0", "f", "{\"a\":"), call_chunk(1, "c1", "g", "{\"b\":2}"), call_chunk(0, "", "", "1}"),
       R"({"choices":[{"index":0,"delta":{"content":"after"}}]})",
       R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})"},
      req);
  const auto& done = events.back();
  ASSERT_EQ(done.at("type"), "response.completed");
  const auto& output = done.at("response").at("output").as_array();
  ASSERT_EQ(output.size(), 3u);
  EXPECT_EQ(output[0].at("arguments"), "{\"a\":1}");
  EXPECT_EQ(output[1].at("arguments"), "{\"b\":2}");
  EXPECT_EQ(output[2].at("type"), "message");
  EXPECT_EQ(output[2].at("content").at(0).at("text"), "after");
}

TEST(ResponsesStream, AFailureAfterTheStartEndsWithAnErrorAndResponseFailedInSequence) {
  llm::ChatRequest req;
  const auto events = events_of({R"({"choices":[{"index":0,"delta":{"content":"par"}}]})"}, req, true);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].at("type"), "error");
  EXPECT_EQ(events[events.size() - 2].at("code"), "upstream_idle_timeout");
  EXPECT_EQ(events.back().at("type"), "response.failed");
  EXPECT_EQ(events.back().at("response").at("status"), "failed");
}

}  // namespace

namespace {

TEST(ResponsesItems, AReferenceNamesItsResponseAndItsItem) {
  EXPECT_EQ(response_of_item("msg_0123abcd"), "resp_0123abcd");
  EXPECT_EQ(response_of_item("msg_0123abcd_2"), "resp_0123abcd");
  EXPECT_EQ(response_of_item("fc_0123abcd_0"), "resp_0123abcd");
  EXPECT_EQ(response_of_item("rs_0123_1"), "resp_0123");  // any kind of item of ours
  EXPECT_EQ(response_of_item("0123"), "");
  EXPECT_EQ(response_of_item("msg_"), "");
  const auto response = json::parse(R"({"output":[
      {"type":"message","id":"msg_a","content":[{"type":"output_text","text":"Hi"}]},
      {"type":"function_call","id":"fc_a_0","call_id":"c1","name":"f","arguments":"{}"}]})").as_object();
  EXPECT_EQ(output_item_message(response, "msg_a"), json::parse(R"({"role":"assistant","content":"Hi"})"));
  const auto call = output_item_message(response, "fc_a_0");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->at("tool_calls").at(0).at("id"), "c1");
  EXPECT_FALSE(output_item_message(response, "msg_b"));
  // The placeholder a reference becomes, until the store fills it.
  auto c = chat_of(R"({"model":"m","input":[{"type":"item_reference","id":"msg_a"},{"role":"user","content":"q"}]})");
  EXPECT_EQ(c["messages"].at(0).at(kItemRef), "msg_a");
}

}  // namespace

namespace {

// A stored conversation read back as chat: an item chat cannot read (one a sloppy
// upstream answered) is left out, not the whole conversation.
TEST(ResponsesItems, AStoredConversationLosesOnlyTheItemsChatCannotRead) {
  auto items = json::parse(R"([
      {"type":"message","role":"user","content":"Hi"},
      {"type":"message","content":"no role"},
      {"type":"reasoning","id":"rs_1","summary":[]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]}])").as_array();
  EXPECT_EQ(items_to_messages(items),
            json::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}])"));
}

}  // namespace
