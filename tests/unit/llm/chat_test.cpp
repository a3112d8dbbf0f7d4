#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <string>

#include "config/config.hpp"
#include "llm/chat.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice;
using namespace sluice::llm;
namespace json = boost::json;

namespace {

config::Config test_config() {
  config::Config c;
  c.params["temperature"] = {0, 2, false};
  c.params["top_p"] = {0, 1, false};
  c.params["max_tokens"] = {1, 8192, true};
  c.params["n"] = {1, 1, true};
  c.options["num_ctx"] = {256, 32768, true};
  c.options["temperature"] = {0, 2, false};
  c.options["num_predict"] = {-2, 8192, true};
  return c;
}

const config::Config& cfg() {
  static const config::Config c = test_config();
  return c;
}

ChatRequest ok(std::string_view body) {
  auto r = parse_chat_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) {
    ADD_FAILURE() << "unexpected error: " << e->message;
    return {};
  }
  return std::get<ChatRequest>(std::move(r));
}

RequestError err(std::string_view body) {
  auto r = parse_chat_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) return *e;
  ADD_FAILURE() << "expected an error for " << body;
  return {};
}

std::string with(std::string_view extra) {
  std::string s = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
  if (!extra.empty()) {
    s += ',';
    s += extra;
  }
  s += '}';
  return s;
}

json::object parse_obj(std::string_view s) {
  auto v = json::parse(s);
  EXPECT_TRUE(v.is_object()) << s;
  return v.is_object() ? v.get_object() : json::object{};
}

config::Backend backend(std::string prefix, std::string model) {
  config::Backend b;
  b.path_prefix = std::move(prefix);
  b.model = std::move(model);
  return b;
}

}  // namespace

// ---- parse_chat_request --------------------------------------------------------------

TEST(ParseChat, HappyPath) {
  auto r = ok(R"({"model":"fast","messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hello there"}]}],
      "stream":true,"stream_options":{"include_usage":true},"temperature":0.5,
      "max_tokens":100,"options":{"num_ctx":4096},"stop":["x"],"seed":1,"user":"u"})");
  EXPECT_EQ(r.model, "fast");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  ASSERT_TRUE(r.max_tokens);
  EXPECT_EQ(*r.max_tokens, 100);
  // OpenAI's chat formula: 3 priming the reply, then per message 3 + role + content (the
  // text parts of an array), each counted by the estimator.
  const auto e = [](std::string_view t) { return estimate_tokens(t); };
  EXPECT_EQ(r.prompt_tokens_estimate,
            3 + (3 + e("system") + e("be brief")) + (3 + e("user") + e("hello there")));
  EXPECT_GE(e("be brief"), 2);
  EXPECT_EQ(r.body.at("model").as_string(), "fast");
  EXPECT_TRUE(r.body.contains("options"));
}

TEST(ParseChat, Defaults) {
  auto r = ok(with(""));
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.max_tokens);
}

TEST(ParseChat, MaxCompletionTokensWins) {
  auto r = ok(with(R"("max_tokens":10,"max_completion_tokens":20)"));
  ASSERT_TRUE(r.max_tokens);
  EXPECT_EQ(*r.max_tokens, 20);
}

TEST(ParseChat, IncludeUsageOnlyWhenStreaming) {
  EXPECT_FALSE(ok(with(R"("stream":false,"stream_options":{"include_usage":true})")).include_usage);
  EXPECT_FALSE(ok(with(R"("stream":true,"stream_options":{"include_usage":false})")).include_usage);
  EXPECT_FALSE(ok(with(R"("stream":true)")).include_usage);
}

TEST(ParseChat, NullOptionalFieldsAccepted) {
  ok(with(R"("temperature":null,"stop":null,"tools":null,"stream":null,"max_tokens":null)"));
}

TEST(ParseChat, AssistantToolCallMessageWithNullContent) {
  ok(R"({"model":"m","messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
       "function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"42"}]})");
}

TEST(ParseChat, MalformedJson) {
  for (const char* body : {"", "{", R"({"model":"m",})", "nul", "{\"a\":1} trailing"}) {
    auto e = err(body);
    EXPECT_EQ(e.reason, Reason::bad_json) << body;
  }
}

TEST(ParseChat, NonObjectBody) {
  EXPECT_EQ(err("[]").reason, Reason::bad_json);
  EXPECT_EQ(err("\"hello\"").reason, Reason::bad_json);
  EXPECT_EQ(err("42").reason, Reason::bad_json);
}

