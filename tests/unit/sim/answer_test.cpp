// The simulator's answers: text, stop sequences, JSON for a schema, tool calls, log
// probabilities (src/sim/answer.hpp).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "sim/answer.hpp"
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

config::SimSettings settings(int default_tokens = 12) {
  config::SimSettings s;
  s.default_output_tokens = default_tokens;
  return s;
}

Answer answer_for(Api api, std::string_view body, config::SimSettings s = settings()) {
  return make_answer(parse_ok(api, body), s, "call_test");
}

std::vector<std::string> tokens_of(const Answer& a) {
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < a.tokens(); ++i) out.emplace_back(a.token(i));
  return out;
}

const char* kWeatherTool =
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}})";

std::string openai_with_tools(std::string_view user, std::string_view extra = "") {
  return std::string(R"({"model":"m","messages":[{"role":"user","content":")") + std::string(user) +
         R"("}],"tools":[)" + kWeatherTool + "]" + std::string(extra) + "}";
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Text

TEST(SimText, VocabularyIsCommonLowerCaseWords) {
  const auto words = vocabulary();
  EXPECT_GE(words.size(), 300u);
  std::set<std::string_view> seen;
  for (auto w : words) {
    EXPECT_TRUE(seen.insert(w).second) << "duplicate " << w;
    ASSERT_FALSE(w.empty());
    for (char c : w) EXPECT_TRUE(c >= 'a' && c <= 'z') << w;
  }
}

TEST(SimText, PinnedWordsForTheDefaultSeedAndOthers) {
  // The same strings are produced by simText() in tests/integration/lib.mjs.
  EXPECT_EQ(sim_text(14), "Science home call, or wet last old make distance need deep high. Any around");
  EXPECT_EQ(sim_text(8, 42), "This garden year both. Country lake leave door");
  EXPECT_EQ(sim_text(5, static_cast<std::uint64_t>(-1)), "Green two few alone journey,");
  EXPECT_EQ(sim_text(6, (1ULL << 40) + 7), "Green good thought island great. Bring");
  EXPECT_EQ(sim_text(0), "");
}

TEST(SimText, FoldSeedKeepsSmallSeedsAndMixesTheHighHalf) {
  EXPECT_EQ(fold_seed(0), 0u);
  EXPECT_EQ(fold_seed(42), 42u);
  EXPECT_EQ(fold_seed(0xffffffffULL), 0xffffffffu);
  EXPECT_EQ(fold_seed(static_cast<std::uint64_t>(-1)), 2654435768u);
  EXPECT_NE(fold_seed(1ULL << 32), fold_seed(0));
}

TEST(SimText, OneWordPerTokenInSentences) {
  const Answer a = answer_for(Api::openai, R"({"model":"m","messages":[],"max_tokens":200,"seed":9})");
  ASSERT_EQ(a.tokens(), 200);
  EXPECT_EQ(a.content.text, sim_text(200, 9));
  EXPECT_EQ(a.finish, Finish::length);
  bool sentence_start = true;
  int sentence_words = 0;
  for (std::int64_t i = 0; i < a.tokens(); ++i) {
    std::string_view t = a.token(i);
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t.front() == ' ', i > 0) << i;  // a leading space on every token but the first
    if (t.front() == ' ') t.remove_prefix(1);
    EXPECT_EQ(t.find(' '), std::string_view::npos) << "one word: " << t;
    EXPECT_EQ(t.front() >= 'A' && t.front() <= 'Z', sentence_start) << i << ": " << t;
    ++sentence_words;
    sentence_start = t.back() == '.';
    if (sentence_start) {
      EXPECT_GE(sentence_words, 4);
      EXPECT_LE(sentence_words, 12);
      sentence_words = 0;
    }
  }
}

TEST(SimText, SeedsChangeTheTextAndRepeatIt) {
  EXPECT_EQ(sim_text(30, 1), sim_text(30, 1));
  EXPECT_NE(sim_text(30, 1), sim_text(30, 2));
  EXPECT_NE(sim_text(30, 1), sim_text(30));
  // No seed = seed 0; Ollama's options.seed does the same as OpenAI's seed.
  EXPECT_EQ(answer_for(Api::openai, R"({"model":"m","messages":[]})").content.text, sim_text(12));
  EXPECT_EQ(answer_for(Api::ollama, R"({"model":"m","messages":[],"options":{"seed":42}})").content.text,
            sim_text(12, 42));
  EXPECT_EQ(answer_for(Api::anthropic, R"({"model":"m","messages":[],"max_tokens":5})").content.text, sim_text(5));
}

