// OpenAI's Responses API served natively: CreateResponse bodies read into a GenRequest,
// the Response object and the stream events (src/sim/responses.hpp).
#include <gtest/gtest.h>

#include "sse_frames.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <string>
#include <vector>

#include "sim/answer.hpp"
#include "sim/responses.hpp"
#include "sim/wire.hpp"

using namespace sluice;
using namespace sluice::sim;
namespace json = boost::json;

namespace {

GenRequest parse_ok(std::string_view body) {
  std::string err;
  auto r = parse_request(Api::responses, body, err);
  EXPECT_TRUE(r.has_value()) << err << " for " << body;
  return r.value_or(GenRequest{});
}

std::string parse_error(std::string_view body) {
  std::string err;
  auto r = parse_request(Api::responses, body, err);
  EXPECT_FALSE(r.has_value()) << body;
  return err;
}

config::SimSettings settings(int default_tokens = 5) {
  config::SimSettings s;
  s.default_output_tokens = default_tokens;
  return s;
}

// The reply identity serve() gives a Responses request.
ReplyInfo info_for(const GenRequest& req) {
  ReplyInfo r;
  r.api = Api::responses;
  r.id = "resp_0123abcd";
  r.model = req.model;
  r.created = 1700000000;
  r.prompt_tokens = req.prompt_tokens;
  r.echo = req.echo;
  return r;
}

struct Served {
  ReplyInfo info;
  Answer answer;
};

Served serve(std::string_view body, config::SimSettings s = settings()) {
  const GenRequest req = parse_ok(body);
  return {info_for(req), make_answer(req, s, "call_abc")};
}

// Every event of the streamed answer: what stream_token and stream_end write, in order.
std::vector<json::object> stream_events(const Served& sv) {
  std::string all;
  for (std::int64_t i = 0; i < sv.answer.tokens(); ++i) all += stream_token(sv.info, sv.answer, i);
  all += stream_end(sv.info, sv.answer, {});
  std::vector<json::object> out;
  for (const auto& f : sluice::sim::testing::sse_frames(all)) {
    json::object e = json::parse(f.data).as_object();
    EXPECT_EQ(f.event, e.at("type").as_string()) << f.data;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> types_of(const std::vector<json::object>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.emplace_back(e.at("type").as_string());
  return out;
}

std::string joined(const std::vector<json::object>& events, std::string_view type, std::string_view key) {
  std::string s;
  for (const auto& e : events) {
    if (e.at("type").as_string() == type) s += e.at(key).as_string();
  }
  return s;
}

}  // namespace

TEST(SimResponsesRequest, StringInputAndDefaults) {
  auto r = parse_ok(R"({"model":"gpt-5","input":"0123456789abcdef","instructions":"01234567"})");
  EXPECT_EQ(r.api, Api::responses);
  EXPECT_EQ(r.model, "gpt-5");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.prompt_tokens, 6);  // 16 + 8 bytes of input and instructions / 4
  EXPECT_FALSE(r.reasoning);
  EXPECT_EQ(r.format, Format::text);
  EXPECT_EQ(json::serialize(r.echo.at("instructions")), "\"01234567\"");
  EXPECT_EQ(r.echo.at("previous_response_id"), nullptr);
  EXPECT_EQ(r.echo.at("store").as_bool(), true);
  EXPECT_EQ(r.echo.at("tool_choice").as_string(), "auto");
  EXPECT_EQ(r.echo.at("text"), json::parse(R"({"format":{"type":"text"}})"));
  EXPECT_EQ(r.echo.at("reasoning"), json::parse(R"({"effort":null,"summary":null})"));
  EXPECT_TRUE(r.echo.at("tools").as_array().empty());
  EXPECT_FALSE(r.echo.contains("user"));

  r = parse_ok(R"({"model":"m","input":"x","stream":true,"max_output_tokens":7,"store":false,"temperature":0.5,
      "top_p":0.9,"metadata":{"k":"v"},"parallel_tool_calls":false,"user":"u1","truncation":"auto",
      "include":["reasoning.encrypted_content"],"stream_options":{"include_obfuscation":false},"previous_response_id":null})");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.prompt_tokens, 1);
  EXPECT_EQ(r.echo.at("max_output_tokens").as_int64(), 7);
  EXPECT_EQ(r.echo.at("store").as_bool(), false);
  EXPECT_EQ(r.echo.at("temperature").as_double(), 0.5);
  EXPECT_EQ(r.echo.at("metadata"), json::parse(R"({"k":"v"})"));
  EXPECT_EQ(r.echo.at("parallel_tool_calls").as_bool(), false);
  EXPECT_EQ(r.echo.at("user").as_string(), "u1");
  EXPECT_EQ(r.echo.at("truncation").as_string(), "auto");
}

