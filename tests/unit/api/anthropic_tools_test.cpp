// Tool use through the Messages API, both directions: Anthropic clients' tools, tool_use and
// tool_result blocks to chat completions and back; chat tools and tool calls to an
// Anthropic upstream and back (docs/translation.md).
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

std::string with(std::string_view extra, std::string_view messages = R"([{"role":"user","content":"x"}])") {
  return R"({"model":"m","max_tokens":5,"messages":)" + std::string(messages) + std::string(extra) + "}";
}


// "data: {...}\n\n" frames -> their JSON ([DONE] left out).
std::vector<json::object> chunks(std::string_view out) {
  std::vector<json::object> v;
  while (!out.empty()) {
    const auto end = out.find("\n\n");
    if (!out.starts_with("data: ") || end == std::string_view::npos) {
      ADD_FAILURE() << "not a data frame: " << out;
      break;
    }
    const auto data = out.substr(6, end - 6);
    if (data != "[DONE]") v.push_back(json::parse(data).as_object());
    out.remove_prefix(end + 2);
  }
  return v;
}

std::string chunk(std::string_view delta, std::string_view finish = "null") {
  return "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":" + std::string(delta) +
         ",\"finish_reason\":" + std::string(finish) + "}]}\n\n";
}

// Feeds `bytes` to `tr` in pieces of `step` bytes.
void feed_split(StreamTranslator& tr, std::string_view bytes, std::size_t step, std::string& out) {
  for (std::size_t i = 0; i < bytes.size(); i += step) ASSERT_TRUE(tr.feed(bytes.substr(i, step), out));
}

// A chat request as parse_chat_request leaves it (body + model).
ChatRequest chat_request(std::string_view body) {
  ChatRequest req;
  req.body = json::parse(body).as_object();
  req.model = std::string(req.body.at("model").as_string());
  if (const auto* s = req.body.if_contains("stream"); s && s->is_bool()) req.stream = s->get_bool();
  return req;
}

config::Backend backend() {
  config::Backend b;
  b.model = "claude-up";
  b.path_prefix = "/v1";
  return b;
}

const char* kWeatherTool =
    R"({"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}})";

}  // namespace

// ---- A: Anthropic client request -> chat request ---------------------------------------

TEST(AnthropicToolsRequest, ToolsAndToolChoiceBecomeTheirChatForms) {
  auto o = converted(with(std::string(R"(,"tools":[)") + kWeatherTool +
                          R"(,{"type":"custom","name":"noop","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],
                          "tool_choice":{"type":"auto"})"));
  EXPECT_EQ(json::serialize(o.at("tools")),
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},)"
            R"({"type":"function","function":{"name":"noop","parameters":{"type":"object"}}}])");
  EXPECT_EQ(o.at("tool_choice"), "auto");
  EXPECT_FALSE(o.contains("parallel_tool_calls"));
  const std::string tools = std::string(R"(,"tools":[)") + kWeatherTool + "]";
  EXPECT_EQ(converted(with(tools + R"(,"tool_choice":{"type":"any"})")).at("tool_choice"), "required");
  EXPECT_EQ(converted(with(tools + R"(,"tool_choice":{"type":"none"})")).at("tool_choice"), "none");
  auto forced = converted(with(tools + R"(,"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true})"));
  EXPECT_EQ(json::serialize(forced.at("tool_choice")), R"({"type":"function","function":{"name":"get_weather"}})");
  EXPECT_EQ(forced.at("parallel_tool_calls"), false);
  // No tools: nothing to choose from, tool_choice is left out; tools:[] is no tools.
  auto none = converted(with(R"(,"tools":[],"tool_choice":{"type":"auto"})"));
  EXPECT_FALSE(none.contains("tools"));
  EXPECT_FALSE(none.contains("tool_choice"));
}