// ---------------------------------------------------------------------------------------
// Stop sequences

TEST(SimStop, EndsBeforeTheFirstOccurrence) {
  // "Science home call, or wet last old make distance need deep high. Any around"
  Answer a = answer_for(Api::openai, R"({"model":"m","messages":[],"stop":"."})");
  EXPECT_EQ(a.content.text, "Science home call, or wet last old make distance need deep high");
  EXPECT_EQ(a.tokens(), 12);  // the 12th token, " high.", keeps " high"
  EXPECT_EQ(a.token(11), " high");
  EXPECT_EQ(a.finish, Finish::stop_sequence);
  EXPECT_EQ(a.stop_sequence, ".");

  // The earliest of several, also across tokens; the cut token is dropped when nothing of
  // it comes before the stop.
  a = answer_for(Api::openai, R"({"model":"m","messages":[],"stop":["deep","call, or"]})");
  EXPECT_EQ(a.content.text, "Science home ");
  EXPECT_EQ(tokens_of(a), (std::vector<std::string>{"Science", " home", " "}));
  EXPECT_EQ(a.stop_sequence, "call, or");
  a = answer_for(Api::openai, R"({"model":"m","messages":[],"stop":[" home"]})");
  EXPECT_EQ(tokens_of(a), (std::vector<std::string>{"Science"}));

  // At the very start: nothing.
  a = answer_for(Api::anthropic, R"({"model":"m","messages":[],"stop_sequences":["Sci"]})");
  EXPECT_EQ(a.tokens(), 0);
  EXPECT_EQ(a.finish, Finish::stop_sequence);

  // Not in the answer (or beyond its length): no effect.
  a = answer_for(Api::openai, R"({"model":"m","messages":[],"stop":["zebra","Any"],"max_tokens":5})");
  EXPECT_EQ(a.content.text, sim_text(5));
  EXPECT_EQ(a.finish, Finish::length);
  a = answer_for(Api::ollama, R"({"model":"m","messages":[],"options":{"stop":["wet"]}})");
  EXPECT_EQ(a.content.text, "Science home call, or ");
}

TEST(SimStop, ParsedPerApi) {
  EXPECT_EQ(parse_ok(Api::openai, R"({"model":"m","messages":[],"stop":"x"})").stop, std::vector<std::string>{"x"});
  EXPECT_EQ(parse_ok(Api::openai, R"({"model":"m","messages":[],"stop":["a","","b"]})").stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse_ok(Api::openai, R"({"model":"m","messages":[],"stop":null})").stop.empty());
  EXPECT_EQ(parse_ok(Api::anthropic, R"({"model":"m","messages":[],"stop_sequences":["\n\nHuman:"]})").stop,
            std::vector<std::string>{"\n\nHuman:"});
  EXPECT_EQ(parse_ok(Api::ollama, R"({"model":"m","messages":[],"options":{"stop":["<|end|>"]}})").stop,
            std::vector<std::string>{"<|end|>"});
  std::string err;
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"stop":5})", err));
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"stop":["a",1]})", err));
  EXPECT_FALSE(parse_request(Api::anthropic, R"({"model":"m","messages":[],"stop_sequences":"x"})", err));
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"seed":"7"})", err));
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"seed":1.5})", err));
}

// ---------------------------------------------------------------------------------------
// JSON

TEST(SimJson, JsonObjectIsAnObjectStreamedInPieces) {
  const Answer a = answer_for(Api::openai, R"({"model":"m","messages":[],"response_format":{"type":"json_object"}})");
  EXPECT_EQ(a.finish, Finish::stop);
  const json::value v = json::parse(a.content.text);
  ASSERT_TRUE(v.is_object()) << a.content.text;
  // {"answer": <the first sentence of the text>}
  EXPECT_EQ(v.as_object().at("answer").as_string(), "Science home call, or wet last old make distance need deep high.");
  EXPECT_EQ(tokens_of(a).front(), "{");
  EXPECT_EQ(tokens_of(a).back(), "}");
  EXPECT_GT(a.tokens(), 10);
  std::string joined;
  for (const auto& t : tokens_of(a)) joined += t;
  EXPECT_EQ(joined, a.content.text);
  // Ollama's format "json" is the same.
  EXPECT_EQ(answer_for(Api::ollama, R"({"model":"m","messages":[],"format":"json"})").content.text, a.content.text);
}