TEST(SimResponsesRequest, InputItemsCountTheirTextAndNameTheLastUserMessage) {
  auto r = parse_ok(R"({"model":"m","input":[
      {"role":"system","content":"12345678"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"call get_weather"},
                                                   {"type":"input_image","image_url":"data:x"}]},
      {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"abcd"}]},
      {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"a\":1}"},
      {"type":"item_reference","id":"msg_9"},
      {"role":"assistant","content":[{"type":"output_text","text":"ok"},{"type":"refusal","refusal":"no"}]}],
      "tools":[{"type":"function","name":"get_weather"}]})");
  // 8 + 16 + 4 + 7 + 2 bytes
  EXPECT_EQ(r.prompt_tokens, 9);
  EXPECT_EQ(r.last_user_text, "call get_weather");
  EXPECT_FALSE(r.last_is_tool_result);

  r = parse_ok(R"({"model":"m","input":[{"role":"user","content":"use get_weather"},
      {"type":"function_call_output","call_id":"c1","output":"rain"}]})");
  EXPECT_TRUE(r.last_is_tool_result);
  EXPECT_EQ(r.prompt_tokens, 4);  // 15 + 4 bytes
  EXPECT_TRUE(parse_ok(R"({"model":"m","input":[]})").last_user_text.empty());
}

TEST(SimResponsesRequest, ToolsChoiceFormatAndReasoning) {
  auto r = parse_ok(R"({"model":"m","input":"x","tools":[
      {"type":"web_search_preview"},
      {"type":"function","name":"get_weather","description":"d","parameters":{"type":"object"},"strict":false},
      {"type":"function","name":"noop"}],
      "tool_choice":{"type":"function","name":"noop"},"reasoning":{"effort":"low","summary":"auto"},
      "text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object"}}}})");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_TRUE(r.tools[0].parameters.is_object());
  EXPECT_TRUE(r.tools[1].parameters.is_null());
  EXPECT_EQ(r.tool_choice, ToolChoice::named);
  EXPECT_EQ(r.tool_choice_name, "noop");
  EXPECT_EQ(r.format, Format::json_schema);
  EXPECT_EQ(r.schema, json::parse(R"({"type":"object"})"));
  EXPECT_TRUE(r.reasoning);
  EXPECT_EQ(r.echo.at("reasoning"), json::parse(R"({"effort":"low","summary":"auto"})"));
  // Function tools as a Response lists them (strict true unless said); others as given.
  EXPECT_EQ(r.echo.at("tools"), json::parse(R"([{"type":"web_search_preview"},
      {"type":"function","name":"get_weather","description":"d","parameters":{"type":"object"},"strict":false},
      {"type":"function","name":"noop","description":null,"parameters":null,"strict":true}])"));
  EXPECT_EQ(r.echo.at("tool_choice"), json::parse(R"({"type":"function","name":"noop"})"));

  EXPECT_EQ(parse_ok(R"({"model":"m","input":"x","tool_choice":"none"})").tool_choice, ToolChoice::none);
  EXPECT_EQ(parse_ok(R"({"model":"m","input":"x","tool_choice":"required"})").tool_choice, ToolChoice::required);
  EXPECT_EQ(parse_ok(R"({"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}})").tool_choice,
            ToolChoice::automatic);
  EXPECT_EQ(parse_ok(R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})").format,
            Format::json_object);
  EXPECT_EQ(parse_ok(R"({"model":"m","input":"x","text":{"verbosity":"low"}})").format, Format::text);
  EXPECT_FALSE(parse_ok(R"({"model":"m","input":"x","reasoning":null})").reasoning);
}