TEST(ParseChat, MissingOrEmptyModel) {
  auto e = err(R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.reason, Reason::invalid_request);
  EXPECT_EQ(e.param, "model");
  e = err(R"({"model":"","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.reason, Reason::invalid_request);
  EXPECT_EQ(e.param, "model");
  e = err(R"({"model":7,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.reason, Reason::invalid_request);
  EXPECT_EQ(e.param, "model");
}

TEST(ParseChat, BadMessages) {
  struct Case {
    const char* messages;
    const char* param;
  };
  for (const Case& c : {Case{"null", "messages"}, Case{"[]", "messages"},
                        Case{"{}", "messages"}, Case{"[1]", "messages[0]"},
                        Case{R"([{"content":"x"}])", "messages[0].role"},
                        Case{R"([{"role":5,"content":"x"}])", "messages[0].role"},
                        Case{R"([{"role":"user","content":"x"},{"role":"user","content":5}])",
                             "messages[1].content"},
                        Case{R"([{"role":"user","content":[{"type":"text"}]}])",
                             "messages[0].content[0].text"}}) {
    std::string body = R"({"model":"m","messages":)" + std::string(c.messages) + "}";
    auto e = err(body);
    EXPECT_EQ(e.reason, Reason::invalid_request) << body;
    EXPECT_EQ(e.param, c.param) << body;
  }
  auto e = err(R"({"model":"m"})");
  EXPECT_EQ(e.reason, Reason::invalid_request);
  EXPECT_EQ(e.param, "messages");
}

TEST(ParseChat, WrongTypes) {
  struct Case {
    const char* field;
    const char* param;
  };
  for (const Case& c : {Case{R"("stream":"yes")", "stream"},
                        Case{R"("stream":1)", "stream"},
                        Case{R"("max_tokens":"100")", "max_tokens"},
                        Case{R"("max_tokens":10.5)", "max_tokens"},
                        Case{R"("max_tokens":0)", "max_tokens"},
                        Case{R"("max_completion_tokens":-3)", "max_completion_tokens"},
                        Case{R"("temperature":"hot")", "temperature"},
                        Case{R"("stop":[1])", "stop"},
                        Case{R"("stream_options":{"include_usage":"y"})",
                             "stream_options.include_usage"},
                        Case{R"("response_format":{"type":1})", "response_format.type"},
                        Case{R"("tools":{})", "tools"},
                        Case{R"("seed":1.5)", "seed"},
                        Case{R"("options":[])", "options"},
                        Case{R"("options":{"num_ctx":"4096"})", "options.num_ctx"}}) {
    auto e = err(with(c.field));
    EXPECT_EQ(e.reason, Reason::invalid_request) << c.field;
    EXPECT_EQ(e.param, c.param) << c.field;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(ParseChat, UnknownTopLevelField) {
  auto e = err(with(R"("frobnicate":true)"));
  EXPECT_EQ(e.reason, Reason::option_not_allowed);
  EXPECT_EQ(e.param, "frobnicate");
  EXPECT_NE(e.message.find("frobnicate"), std::string::npos);
}

TEST(ParseChat, UnknownOption) {
  auto e = err(with(R"("options":{"num_ctx":512,"num_gpu":99})"));
  EXPECT_EQ(e.reason, Reason::option_not_allowed);
  EXPECT_EQ(e.param, "options.num_gpu");
}

TEST(ParseChat, OptionOutOfRange) {
  auto e = err(with(R"("options":{"num_ctx":999999})"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  EXPECT_EQ(e.param, "options.num_ctx");
  EXPECT_EQ(e.message, "options.num_ctx=999999 is out of range [256, 32768]");
  e = err(with(R"("options":{"num_ctx":100})"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  e = err(with(R"("options":{"num_ctx":1024.5})"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  EXPECT_NE(e.message.find("integer"), std::string::npos);
  // Bounds are inclusive; a negative allowed minimum works.
  ok(with(R"("options":{"num_ctx":256,"num_predict":-2,"temperature":0})"));
  ok(with(R"("options":{"num_ctx":32768})"));
}

TEST(ParseChat, ParamOutOfRange) {
  auto e = err(with(R"("temperature":2.5)"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  EXPECT_EQ(e.param, "temperature");
  EXPECT_EQ(e.message, "temperature=2.5 is out of range [0, 2]");
  e = err(with(R"("max_tokens":9000)"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  EXPECT_EQ(e.message, "max_tokens=9000 is out of range [1, 8192]");
  e = err(with(R"("n":2)"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  // max_completion_tokens shares the range of max_tokens.
  e = err(with(R"("max_completion_tokens":100000)"));
  EXPECT_EQ(e.reason, Reason::option_out_of_range);
  EXPECT_EQ(e.message, "max_completion_tokens=100000 is out of range [1, 8192]");
  // Not listed in params: only its type is checked.
  ok(with(R"("presence_penalty":1.5,"top_logprobs":100000)"));
}

TEST(ParseChat, OptionsEmptyAllowListRejectsAll) {
  config::Config c;
  auto r = parse_chat_request(with(R"("options":{"num_ctx":512})"), c);
  ASSERT_TRUE(std::holds_alternative<RequestError>(r));
  EXPECT_EQ(std::get<RequestError>(r).reason, Reason::option_not_allowed);
}

TEST(EstimateTokens, IsTheTokenizersEstimator) {
  EXPECT_EQ(estimate_tokens(""), 0);
  for (std::string_view t : {"a", "hello world", "你好世界", "héllo", "\xF0\x9F\x98\x80", "x = f(1, 2);"}) {
    EXPECT_EQ(estimate_tokens(t), static_cast<std::int64_t>(sluice::tokenizer::estimate(t))) << t;
    EXPECT_GE(estimate_tokens(t), 1) << t;
  }
  // Longer text, more tokens.
  EXPECT_GT(estimate_tokens(std::string(400, 'x') + " y z"), estimate_tokens("x y z"));
}

// ---- build_openai_call ---------------------------------------------------------------

TEST(OpenAiCall, TargetFollowsPathPrefix) {
  auto r = ok(with(""));
  EXPECT_EQ(build_openai_call(r, backend("", "gpt")).target, "/v1/chat/completions");
  EXPECT_EQ(build_openai_call(r, backend("/v1", "gpt")).target, "/v1/chat/completions");
  EXPECT_EQ(build_openai_call(r, backend("/openai/v1", "gpt")).target,
            "/openai/v1/chat/completions");
  EXPECT_EQ(build_openai_call(r, backend("/proxy", "gpt")).target,
            "/proxy/v1/chat/completions");
}

TEST(OpenAiCall, StreamingBody) {
  auto r = ok(with(R"("stream":true,"temperature":0.7,"options":{"num_ctx":512},)"
                   R"("keep_alive":"5m","tools":[{"type":"function","function":{"name":"f"}}])"));
  auto call = build_openai_call(r, backend("/v1", "gpt-4o-mini"));
  auto b = parse_obj(call.body);
  EXPECT_EQ(b.at("model").as_string(), "gpt-4o-mini");
  EXPECT_EQ(b.at("stream").as_bool(), true);
  EXPECT_EQ(b.at("stream_options").at("include_usage").as_bool(), true);
  EXPECT_DOUBLE_EQ(b.at("temperature").to_number<double>(), 0.7);
  EXPECT_EQ(b.at("messages"), r.body.at("messages"));
  EXPECT_EQ(b.at("tools"), r.body.at("tools"));
  EXPECT_FALSE(b.contains("options"));
  EXPECT_FALSE(b.contains("keep_alive"));
  EXPECT_EQ(b.size(), 6u);  // model messages stream temperature tools stream_options
}

TEST(OpenAiCall, ClientStreamOptionsKeptAndUsageForced) {
  auto r = ok(with(R"("stream":true,"stream_options":{"include_usage":false,"x":1})"));
  auto b = parse_obj(build_openai_call(r, backend("", "g")).body);
  EXPECT_EQ(b.at("stream_options").at("include_usage").as_bool(), true);
  EXPECT_EQ(b.at("stream_options").at("x").as_int64(), 1);
  EXPECT_FALSE(r.include_usage);  // the client did not ask: its usage chunk will be dropped
}

TEST(OpenAiCall, NonStreamingBody) {
  auto r = ok(with(R"("stream_options":{"include_usage":true},"max_tokens":5)"));
  auto b = parse_obj(build_openai_call(r, backend("", "g")).body);
  EXPECT_EQ(b.at("model").as_string(), "g");
  EXPECT_EQ(b.at("max_tokens").as_int64(), 5);
  EXPECT_FALSE(b.contains("stream_options"));
  EXPECT_FALSE(b.contains("stream"));
}

// ---- build_ollama_call ---------------------------------------------------------------

TEST(OllamaCall, TargetAndBasics) {
  auto r = ok(with(""));
  auto call = build_ollama_call(r, backend("", "llama3.2:1b"));
  EXPECT_EQ(call.target, "/api/chat");
  EXPECT_EQ(build_ollama_call(r, backend("/ollama", "x")).target, "/ollama/api/chat");
  auto b = parse_obj(call.body);
  EXPECT_EQ(b.at("model").as_string(), "llama3.2:1b");
  EXPECT_EQ(b.at("stream").as_bool(), false);  // Ollama defaults to true: always explicit
  EXPECT_EQ(b.at("messages"), json::parse(R"([{"role":"user","content":"hi"}])"));
  EXPECT_FALSE(b.contains("options"));
  EXPECT_FALSE(b.contains("format"));
}

TEST(OllamaCall, ParamsMappedToOptions) {
  auto r = ok(with(R"("stream":true,"temperature":0.2,"top_p":0.9,"seed":42,"stop":"END",)"
                   R"("presence_penalty":0.1,"frequency_penalty":0.3,"max_tokens":64,)"
                   R"("keep_alive":"10m","options":{"num_ctx":2048,"temperature":0.4},)"
                   R"("response_format":{"type":"json_object"},"user":"u")"));
  auto b = parse_obj(build_ollama_call(r, backend("", "q")).body);
  EXPECT_EQ(b.at("stream").as_bool(), true);
  EXPECT_EQ(b.at("keep_alive").as_string(), "10m");
  EXPECT_EQ(b.at("format").as_string(), "json");
  EXPECT_FALSE(b.contains("user"));
  EXPECT_FALSE(b.contains("stream_options"));
  const auto& o = b.at("options").as_object();
  EXPECT_DOUBLE_EQ(o.at("temperature").to_number<double>(), 0.4);  // client options win
  EXPECT_DOUBLE_EQ(o.at("top_p").to_number<double>(), 0.9);
  EXPECT_EQ(o.at("seed").as_int64(), 42);
  EXPECT_EQ(o.at("stop"), json::parse(R"(["END"])"));
  EXPECT_DOUBLE_EQ(o.at("presence_penalty").to_number<double>(), 0.1);
  EXPECT_DOUBLE_EQ(o.at("frequency_penalty").to_number<double>(), 0.3);
  EXPECT_EQ(o.at("num_predict").as_int64(), 64);
  EXPECT_EQ(o.at("num_ctx").as_int64(), 2048);
  EXPECT_EQ(o.size(), 8u);
}

TEST(OllamaCall, MaxCompletionTokensToNumPredict) {
  auto r = ok(with(R"("max_completion_tokens":33,"stop":["a","b"])"));
  auto o = parse_obj(build_ollama_call(r, backend("", "q")).body).at("options").as_object();
  EXPECT_EQ(o.at("num_predict").as_int64(), 33);
  EXPECT_EQ(o.at("stop"), json::parse(R"(["a","b"])"));
}

TEST(OllamaCall, JsonSchemaFormat) {
  auto r = ok(with(R"("response_format":{"type":"json_schema","json_schema":{"name":"x",)"
                   R"("schema":{"type":"object"}}})"));
  auto b = parse_obj(build_ollama_call(r, backend("", "q")).body);
  EXPECT_EQ(b.at("format"), json::parse(R"({"type":"object"})"));
  auto t = ok(with(R"("response_format":{"type":"text"})"));
  EXPECT_FALSE(parse_obj(build_ollama_call(t, backend("", "q")).body).contains("format"));
}

TEST(OllamaCall, ContentPartsImagesAndToolCalls) {
  auto r = ok(R"({"model":"m","messages":[
      {"role":"user","content":[{"type":"text","text":"what is"},
        {"type":"image_url","image_url":{"url":"data:image/png;base64,QUJD"}},
        {"type":"text","text":"this?"}]},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"lookup","arguments":"{\"q\":\"x\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"42"}],
      "tools":[{"type":"function","function":{"name":"lookup","parameters":{}}}]})");
  auto b = parse_obj(build_ollama_call(r, backend("", "q")).body);
  const auto& m = b.at("messages").as_array();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].at("content").as_string(), "what is\nthis?");
  EXPECT_EQ(m[0].at("images"), json::parse(R"(["QUJD"])"));
  EXPECT_EQ(m[1].at("content").as_string(), "");
  EXPECT_EQ(m[1].at("tool_calls"),
            json::parse(R"([{"function":{"name":"lookup","arguments":{"q":"x"}}}])"));
  EXPECT_EQ(m[2].at("role").as_string(), "tool");
  EXPECT_EQ(m[2].at("content").as_string(), "42");
  EXPECT_EQ(b.at("tools"), r.body.at("tools"));
}

// ---- count_prompt_tokens -------------------------------------------------------------

TEST(CountPromptTokens, MatchesTheTokenizersChatFormula) {
  SLUICE_REQUIRE_RANK_FILES();
  const std::string dir = sluice::test::rank_dir();
  std::string warnings;
  auto counter = sluice::tokenizer::Counter::load_dir(dir, &warnings);
  ASSERT_TRUE(counter.exact(sluice::tokenizer::Encoding::cl100k_base))
      << "run scripts/fetch-tokenizer.sh: " << warnings;
  auto r = ok(R"({"model":"fast","messages":[{"role":"system","content":"You are terse."},
      {"role":"user","name":"ann","content":[{"type":"text","text":"Héllo, world! 你好"}]}]})");
  using sluice::tokenizer::ChatMessage;
  const ChatMessage msgs[] = {{"system", "You are terse.", ""}, {"user", "Héllo, world! 你好", "ann"}};
  const auto enc = sluice::tokenizer::Encoding::cl100k_base;
  EXPECT_EQ(count_prompt_tokens(r, counter, enc),
            static_cast<std::int64_t>(sluice::tokenizer::count_chat(counter, enc, msgs)));
  // Without rank files the counter estimates: the same as the parse-time estimate.
  EXPECT_EQ(count_prompt_tokens(r, sluice::tokenizer::Counter{}, enc), r.prompt_tokens_estimate);
}

TEST(PromptTokenBound, NeverBelowTheExactCountInEitherEncoding) {
  SLUICE_REQUIRE_RANK_FILES();
  const std::string dir = sluice::test::rank_dir();
  std::string warnings;
  auto counter = sluice::tokenizer::Counter::load_dir(dir, &warnings);
  ASSERT_TRUE(counter.exact(sluice::tokenizer::Encoding::cl100k_base)) << "run scripts/fetch-tokenizer.sh: " << warnings;
  ASSERT_TRUE(counter.exact(sluice::tokenizer::Encoding::o200k_base)) << warnings;
  // Texts where tokens are short: digits, punctuation, CJK, emoji, whitespace runs.
  const char* texts[] = {"",
                         "a",
                         "Hello, world!",
                         "1234567890 0.5 -17 3e8",
                         "!!!???...;;;:::",
                         "你好，世界。今日は。안녕하세요",
                         "🙂🙃🚀 family: 👩‍👩‍👧‍👦",
                         "   \t\t\n\n  x  ",
                         "{\"k\": [1, 2, {\"v\": null}]}",
                         "Ünïcödé àccênts ñ ß ø"};
  for (const char* t : texts) {
    boost::json::object body;
    body["model"] = "m";
    body["messages"] = boost::json::array{boost::json::object{{"role", "user"}, {"content", t}, {"name", "n"}},
                                          boost::json::object{{"role", "assistant"}, {"content", t}}};
    auto r = ok(boost::json::serialize(body));
    const auto bound = prompt_token_bound(r);
    for (auto enc : {sluice::tokenizer::Encoding::cl100k_base, sluice::tokenizer::Encoding::o200k_base}) {
      EXPECT_GE(bound, count_prompt_tokens(r, counter, enc)) << t;
    }
  }
  // English prose: about four bytes a token, so the bound is about four times the count.
  auto r = ok(R"({"model":"m","messages":[{"role":"user","content":"The quick brown fox jumps over the lazy dog while the band plays on."}]})");
  const auto exact = count_prompt_tokens(r, counter, sluice::tokenizer::Encoding::cl100k_base);
  EXPECT_GT(prompt_token_bound(r), 2 * exact);
}

// Found by fuzz_chat_request: Boost.JSON reads 1e400 as infinity and serializes it as
// `Infinity`, so a body with such a number anywhere (even in a field passed through)
// reached the upstream as invalid JSON. It is refused as malformed.
TEST(ParseChatRequest, NumberBeyondDoubleRangeIsRefused) {
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","":1e400}]})").reason, Reason::bad_json);
  EXPECT_EQ(err(with(R"("temperature":-1e999)")).reason, Reason::bad_json);
  EXPECT_EQ(err(with(R"("metadata":{"a":[1,2,1E+309]})")).reason, Reason::bad_json);
  EXPECT_EQ(ok(with(R"("temperature":1e-400)")).model, "m");  // underflows to 0: finite
}
