// The parameter policy: every field of the spec's CreateChatCompletionRequest is accepted
// with the spec's types and enums; what the spec refuses is refused naming the field; a
// field an Ollama or Anthropic upstream cannot honour is named for the route to refuse.
#include <gtest/gtest.h>

#include <string>

#include "config/config.hpp"
#include "llm/chat.hpp"
#include "llm/support.hpp"
#include "llm/wire.hpp"

using namespace sluice;
using namespace sluice::llm;

namespace {

const config::Config& cfg() {
  static const config::Config c;
  return c;
}

std::string with(std::string_view extra, std::string_view messages = R"([{"role":"user","content":"hi"}])") {
  std::string s = R"({"model":"m","messages":)" + std::string(messages);
  if (!extra.empty()) s += "," + std::string(extra);
  return s + "}";
}

std::optional<RequestError> refusal(std::string_view body) {
  auto r = parse_chat_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) return *e;
  return std::nullopt;
}

ChatRequest ok(std::string_view body) {
  auto r = parse_chat_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) {
    ADD_FAILURE() << e->message << " in " << body;
    return {};
  }
  return std::get<ChatRequest>(std::move(r));
}

TEST(ParamPolicy, EveryFieldOfTheSpecIsAccepted) {
  for (const char* extra : {
           R"("reasoning_effort":"low")", R"("reasoning_effort":null)", R"("verbosity":"high")",
           R"("modalities":["text","audio"])", R"("audio":{"voice":"alloy","format":"mp3"})",
           R"("prediction":{"type":"content","content":"x"})", R"("web_search_options":{})",
           R"("safety_identifier":"u-1")", R"("prompt_cache_key":"k")", R"("prompt_cache_options":{"ttl":"30m"})",
           R"("prompt_cache_retention":"24h")", R"("moderation":{"model":"omni-moderation-latest"})",
           R"("service_tier":"flex")", R"("functions":[{"name":"f"}])", R"("function_call":"auto")",
           R"("function_call":{"name":"f"})", R"("tool_choice":"required")",
           R"("tool_choice":{"type":"function","function":{"name":"f"}})",
           R"("tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}})",
           R"("response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}})",
           R"("response_format":{"type":"json_object"})", R"("logprobs":true,"top_logprobs":2)"}) {
    EXPECT_FALSE(refusal(with(extra))) << extra << ": " << refusal(with(extra))->message;
  }
}

TEST(ParamPolicy, WhatTheSpecRefusesIsRefusedNamingTheField) {
  struct Case {
    std::string body;
    const char* param;
  } cases[] = {
      {with(R"("reasoning_effort":"extreme")"), "reasoning_effort"},
      {with(R"("verbosity":1)"), "verbosity"},
      {with(R"("modalities":["video"])"), "modalities"},
      {with(R"("service_tier":"cheap")"), "service_tier"},
      {with(R"("function_call":"sometimes")"), "function_call"},
      {with(R"("tool_choice":"sometimes")"), "tool_choice"},
      {with(R"("tool_choice":{"type":"function"})"), "tool_choice.function.name"},
      {with(R"("tool_choice":{"type":"magic"})"), "tool_choice.type"},
      {with(R"("response_format":{"type":"yaml"})"), "response_format.type"},
      {with(R"("response_format":{"type":"json_schema"})"), "response_format.json_schema.name"},
      {with("", R"([{"role":"wizard","content":"hi"}])"), "messages[0].role"},
      {with("", R"([{"role":"user"}])"), "messages[0].content"},
      {with("", R"([{"role":"system","content":null}])"), "messages[0].content"},
      {with("", R"([{"role":"user","content":"q"},{"role":"tool","content":"r"}])"), "messages[1].tool_call_id"},
  };
  for (const auto& c : cases) {
    const auto e = refusal(c.body);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->reason, Reason::invalid_request) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << ": " << e->message;
  }
  // An assistant message may have no content when it calls tools.
  EXPECT_FALSE(refusal(with("", R"([{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[]}])")));
  // Unknown fields stay refused.
  const auto unknown = refusal(with(R"("temperatur":1)"));
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->reason, Reason::option_not_allowed);
}