TEST(AnthropicToolsRequest, ToolUseAndToolResultBlocksBecomeToolCallsAndToolMessages) {
  auto o = converted(with("", R"([
    {"role":"user","content":"Weather in Paris and Rome?"},
    {"role":"assistant","content":[{"type":"text","text":"Checking."},
      {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}},
      {"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city":"Rome","units":{"c":true}}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"},
      {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"no"},{"type":"text","text":"data"}],"is_error":true},
      {"type":"text","text":"Be short."}]},
    {"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"noop","input":{}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"}]}])"));
  const auto& m = o.at("messages").as_array();
  ASSERT_EQ(m.size(), 7u) << json::serialize(m);
  EXPECT_EQ(json::serialize(m[0]), R"({"role":"user","content":"Weather in Paris and Rome?"})");
  EXPECT_EQ(json::serialize(m[1]),
            R"({"role":"assistant","content":"Checking.","tool_calls":[)"
            R"({"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},)"
            R"({"id":"toolu_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\",\"units\":{\"c\":true}}"}}]})");
  EXPECT_EQ(json::serialize(m[2]), R"({"role":"tool","tool_call_id":"toolu_1","content":"18C"})");
  EXPECT_EQ(json::serialize(m[3]), R"({"role":"tool","tool_call_id":"toolu_2","content":"Error: no\ndata"})");
  EXPECT_EQ(json::serialize(m[4]), R"({"role":"user","content":"Be short."})");
  // An assistant turn of tool calls only has content null; a user turn of results only
  // adds no user message.
  EXPECT_EQ(json::serialize(m[5]),
            R"({"role":"assistant","content":null,"tool_calls":[{"id":"toolu_3","type":"function","function":{"name":"noop","arguments":"{}"}}]})");
  EXPECT_EQ(json::serialize(m[6]), R"({"role":"tool","tool_call_id":"toolu_3","content":""})");
}

TEST(AnthropicToolsRequest, RefusesServerToolsAndMisplacedBlocksNamingTheField) {
  auto server = refused(with(R"(,"tools":[{"type":"web_search_20250305","name":"web_search"}])"));
  EXPECT_EQ(server.param, "tools[0].type");
  EXPECT_NE(server.message.find("web_search_20250305"), std::string::npos) << server.message;
  EXPECT_EQ(http_status(server.reason), 400);
  EXPECT_EQ(refused(with(std::string(R"(,"tools":[)") + kWeatherTool + R"(,{"type":"bash_20250124","name":"bash"}])")).param,
            "tools[1].type");
  EXPECT_EQ(refused(with(R"(,"tools":[{"name":"x"}])")).param, "tools[0].input_schema");
  EXPECT_EQ(refused(with(R"(,"tools":[{"input_schema":{}}])")).param, "tools[0].name");
  EXPECT_EQ(refused(with(R"(,"tools":{})")).param, "tools");
  EXPECT_EQ(refused(with(R"(,"tool_choice":{"type":"sometimes"})")).param, "tool_choice.type");
  EXPECT_EQ(refused(with(R"(,"tool_choice":"auto")")).param, "tool_choice");
  EXPECT_EQ(refused(with(R"(,"tool_choice":{"type":"tool"})")).param, "tool_choice.name");
  // tool_use in a user turn, tool_result in an assistant turn.
  EXPECT_EQ(refused(with("", R"([{"role":"user","content":[{"type":"tool_use","id":"a","name":"n","input":{}}]}])")).param,
            "messages[0].content[0].type");
  EXPECT_EQ(refused(with("", R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"a"}]}])")).param,
            "messages[1].content[0].type");
  EXPECT_EQ(refused(with("", R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","name":"n","input":{}}]}])")).param,
            "messages[1].content[0].id");
  // Thinking and images stay refused, wherever they are, with the original block index.
  auto thinking = refused(with("", R"([{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{}},{"type":"thinking","thinking":"hm"}]}])"));
  EXPECT_EQ(thinking.param, "messages[1].content[1].type");
  EXPECT_NE(thinking.message.find("'thinking' are not supported"), std::string::npos) << thinking.message;
  EXPECT_EQ(refused(with("", R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}])")).param,
            "messages[0].content[0].content[0].type");
}

// ---- B: chat answer -> Anthropic client ------------------------------------------------