TEST(SimResponsesRequest, RejectsBadBodies) {
  EXPECT_EQ(parse_error(R"({"input":"x"})"), "'model' must be a non-empty string");
  EXPECT_EQ(parse_error(R"({"model":"m"})"), "'input' must be a string or an array of input items");
  EXPECT_EQ(parse_error(R"({"model":"m","input":5})"), "'input' must be a string or an array of input items");
  EXPECT_EQ(parse_error(R"({"model":"m","input":{"role":"user"}})"), "'input' must be a string or an array of input items");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","previous_response_id":"resp_1"})"),
            "previous_response_id is not supported by this server (it stores nothing)");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","conversation":"conv_1"})"),
            "conversation is not supported by this server (it stores nothing)");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","max_output_tokens":0})"), "'max_output_tokens' must be an integer >= 1");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","stream":"yes"})"), "'stream' must be a boolean");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","metadata":[]})"), "'metadata' must be an object");
  EXPECT_EQ(parse_error(R"({"model":"m","input":"x","truncation":"middle"})"),
            "'truncation' must be \"auto\" or \"disabled\"");
  for (const char* bad : {"{", "[]", R"({"model":"m","input":"x","max_output_tokens":"5"})",
                          R"({"model":"m","input":["hello"]})", R"({"model":"m","input":[{"content":"no role"}]})",
                          R"({"model":"m","input":"x","tools":{}})", R"({"model":"m","input":"x","tools":[{"name":"f"}]})",
                          R"({"model":"m","input":"x","tools":[{"type":"function"}]})",
                          R"({"model":"m","input":"x","tool_choice":"sometimes"})",
                          R"({"model":"m","input":"x","text":{"format":{"type":"xml"}}})",
                          R"({"model":"m","input":"x","reasoning":"high"})"}) {
    EXPECT_FALSE(parse_error(bad).empty()) << bad;
  }
}

TEST(SimResponsesAnswer, ReasoningComesFirstAndOutOfTheSameLimit) {
  // The summary: the first sentence of the text for seed 1.
  const std::string sentence = sim_text(12, 1).substr(0, sim_text(12, 1).find('.') + 1);
  const auto words = static_cast<std::int64_t>(std::count(sentence.begin(), sentence.end(), ' ') + 1);
  Answer a = make_answer(parse_ok(R"({"model":"m","input":"x","reasoning":{}})"), settings(), "c");
  EXPECT_EQ(a.reasoning.text, sentence);
  EXPECT_EQ(static_cast<std::int64_t>(a.reasoning.size()), words);
  EXPECT_EQ(a.content.text, sim_text(5));  // no limit: the answer is as long as without
  EXPECT_EQ(a.finish, Finish::stop);

  a = make_answer(parse_ok(R"({"model":"m","input":"x","reasoning":{},"max_output_tokens":)" +
                           std::to_string(words + 2) + "}"),
                  settings(), "c");
  EXPECT_EQ(a.content.text, sim_text(2));
  EXPECT_EQ(a.finish, Finish::length);

  a = make_answer(parse_ok(R"({"model":"m","input":"x","reasoning":{},"max_output_tokens":3})"), settings(), "c");
  EXPECT_EQ(a.reasoning.size(), 3u);  // the limit cuts the summary too
  EXPECT_EQ(a.tokens(), 0);
  EXPECT_EQ(a.finish, Finish::length);

  EXPECT_EQ(make_answer(parse_ok(R"({"model":"m","input":"x"})"), settings(), "c").reasoning.size(), 0u);
}