TEST(SimJson, SchemaGetsItsRequiredPropertiesWithTheirTypes) {
  const char* body = R"({"model":"m","messages":[],"seed":3,"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,
    "schema":{"type":"object","properties":{
      "city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7},"temp":{"type":"number"},
      "ok":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"}},
      "unit":{"type":"string","enum":["c","f"]},"kind":{"const":"weather"},"note":{"type":["string","null"]},
      "when":{"type":"string","format":"date"},"loc":{"$ref":"#/$defs/loc"},"maybe":{"anyOf":[{"type":"null"},{"type":"integer"}]},
      "optional":{"type":"string"}},
    "required":["city","days","temp","ok","tags","unit","kind","note","when","loc","maybe"],
    "$defs":{"loc":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number"}},"required":["lat","lon"]}}}}}})";
  const Answer a = answer_for(Api::openai, body);
  const json::value v = json::parse(a.content.text);
  ASSERT_TRUE(v.is_object()) << a.content.text;
  const auto& o = v.as_object();
  EXPECT_EQ(o.size(), 11u) << a.content.text;  // the required ones only
  EXPECT_FALSE(o.contains("optional"));
  EXPECT_TRUE(o.at("city").is_string());
  ASSERT_TRUE(o.at("days").is_int64());
  EXPECT_GE(o.at("days").as_int64(), 1);
  EXPECT_LE(o.at("days").as_int64(), 7);
  EXPECT_TRUE(o.at("temp").is_number());
  EXPECT_TRUE(o.at("ok").is_bool());
  ASSERT_TRUE(o.at("tags").is_array());
  EXPECT_EQ(o.at("tags").as_array().size(), 2u);
  EXPECT_TRUE(o.at("tags").as_array()[0].is_string());
  EXPECT_TRUE(o.at("unit") == "c" || o.at("unit") == "f");
  EXPECT_EQ(o.at("kind"), "weather");
  EXPECT_TRUE(o.at("note").is_string());
  EXPECT_EQ(o.at("when"), "2024-05-01");
  EXPECT_TRUE(o.at("loc").as_object().at("lat").is_number());
  EXPECT_TRUE(o.at("loc").as_object().at("lon").is_number());
  EXPECT_TRUE(o.at("maybe").is_int64());
  // Deterministic by seed.
  EXPECT_EQ(answer_for(Api::openai, body).content.text, a.content.text);
}

TEST(SimJson, WithoutRequiredAllPropertiesAndSmallLimits) {
  Pieces p;
  json_for_schema(json::parse(R"({"type":"object","properties":{"a":{"type":"string","maxLength":3},
      "b":{"type":"array","items":{"type":"integer"},"minItems":4},"c":{"type":"object"},"d":{"type":"array","maxItems":0},
      "e":{"type":"integer","exclusiveMinimum":10,"exclusiveMaximum":12}}})"),
                  0, p);
  const json::object o = json::parse(p.text).as_object();
  EXPECT_EQ(o.size(), 5u) << p.text;
  EXPECT_LE(o.at("a").as_string().size(), 3u);
  EXPECT_EQ(o.at("b").as_array().size(), 4u);
  EXPECT_TRUE(o.at("b").as_array()[0].is_int64());
  EXPECT_TRUE(o.at("c").as_object().empty());
  EXPECT_TRUE(o.at("d").as_array().empty());
  EXPECT_EQ(o.at("e").as_int64(), 11);
}

TEST(SimJson, RecursiveSchemasStop) {
  Pieces p;
  json_for_schema(json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"child":{"$ref":"#"}},"required":["name","child"]})"), 0, p);
  const json::value v = json::parse(p.text);  // valid, and finite
  int depth = 0;
  for (const json::value* cur = &v; cur->is_object() && cur->as_object().contains("child"); cur = &cur->as_object().at("child")) ++depth;
  EXPECT_GE(depth, 3);
  EXPECT_LE(depth, 7);
}

TEST(SimJson, CutByTheLimitWithFinishLength) {
  const Answer a = answer_for(Api::openai, R"({"model":"m","messages":[],"max_tokens":3,"response_format":{"type":"json_object"}})");
  EXPECT_EQ(a.tokens(), 3);
  EXPECT_EQ(a.finish, Finish::length);
  EXPECT_EQ(a.content.text, "{\"answer\": \"Science");
  // A limit above the object's length: the object, finish stop.
  const Answer b = answer_for(Api::openai, R"({"model":"m","messages":[],"max_tokens":500,"response_format":{"type":"json_object"}})");
  EXPECT_EQ(b.finish, Finish::stop);
  EXPECT_TRUE(json::parse(b.content.text).is_object());
}