TEST(AnthropicToolsAnswer, ToolCallsBecomeToolUseBlocks) {
  Completion done;
  done.body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
    {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
    {"id":"call_2","type":"function","function":{"name":"broken","arguments":"{\"city\":"}}]},"finish_reason":"tool_calls"}]})";
  done.finish_reason = "tool_calls";
  done.usage = {10, 4};
  auto m = json::parse(chat_to_anthropic(done, "claude", "r1")).as_object();
  // No empty text block; invalid arguments become {} and the call still comes through.
  EXPECT_EQ(json::serialize(m.at("content")),
            R"([{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},)"
            R"({"type":"tool_use","id":"call_2","name":"broken","input":{}}])");
  EXPECT_EQ(m.at("stop_reason"), "tool_use");
  // With text: the text block comes first.
  done.body = R"({"choices":[{"index":0,"message":{"role":"assistant","content":"Let me look.","tool_calls":[
    {"id":"call_9","type":"function","function":{"name":"noop","arguments":""}}]},"finish_reason":"stop"}]})";
  done.finish_reason = "stop";
  m = json::parse(chat_to_anthropic(done, "claude", "r1")).as_object();
  EXPECT_EQ(json::serialize(m.at("content")),
            R"([{"type":"text","text":"Let me look."},{"type":"tool_use","id":"call_9","name":"noop","input":{}}])");
  EXPECT_EQ(m.at("stop_reason"), "tool_use");  // tool calls under a plain "stop" still need running
}

TEST(AnthropicToolsStream, ToolCallFragmentsBecomeToolUseBlocksEvenSplit) {
  const std::string up =
      chunk(R"({"role":"assistant","content":"Checking"})") +
      chunk(R"({"content":" now."})") +
      chunk(R"({"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]})") +
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]})") +
      chunk(R"({"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]})") +
      chunk(R"({"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"noop","arguments":"{}"}}]})") +
      chunk("{}", "\"tool_calls\"") +
      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],"
      "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":6,\"total_tokens\":15}}\n\n"
      "data: [DONE]\n\n";
  for (std::size_t step : {up.size(), std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
    ChatRequest req;
    req.stream = true;
    auto tr = make_anthropic_output(make_openai_stream(req), "claude", "r5", 3);
    std::string out;
    feed_split(*tr, up, step, out);
    ASSERT_TRUE(tr->finish(out));
    auto ev = events(out);
    std::vector<std::string> types;
    for (auto& e : ev) types.push_back(e.first);
    ASSERT_EQ(types, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                                "content_block_delta", "content_block_stop", "content_block_start",
                                                "content_block_delta", "content_block_delta", "content_block_stop",
                                                "content_block_start", "content_block_delta", "content_block_stop",
                                                "message_delta", "message_stop"}))
        << "step " << step << "\n" << out;
    EXPECT_EQ(json::serialize(ev[1].second), R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
    EXPECT_EQ(ev[3].second.at("delta").at("text"), " now.");
    EXPECT_EQ(json::serialize(ev[4].second), R"({"type":"content_block_stop","index":0})");
    EXPECT_EQ(json::serialize(ev[5].second),
              R"({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_a","name":"get_weather","input":{}}})");
    EXPECT_EQ(json::serialize(ev[6].second),
              R"({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}})");
    EXPECT_EQ(ev[7].second.at("delta").at("partial_json"), "\"Paris\"}");
    EXPECT_EQ(ev[8].second.at("index"), 1);
    EXPECT_EQ(ev[9].second.at("index"), 2);
    EXPECT_EQ(ev[9].second.at("content_block").at("id"), "call_b");
    EXPECT_EQ(ev[9].second.at("content_block").at("name"), "noop");
    EXPECT_EQ(ev[10].second.at("delta").at("partial_json"), "{}");
    EXPECT_EQ(ev[11].second.at("index"), 2);
    EXPECT_EQ(ev[12].second.at("delta").at("stop_reason"), "tool_use");
    EXPECT_EQ(ev[12].second.at("usage").at("output_tokens"), 6);
  }
}

TEST(AnthropicToolsStream, AnAnswerOfToolCallsOnlyHasNoTextBlock) {
  ChatRequest req;
  req.stream = true;
  auto tr = make_anthropic_output(make_openai_stream(req), "claude", "r6", 3);
  std::string out;
  ASSERT_TRUE(tr->feed(chunk(R"({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"noop","arguments":"{}"}}]})") +
                           chunk("{}", "\"tool_calls\"") + "data: [DONE]\n\n",
                       out));
  ASSERT_TRUE(tr->finish(out));
  auto ev = events(out);
  ASSERT_EQ(ev.size(), 6u) << out;
  EXPECT_EQ(ev[1].second.at("index"), 0);
  EXPECT_EQ(ev[1].second.at("content_block").at("type"), "tool_use");
  EXPECT_EQ(ev[3].first, "content_block_stop");
  EXPECT_EQ(ev[4].second.at("delta").at("stop_reason"), "tool_use");
}