TEST(SimResponsesAnswer, ResponseObject) {
  const Served sv = serve(R"({"model":"gpt-x","input":"hello there","instructions":"be brief","metadata":{"a":"b"},
      "reasoning":{"effort":"low"}})");
  json::object o = json::parse(full_body(sv.info, sv.answer, {})).as_object();
  EXPECT_EQ(o.at("id").as_string(), "resp_0123abcd");
  EXPECT_EQ(o.at("object").as_string(), "response");
  EXPECT_EQ(o.at("created_at").as_int64(), 1700000000);
  EXPECT_EQ(o.at("status").as_string(), "completed");
  EXPECT_EQ(o.at("model").as_string(), "gpt-x");
  EXPECT_EQ(o.at("instructions").as_string(), "be brief");
  EXPECT_EQ(o.at("metadata"), json::parse(R"({"a":"b"})"));
  EXPECT_EQ(o.at("background").as_bool(), false);
  EXPECT_TRUE(o.at("error").is_null());
  EXPECT_TRUE(o.at("incomplete_details").is_null());
  EXPECT_TRUE(o.at("previous_response_id").is_null());
  const json::array& out = o.at("output").as_array();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], json::parse(R"({"type":"reasoning","id":"rs_0123abcd","summary":[{"type":"summary_text","text":)" +
                                json::serialize(json::string(sv.answer.reasoning.text)) + "}]}"));
  EXPECT_EQ(out[1], json::parse(R"({"type":"message","id":"msg_0123abcd","status":"completed","role":"assistant",
      "content":[{"type":"output_text","text":)" + json::serialize(json::string(sim_text(5))) +
                                R"(,"annotations":[],"logprobs":[]}]})"));
  const auto reasoning = static_cast<std::int64_t>(sv.answer.reasoning.size());
  EXPECT_EQ(o.at("usage"), json::parse(R"({"input_tokens":4,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},
      "output_tokens":)" + std::to_string(5 + reasoning) +
                                       R"(,"output_tokens_details":{"reasoning_tokens":)" + std::to_string(reasoning) +
                                       R"(},"total_tokens":)" + std::to_string(9 + reasoning) + "}"));
}

TEST(SimResponsesAnswer, IncompleteAtTheLimitAndToolCalls) {
  Served sv = serve(R"({"model":"m","input":"x","max_output_tokens":3})");
  json::object o = json::parse(full_body(sv.info, sv.answer, {})).as_object();
  EXPECT_EQ(o.at("status").as_string(), "incomplete");
  EXPECT_EQ(o.at("incomplete_details"), json::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(o.at("output").as_array()[0].as_object().at("status").as_string(), "incomplete");
  EXPECT_EQ(o.at("usage").as_object().at("output_tokens").as_int64(), 3);

  sv = serve(R"({"model":"m","input":"use get_weather","tools":[{"type":"function","name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]})");
  o = json::parse(full_body(sv.info, sv.answer, {})).as_object();
  EXPECT_EQ(o.at("status").as_string(), "completed");
  const json::array& out = o.at("output").as_array();
  ASSERT_EQ(out.size(), 1u);
  const json::object& call = out[0].as_object();
  EXPECT_EQ(call.at("type").as_string(), "function_call");
  EXPECT_EQ(call.at("id").as_string(), "fc_0123abcd");
  EXPECT_EQ(call.at("call_id").as_string(), "call_abc");
  EXPECT_EQ(call.at("name").as_string(), "get_weather");
  EXPECT_EQ(call.at("status").as_string(), "completed");
  EXPECT_TRUE(json::parse(call.at("arguments").as_string()).as_object().at("city").is_string());
  EXPECT_EQ(o.at("usage").as_object().at("output_tokens").as_int64(), sv.answer.tokens());
}

TEST(SimResponsesStream, TextEventsInOrderNumberedFromZero) {
  const Served sv = serve(R"({"model":"m","input":"x","stream":true,"max_output_tokens":4})");
  const auto events = stream_events(sv);
  EXPECT_EQ(types_of(events),
            (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added", "response.output_text.delta",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.delta", "response.output_text.done",
                                      "response.content_part.done", "response.output_item.done",
                                      "response.incomplete"}));
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].at("sequence_number").as_int64(), static_cast<std::int64_t>(i));
  const json::object& created = events[0].at("response").as_object();
  EXPECT_EQ(created.at("status").as_string(), "in_progress");
  EXPECT_TRUE(created.at("output").as_array().empty());
  EXPECT_FALSE(created.contains("usage"));
  const json::object& added = events[2].at("item").as_object();
  EXPECT_EQ(added.at("status").as_string(), "in_progress");
  EXPECT_TRUE(added.at("content").as_array().empty());
  EXPECT_EQ(events[3].at("part").as_object().at("text").as_string(), "");
  EXPECT_EQ(events[4].at("delta").as_string(), sim_text(1));
  EXPECT_EQ(events[4].at("item_id").as_string(), "msg_0123abcd");
  EXPECT_EQ(events[4].at("content_index").as_int64(), 0);
  EXPECT_TRUE(events[4].at("logprobs").as_array().empty());
  EXPECT_EQ(joined(events, "response.output_text.delta", "delta"), sim_text(4));
  EXPECT_EQ(events[8].at("text").as_string(), sim_text(4));
  const json::object& last = events.back().at("response").as_object();
  EXPECT_EQ(last.at("status").as_string(), "incomplete");
  EXPECT_EQ(last.at("usage").as_object().at("output_tokens").as_int64(), 4);
  EXPECT_EQ(last.at("output").as_array()[0].as_object().at("content").as_array()[0].as_object().at("text").as_string(),
            sim_text(4));
}