TEST(SimJson, ParsedPerApi) {
  EXPECT_EQ(parse_ok(Api::openai, R"({"model":"m","messages":[],"response_format":{"type":"text"}})").format, Format::text);
  EXPECT_EQ(parse_ok(Api::openai, R"({"model":"m","messages":[],"response_format":{"type":"json_object"}})").format, Format::json_object);
  auto r = parse_ok(Api::openai, R"({"model":"m","messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}})");
  EXPECT_EQ(r.format, Format::json_schema);
  EXPECT_TRUE(r.schema.is_object());
  r = parse_ok(Api::ollama, R"({"model":"m","messages":[],"format":{"type":"object","properties":{"x":{"type":"boolean"}}}})");
  EXPECT_EQ(r.format, Format::json_schema);
  EXPECT_TRUE(json::parse(make_answer(r, settings(), "").content.text).as_object().at("x").is_bool());
  std::string err;
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"response_format":{"type":"yaml"}})", err));
}

// ---------------------------------------------------------------------------------------
// Tools

TEST(SimTools, ChosenWhenTheUserNamesOneOrTheChoiceRequiresIt) {
  // Named in the last user message (any case): called.
  EXPECT_EQ(choose_tool(parse_ok(Api::openai, openai_with_tools("Please use GET_WEATHER for Paris"))), 0u);
  // Not named, auto: text.
  EXPECT_FALSE(choose_tool(parse_ok(Api::openai, openai_with_tools("What is the weather in Paris?"))));
  // Required, or named by tool_choice: called anyway.
  EXPECT_EQ(choose_tool(parse_ok(Api::openai, openai_with_tools("hi", R"(,"tool_choice":"required")"))), 0u);
  EXPECT_EQ(choose_tool(parse_ok(Api::openai, openai_with_tools("hi", R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"))), 0u);
  // none: never.
  EXPECT_FALSE(choose_tool(parse_ok(Api::openai, openai_with_tools("use get_weather", R"(,"tool_choice":"none")"))));
  // After a tool result: text again, whatever the choice.
  EXPECT_FALSE(choose_tool(parse_ok(Api::openai, std::string(R"({"model":"m","tool_choice":"required","tools":[)") + kWeatherTool +
      R"(],"messages":[{"role":"user","content":"use get_weather"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"sunny"}]})")));
  // The mentioned one of several; the first when required names none.
  const std::string two = R"({"model":"m","tools":[{"type":"function","function":{"name":"search"}},)" + std::string(kWeatherTool) + "],";
  EXPECT_EQ(choose_tool(parse_ok(Api::openai, two + R"("messages":[{"role":"user","content":"get_weather now"}]})")), 1u);
  EXPECT_EQ(choose_tool(parse_ok(Api::openai, two + R"("tool_choice":"required","messages":[{"role":"user","content":"hm"}]})")), 0u);

  // Anthropic: tool_choice any/tool/none, tool_result blocks; server tools are not offered.
  const std::string anth = R"({"model":"m","max_tokens":50,"tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],)";
  auto a = parse_ok(Api::anthropic, anth + R"("messages":[{"role":"user","content":"web_search it"}]})");
  EXPECT_EQ(a.tools.size(), 1u);
  EXPECT_FALSE(choose_tool(a));
  EXPECT_EQ(choose_tool(parse_ok(Api::anthropic, anth + R"("tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]})")), 0u);
  EXPECT_EQ(choose_tool(parse_ok(Api::anthropic, anth + R"("tool_choice":{"type":"tool","name":"get_weather"},"messages":[{"role":"user","content":"hi"}]})")), 0u);
  EXPECT_FALSE(choose_tool(parse_ok(Api::anthropic, anth + R"("tool_choice":{"type":"none"},"messages":[{"role":"user","content":[{"type":"text","text":"get_weather"}]}]})")));
  EXPECT_EQ(choose_tool(parse_ok(Api::anthropic, anth + R"("messages":[{"role":"user","content":[{"type":"text","text":"call get_weather"}]}]})")), 0u);
  EXPECT_FALSE(choose_tool(parse_ok(Api::anthropic, anth + R"("tool_choice":{"type":"any"},"messages":[{"role":"user","content":"get_weather"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"get_weather","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"sunny"}]}]})")));

  // Ollama: no tool_choice; named, or a tool message last.
  const std::string oll = R"({"model":"m","tools":[)" + std::string(kWeatherTool) + "],";
  EXPECT_EQ(choose_tool(parse_ok(Api::ollama, oll + R"("messages":[{"role":"user","content":"get_weather for Lyon"}]})")), 0u);
  EXPECT_FALSE(choose_tool(parse_ok(Api::ollama, oll + R"("messages":[{"role":"user","content":"get_weather for Lyon"},{"role":"tool","content":"rain"}]})")));
}