// ---- C: chat request -> Anthropic upstream ---------------------------------------------

TEST(AnthropicToolsUpstream, ToolsChoiceCallsAndResultsBecomeMessagesForms) {
  auto req = chat_request(R"({"model":"alias","messages":[
    {"role":"system","content":"S"},
    {"role":"user","content":"Weather?"},
    {"role":"assistant","content":"Checking.","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
      {"id":"call_2","type":"function","function":{"name":"broken","arguments":"not json"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"18C"},
    {"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"bad"}]},
    {"role":"user","content":"Thanks"}],
    "tools":[{"type":"function","function":{"name":"get_weather","description":"W","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
             {"type":"function","function":{"name":"noop"}}],
    "tool_choice":"required","parallel_tool_calls":false})");
  auto call = build_anthropic_call(req, backend());
  auto b = json::parse(call.body).as_object();
  EXPECT_EQ(json::serialize(b.at("messages")),
            R"([{"role":"user","content":"Weather?"},)"
            R"({"role":"assistant","content":[{"type":"text","text":"Checking."},)"
            R"({"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},)"
            R"({"type":"tool_use","id":"call_2","name":"broken","input":{}}]},)"
            R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C"},)"
            R"({"type":"tool_result","tool_use_id":"call_2","content":"bad"},{"type":"text","text":"Thanks"}]}])");
  EXPECT_EQ(json::serialize(b.at("tools")),
            R"([{"name":"get_weather","description":"W","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},)"
            R"({"name":"noop","input_schema":{"type":"object"}}])");
  EXPECT_EQ(json::serialize(b.at("tool_choice")), R"({"type":"any","disable_parallel_tool_use":true})");

  auto choice = [](std::string_view tc) {
    auto r = chat_request(std::string(R"({"model":"a","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])") +
                          std::string(tc) + "}");
    auto body = json::parse(build_anthropic_call(r, backend()).body).as_object();
    return body.contains("tool_choice") ? json::serialize(body.at("tool_choice")) : std::string("-");
  };
  EXPECT_EQ(choice(""), "-");
  EXPECT_EQ(choice(R"(,"tool_choice":"auto")"), R"({"type":"auto"})");
  EXPECT_EQ(choice(R"(,"tool_choice":"none")"), R"({"type":"none"})");
  EXPECT_EQ(choice(R"(,"tool_choice":{"type":"function","function":{"name":"f"}})"), R"({"type":"tool","name":"f"})");
  EXPECT_EQ(choice(R"(,"parallel_tool_calls":false)"), R"({"type":"auto","disable_parallel_tool_use":true})");
  // No tools: no tools, no tool_choice.
  auto bare = chat_request(R"({"model":"a","messages":[{"role":"user","content":"q"}],"tool_choice":"auto"})");
  auto bb = json::parse(build_anthropic_call(bare, backend()).body).as_object();
  EXPECT_FALSE(bb.contains("tools"));
  EXPECT_FALSE(bb.contains("tool_choice"));
}