TEST(SimResponsesStream, ReasoningThenAToolCall) {
  const Served sv = serve(R"({"model":"m","input":"x","stream":true,"reasoning":{"summary":"auto"},
      "tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer"}}}}],
      "tool_choice":"required"})");
  ASSERT_TRUE(sv.answer.tool_call);
  const auto events = stream_events(sv);
  std::vector<std::string> want = {"response.created", "response.in_progress", "response.output_item.added",
                                   "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                                   "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
                                   "response.output_item.done", "response.output_item.added"};
  want.insert(want.end(), static_cast<std::size_t>(sv.answer.tokens() - 1), "response.function_call_arguments.delta");
  want.insert(want.end(), {"response.function_call_arguments.done", "response.output_item.done", "response.completed"});
  EXPECT_EQ(types_of(events), want);
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].at("sequence_number").as_int64(), static_cast<std::int64_t>(i));
  EXPECT_EQ(events[2].at("item"), json::parse(R"({"type":"reasoning","id":"rs_0123abcd","summary":[]})"));
  EXPECT_EQ(events[4].at("delta").as_string(), sv.answer.reasoning.text);
  EXPECT_EQ(events[7].at("item").as_object().at("summary").as_array()[0].as_object().at("text").as_string(),
            sv.answer.reasoning.text);
  const json::object& head = events[8].at("item").as_object();
  EXPECT_EQ(events[8].at("output_index").as_int64(), 1);
  EXPECT_EQ(head.at("arguments").as_string(), "");
  EXPECT_EQ(head.at("call_id").as_string(), "call_abc");
  EXPECT_EQ(head.at("status").as_string(), "in_progress");
  const std::string args = joined(events, "response.function_call_arguments.delta", "delta");
  EXPECT_EQ(args, sv.answer.content.text);
  EXPECT_TRUE(json::parse(args).is_object());
  EXPECT_EQ(events[events.size() - 3].at("arguments").as_string(), args);
  EXPECT_EQ(events[events.size() - 3].at("name").as_string(), "f");
  const json::object& done = events.back().at("response").as_object();
  EXPECT_EQ(done.at("output").as_array().size(), 2u);
  EXPECT_EQ(done.at("usage").as_object().at("output_tokens_details").as_object().at("reasoning_tokens").as_int64(),
            static_cast<std::int64_t>(sv.answer.reasoning.size()));
}

TEST(SimResponsesStream, AnEmptyAnswerStillOpensAndClosesItsItem) {
  config::SimSettings s = settings(0);
  const Served sv = serve(R"({"model":"m","input":"x","stream":true})", s);
  ASSERT_EQ(sv.answer.tokens(), 0);
  const auto events = stream_events(sv);
  EXPECT_EQ(types_of(events), (std::vector<std::string>{"response.created", "response.in_progress",
                                                        "response.output_item.added", "response.content_part.added",
                                                        "response.output_text.done", "response.content_part.done",
                                                        "response.output_item.done", "response.completed"}));
  EXPECT_EQ(events.back().at("sequence_number").as_int64(), 7);
}

TEST(SimResponsesErrors, OpenAiShape) {
  const auto resp = error_response(Api::responses, ErrorKind::rate_limited, "slow down");
  EXPECT_EQ(resp.status, 429);
  EXPECT_EQ(json::parse(resp.body), json::parse(R"({"error":{"message":"slow down","type":"rate_limit_error",
      "code":"rate_limit_exceeded","param":null}})"));
}