TEST(SimTools, TheCallHasAHeadThenItsArgumentsInPieces) {
  const Answer a = answer_for(Api::openai, openai_with_tools("use get_weather"));
  ASSERT_TRUE(a.tool_call);
  EXPECT_EQ(a.tool_call->name, "get_weather");
  EXPECT_EQ(a.tool_call->id, "call_test");
  EXPECT_EQ(a.finish, Finish::tool_calls);
  EXPECT_EQ(a.tokens(), static_cast<std::int64_t>(a.content.size()) + 1);
  EXPECT_EQ(a.token(0), "");
  EXPECT_EQ(a.token(1), "{");
  const json::object args = json::parse(a.content.text).as_object();
  EXPECT_EQ(args.size(), 2u);
  EXPECT_TRUE(args.at("city").is_string());
  EXPECT_GE(args.at("days").as_int64(), 1);
  EXPECT_LE(args.at("days").as_int64(), 7);
  // A tool without parameters: {}.
  const Answer b = answer_for(Api::openai, R"({"model":"m","messages":[{"role":"user","content":"now"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"now"}}]})");
  ASSERT_TRUE(b.tool_call);
  EXPECT_EQ(b.content.text, "{}");
  EXPECT_EQ(b.tokens(), 3);
  // Stop sequences do not cut a call.
  EXPECT_EQ(answer_for(Api::openai, openai_with_tools("use get_weather", R"(,"stop":["{"])")).content.text, a.content.text);
}

TEST(SimTools, CutByTheLimit) {
  const Answer a = answer_for(Api::openai, openai_with_tools("use get_weather", R"(,"max_tokens":3)"));
  ASSERT_TRUE(a.tool_call);
  EXPECT_EQ(a.tokens(), 3);
  EXPECT_EQ(a.finish, Finish::length);
  EXPECT_EQ(a.content.text, "{\"city\":");
  // No room for even the head: text (empty).
  config::SimSettings s = settings();
  s.max_output_tokens = 0;
  const Answer b = answer_for(Api::openai, openai_with_tools("use get_weather"), s);
  EXPECT_FALSE(b.tool_call);
  EXPECT_EQ(b.tokens(), 0);
}

// ---------------------------------------------------------------------------------------
// Log probabilities

TEST(SimLogprobs, DeterministicNegativeAndTheTokenFirst) {
  // The same values as simLogprob() in tests/integration/lib.mjs.
  EXPECT_EQ(token_logprob(0, 0), -0.01);
  EXPECT_EQ(token_logprob(0, 1), -0.664);
  EXPECT_EQ(token_logprob(42, 5), -0.577);
  for (std::int64_t i = 0; i < 500; ++i) {
    const double lp = token_logprob(7, i);
    EXPECT_LE(lp, -0.01);
    EXPECT_GE(lp, -0.7);
    const auto top = top_logprobs(7, i, " river", 20);
    ASSERT_EQ(top.size(), 20u);
    EXPECT_EQ(top[0].token, " river");
    EXPECT_EQ(top[0].logprob, lp);
    std::set<std::string> distinct;
    double p = 0;
    for (std::size_t j = 0; j < top.size(); ++j) {
      EXPECT_TRUE(distinct.insert(top[j].token).second) << top[j].token;
      EXPECT_EQ(top[j].token.front(), ' ');
      if (j > 0) {
        EXPECT_LT(top[j].logprob, top[j - 1].logprob);
      }
      p += std::exp(top[j].logprob);
    }
    EXPECT_LT(p, 1.0);
  }
  EXPECT_TRUE(top_logprobs(0, 0, "x", 0).empty());
  EXPECT_EQ(top_logprobs(0, 0, "Science", 2)[1].token.front() != ' ', true);  // no leading space, as the token
}

TEST(SimLogprobs, Parsed) {
  auto r = parse_ok(Api::openai, R"({"model":"m","messages":[],"logprobs":true,"top_logprobs":3})");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  std::string err;
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"logprobs":"yes"})", err));
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"logprobs":true,"top_logprobs":21})", err));
  EXPECT_FALSE(parse_request(Api::openai, R"({"model":"m","messages":[],"logprobs":true,"top_logprobs":-1})", err));
}