TEST(AnthropicToolsUpstream, RoundTripKeepsIdsNamesAndInputs) {
  // An Anthropic client's history with tool use -> chat -> an Anthropic upstream.
  const std::string client = R"({"model":"claude","max_tokens":100,"system":"S",
    "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
    "tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},
    "messages":[{"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris","n":[1,2.5,null]}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":[{"type":"text","text":"18C"}]},{"type":"text","text":"And?"}]}]})";
  auto chat = anthropic_to_chat(client);
  ASSERT_TRUE(std::holds_alternative<std::string>(chat));
  auto req = chat_request(std::get<std::string>(chat));
  req.max_tokens = 100;
  auto b = json::parse(build_anthropic_call(req, backend()).body).as_object();
  auto original = json::parse(client).as_object();
  EXPECT_EQ(b.at("system"), "S");
  EXPECT_EQ(b.at("tools"), original.at("tools"));
  EXPECT_EQ(b.at("tool_choice"), original.at("tool_choice"));
  EXPECT_EQ(b.at("max_tokens"), 100);
  // The turns come back block for block.
  EXPECT_EQ(b.at("messages").as_array()[0], original.at("messages").as_array()[0]);
  EXPECT_EQ(b.at("messages").as_array()[1], original.at("messages").as_array()[1]);
  EXPECT_EQ(json::serialize(b.at("messages").as_array()[2]),
            R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01A","content":"18C"},{"type":"text","text":"And?"}]})");
  EXPECT_EQ(b.at("messages").as_array().size(), 3u);
}

// ---- D: Anthropic upstream answer -> chat ----------------------------------------------

TEST(AnthropicToolsUpstream, ToolUseBlocksBecomeToolCalls) {
  auto req = chat_request(R"({"model":"alias","messages":[{"role":"user","content":"q"}]})");
  auto done = translate_anthropic_completion(
      R"({"content":[{"type":"text","text":"Sure."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}},
        {"type":"tool_use","id":"toolu_2","name":"noop","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":7}})",
      req, "id1");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->finish_reason, "tool_calls");
  auto c = json::parse(done->body).as_object();
  const auto& msg = c.at("choices").at(0).at("message");
  EXPECT_EQ(msg.at("content"), "Sure.");
  EXPECT_EQ(json::serialize(msg.at("tool_calls")),
            R"([{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},)"
            R"({"id":"toolu_2","type":"function","function":{"name":"noop","arguments":"{}"}}])");
  EXPECT_EQ(c.at("choices").at(0).at("finish_reason"), "tool_calls");
  // Tool use only: content null.
  auto only = translate_anthropic_completion(
      R"({"content":[{"type":"tool_use","id":"t","name":"n","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}})",
      req, "id2");
  ASSERT_TRUE(only);
  EXPECT_TRUE(json::parse(only->body).at("choices").at(0).at("message").at("content").is_null());
}

TEST(AnthropicToolsUpstream, StreamedToolUseBecomesToolCallChunksEvenSplit) {
  const std::string up =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Sure.\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \"}}\n\n"
      "event: ping\ndata: {\"type\":\"ping\"}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"Paris\\\"}\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"noop\",\"input\":{}}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n"
      "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":12}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (std::size_t step : {up.size(), std::size_t{1}, std::size_t{13}, std::size_t{200}}) {
    auto req = chat_request(R"({"model":"alias","stream":true,"messages":[{"role":"user","content":"q"}]})");
    req.include_usage = true;
    auto tr = make_anthropic_stream(req, "r1");
    std::string out;
    feed_split(*tr, up, step, out);
    ASSERT_TRUE(tr->finish(out));
    EXPECT_TRUE(out.ends_with("data: [DONE]\n\n"));
    auto cs = chunks(out);
    ASSERT_EQ(cs.size(), 8u) << "step " << step << "\n" << out;
    auto delta = [&](std::size_t i) { return json::serialize(cs[i].at("choices").at(0).at("delta")); };
    EXPECT_EQ(delta(0), R"({"role":"assistant","content":"Sure."})");
    EXPECT_EQ(delta(1), R"({"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":""}}]})");
    EXPECT_EQ(delta(2), R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]})");
    EXPECT_EQ(delta(3), R"({"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]})");
    EXPECT_EQ(delta(4), R"({"tool_calls":[{"index":1,"id":"toolu_2","type":"function","function":{"name":"noop","arguments":""}}]})");
    EXPECT_EQ(delta(5), R"({"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]})");
    EXPECT_EQ(cs[6].at("choices").at(0).at("finish_reason"), "tool_calls");
    EXPECT_EQ(json::serialize(cs[7].at("usage")), R"({"prompt_tokens":9,"completion_tokens":12,"total_tokens":21})");
    EXPECT_EQ(tr->finish_reason(), "tool_calls");
  }
  // A tool_use block without a text block first: the first chunk carries the role.
  auto req = chat_request(R"({"model":"alias","stream":true,"messages":[{"role":"user","content":"q"}]})");
  auto tr = make_anthropic_stream(req, "r2");
  std::string out;
  ASSERT_TRUE(tr->feed(
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"n\",\"input\":{}}}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
      out));
  auto cs = chunks(out);
  ASSERT_EQ(cs.size(), 2u) << out;
  EXPECT_EQ(cs[0].at("choices").at(0).at("delta").at("role"), "assistant");
  EXPECT_EQ(cs[0].at("choices").at(0).at("delta").at("tool_calls").at(0).at("id"), "t");
}