TEST(ParamPolicy, FieldsAnUpstreamCannotHonourAreNamedPerWire) {
  using config::Provider;
  struct Case {
    const char* extra;
    bool ollama, anthropic;  // refused there
  } cases[] = {
      {R"("n":2)", true, true},
      {R"("n":1)", false, false},
      {R"("logprobs":true)", true, true},
      {R"("logprobs":false)", false, false},
      {R"("logit_bias":{"1":5})", true, true},
      {R"("modalities":["text","audio"],"audio":{"voice":"alloy","format":"mp3"})", true, true},
      {R"("modalities":["text"])", false, false},
      {R"("reasoning_effort":"high")", true, true},
      {R"("reasoning_effort":null)", false, false},
      {R"("verbosity":"low")", true, true},
      {R"("prediction":{"type":"content","content":"x"})", true, true},
      {R"("tool_choice":"required")", true, false},
      {R"("tool_choice":"auto")", false, false},
      {R"("seed":3)", false, true},
      {R"("frequency_penalty":0.5)", false, true},
      // Defaults change nothing: what SDKs and frameworks send on every request passes.
      {R"("presence_penalty":0,"frequency_penalty":0,"n":1,"top_p":1,"logprobs":false,"top_logprobs":0)", false, false},
      {R"("function_call":"none")", false, false},
      {R"("tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[]}})", true, true},
      {R"("tools":[{"type":"custom","custom":{"name":"c"}}])", true, true},
      {R"("parallel_tool_calls":false)", true, false},
      {R"("parallel_tool_calls":true)", false, false},
      {R"("response_format":{"type":"json_object"})", false, true},
      {R"("response_format":{"type":"text"})", false, false},
      // Fields that change nothing of the answer are left out quietly.
      {R"("user":"u","safety_identifier":"s","prompt_cache_key":"k","metadata":{"a":"b"})", false, false},
  };
  for (const auto& c : cases) {
    const auto req = ok(with(c.extra));
    EXPECT_FALSE(chat_field_unsupported(req, Provider::openai)) << c.extra;
    EXPECT_FALSE(chat_field_unsupported(req, Provider::simulated)) << c.extra;
    const auto o = chat_field_unsupported(req, Provider::ollama);
    const auto a = chat_field_unsupported(req, Provider::anthropic);
    EXPECT_EQ(bool(o), c.ollama) << c.extra;
    EXPECT_EQ(bool(a), c.anthropic) << c.extra;
    for (const auto& e : {o, a}) {
      if (!e) continue;
      EXPECT_EQ(e->reason, Reason::option_not_allowed);
      EXPECT_NE(std::string(c.extra).find("\"" + e->param + "\""), std::string::npos) << e->param;
    }
    // A route that drops such fields serves the request.
    EXPECT_FALSE(unsupported(req, Provider::ollama, /*drop_fields=*/true)) << c.extra;
  }
}

}  // namespace

namespace {

// Ollama has no tool_choice: "none" is honoured by sending no tools.
TEST(ParamPolicy, OllamaToolChoiceNoneSendsNoTools) {
  config::Backend b;
  b.model = "llama";
  const auto tools = R"("tools":[{"type":"function","function":{"name":"f","parameters":{}}}])";
  const auto none = build_call(config::Provider::ollama, ok(with(std::string(tools) + R"(,"tool_choice":"none")")), b);
  EXPECT_EQ(none.body.find("\"tools\""), std::string::npos) << none.body;
  const auto aut = build_call(config::Provider::ollama, ok(with(std::string(tools) + R"(,"tool_choice":"auto")")), b);
  EXPECT_NE(aut.body.find("\"tools\""), std::string::npos) << aut.body;
}

// A function message's content may be null (the spec marks it nullable).
TEST(ParamPolicy, FunctionMessageContentMayBeNull) {
  EXPECT_FALSE(refusal(with("", R"([{"role":"user","content":"q"},{"role":"function","name":"f","content":null}])")));
}

}  // namespace
