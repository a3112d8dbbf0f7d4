// llm::reservation: what a request reserves at admission must be an upper bound of what
// the upstream may charge for it: every prompt part that is sent, the output bound that is
// sent (per wire), times the choices, without overflow.
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <climits>
#include <random>
#include <string>

#include "llm/anthropic.hpp"
#include "config/config.hpp"
#include "llm/chat.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice;
using namespace sluice::llm;
namespace json = boost::json;
using config::Provider;
using tokenizer::Encoding;

namespace {

config::Config make_config() {
  config::Config c;
  c.params["n"] = {1, 16, true};  // (unbounded max_tokens: no range in `params`)
  c.options["num_predict"] = {-2, 100000, true};
  c.options["num_ctx"] = {256, 32768, true};
  c.rate_limits.reserve_output_tokens = 1024;
  return c;
}

const config::Config& cfg() {
  static const config::Config c = make_config();
  return c;
}

ChatRequest ok(std::string_view body) {
  auto r = parse_chat_request(body, cfg());
  if (auto* e = std::get_if<RequestError>(&r)) {
    ADD_FAILURE() << "unexpected error: " << e->message << " in " << body.substr(0, 200);
    return {};
  }
  return std::get<ChatRequest>(std::move(r));
}

const tokenizer::Counter& counter() {
  static const tokenizer::Counter c = [] {
    std::string warnings;
    return tokenizer::Counter::load_dir(sluice::test::rank_dir(), &warnings);
  }();
  return c;
}

std::int64_t bpe(std::string_view text, Encoding e = Encoding::cl100k_base) {
  return static_cast<std::int64_t>(counter().count(text, e));
}

constexpr Provider kOpenAI[] = {Provider::openai};
constexpr Provider kOllama[] = {Provider::ollama};
constexpr Provider kAnthropic[] = {Provider::anthropic};

// A tool definition of about `bytes` bytes (a long description and an enum of names).
json::value big_tool(std::size_t bytes) {
  json::array names;
  std::size_t size = 0;
  for (int i = 0; size < bytes; ++i) {
    std::string n = "customer_record_field_" + std::to_string(i);
    size += n.size() + 3;
    names.emplace_back(n);
  }
  return json::object{
      {"type", "function"},
      {"function",
       json::object{{"name", "lookup"},
                    {"description", "Looks a customer record up by one of its fields."},
                    {"parameters", json::object{{"type", "object"},
                                                {"properties", json::object{{"field", json::object{{"type", "string"}, {"enum", names}}}}}}}}}};
}

std::string request_with(json::object extra, json::array messages = json::array{json::object{{"role", "user"}, {"content", "hi"}}}) {
  json::object body{{"model", "m"}, {"messages", std::move(messages)}};
  for (auto& kv : extra) body[kv.key()] = kv.value();
  return json::serialize(body);
}

}  // namespace

// ---- 1. every part that is sent is reserved ---------------------------------------------

TEST(Reservation, CountsToolDefinitions) {
  SLUICE_REQUIRE_RANK_FILES();
  ASSERT_TRUE(counter().exact(Encoding::cl100k_base)) << "run scripts/fetch-tokenizer.sh";
  const json::value tool = big_tool(40 * 1024);
  const auto plain = ok(request_with({}));
  const auto with_tools = ok(request_with({{"tools", json::array{tool}}}));
  const std::int64_t tool_tokens = bpe(json::serialize(json::array{tool}));
  ASSERT_GT(tool_tokens, 5000);
  // Exact: the tools' JSON by the BPE on top of the messages.
  const auto exact = reservation(with_tools, kOpenAI, cfg(), &counter(), Encoding::cl100k_base);
  EXPECT_EQ(exact.prompt, count_prompt_tokens(plain, counter(), Encoding::cl100k_base) + tool_tokens);
  // The byte bound covers them too, and stays above the exact count.
  const auto bound = reservation(with_tools, kOpenAI, cfg());
  EXPECT_GE(bound.prompt, static_cast<std::int64_t>(json::serialize(json::array{tool}).size()));
  EXPECT_GE(bound.prompt, exact.prompt);
}

TEST(Reservation, CountsResponseFormatToolCallsAndToolResults) {
  SLUICE_REQUIRE_RANK_FILES();
  ASSERT_TRUE(counter().exact(Encoding::cl100k_base)) << "run scripts/fetch-tokenizer.sh";
  const std::string schema_text = std::string(R"({"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object","description":")") +
                                  std::string(3000, 'x') + R"("}}})";
  const json::value rf = json::parse(schema_text);
  const std::string args = R"({"query":")" + std::string(5000, 'q') + R"("})";
  json::array messages{
      json::object{{"role", "user"}, {"content", "look it up"}},
      json::object{{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls", json::array{json::object{{"id", "call_1"},
                                                           {"type", "function"},
                                                           {"function", json::object{{"name", "lookup"}, {"arguments", args}}}}}}},
      json::object{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", std::string(4000, 'r')}},
  };
  const auto r = ok(request_with({{"response_format", rf}}, messages));
  const auto got = reservation(r, kOpenAI, cfg(), &counter(), Encoding::cl100k_base).prompt;
  const std::int64_t parts = bpe(json::serialize(rf)) + bpe(json::serialize(messages[1].at("tool_calls"))) +
                             bpe(std::string(4000, 'r')) + bpe("call_1");
  EXPECT_GE(got, parts);
  EXPECT_GE(reservation(r, kOpenAI, cfg()).prompt, got);
}

TEST(Reservation, CountsImagesAtTheirPublishedMaximum) {
  const std::string url = "data:image/png;base64," + std::string(64, 'A');
  json::array content{json::object{{"type", "text"}, {"text", "what is this"}},
                      json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}, {"detail", "high"}}}},
                      json::object{{"type", "image_url"}, {"image_url", json::object{{"url", url}}}}};
  const auto with_images = ok(request_with({}, json::array{json::object{{"role", "user"}, {"content", content}}}));
  content.erase(content.begin() + 1, content.end());
  const auto text_only = ok(request_with({}, json::array{json::object{{"role", "user"}, {"content", content}}}));
  for (const tokenizer::Counter* c : {static_cast<const tokenizer::Counter*>(nullptr), &counter()}) {
    EXPECT_EQ(reservation(with_images, kOpenAI, cfg(), c).prompt - reservation(text_only, kOpenAI, cfg(), c).prompt,
              2 * kImageTokenBound);
  }
  // OpenAI high detail at most 85 + 170 * 8 tiles; Anthropic about 1.15 MP / 750.
  EXPECT_GE(kImageTokenBound, 85 + 170 * 8);
  EXPECT_GE(kImageTokenBound, 1'150'000 / 750);
}

// ---- 2. the bound for bodies too large to count: never below the exact count ---------

TEST(Reservation, ByteBoundCoversAdversarialTextsTheEstimatorUndercounts) {
  SLUICE_REQUIRE_RANK_FILES();
  ASSERT_TRUE(counter().exact(Encoding::cl100k_base) && counter().exact(Encoding::o200k_base))
      << "run scripts/fetch-tokenizer.sh";
  std::mt19937 rng(7);
  auto utf8 = [](std::string& s, char32_t c) {
    if (c < 0x80) s += static_cast<char>(c);
    else if (c < 0x800) s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
    else if (c < 0x10000) {
      s += static_cast<char>(0xE0 | (c >> 12)), s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (c >> 18)), s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), s += static_cast<char>(0x80 | (c & 0x3F));
    }
  };
  auto make = [&](auto&& next, std::size_t bytes) {
    std::string s;
    while (s.size() < bytes) utf8(s, next());
    return s;
  };
  const std::size_t n = 300 * 1024;  // over the exact-count limit of 256 KiB
  const std::string b64chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  struct Case {
    const char* name;
    std::string text;
  } cases[] = {
      {"combining marks", make([&] { static int i = 0; return (i++ % 4 == 0) ? U'a' : char32_t(0x300 + rng() % 0x70); }, n)},
      {"random CJK", make([&] { return char32_t(0x4E00 + rng() % 0x5200); }, n)},
      {"base64", make([&] { return char32_t(b64chars[rng() % 64]); }, n)},
      {"emoji", make([&] { return char32_t(0x1F300 + rng() % 0x300); }, n)},
      {"rare symbols", make([&] { return char32_t(0x2190 + rng() % 0x1000); }, n)},
  };
  for (const auto& c : cases) {
    const auto r = ok(request_with({}, json::array{json::object{{"role", "user"}, {"content", c.text}}}));
    const auto bound = reservation(r, kOpenAI, cfg()).prompt;
    for (auto e : {Encoding::cl100k_base, Encoding::o200k_base}) {
      const auto exact = count_prompt_tokens(r, counter(), e);
      EXPECT_GE(bound, exact) << c.name;
    }
  }
  // (What the estimator would have reserved for the first case: below the exact count.)
  const auto marks = ok(request_with({}, json::array{json::object{{"role", "user"}, {"content", cases[0].text}}}));
  EXPECT_LT(marks.prompt_tokens_estimate, count_prompt_tokens(marks, counter(), Encoding::cl100k_base));
}

// ---- 3, 4. the output bound that is sent upstream ---------------------------------------

TEST(Reservation, OllamaNumPredictOverridesMaxTokens) {
  const auto r = ok(request_with({{"max_tokens", 1}, {"options", json::object{{"num_predict", 4000}}}}));
  EXPECT_EQ(reservation(r, kOllama, cfg()).output, 4000);
  // max_tokens alone is what is sent as num_predict.
  EXPECT_EQ(reservation(ok(request_with({{"max_tokens", 77}})), kOllama, cfg()).output, 77);
}

TEST(Reservation, OllamaUnboundedOutputReservesTheContext) {
  for (int np : {-1, -2, 0}) {
    // The context the request was given...
    auto r = ok(request_with({{"max_tokens", 5}, {"options", json::object{{"num_predict", np}, {"num_ctx", 8192}}}}));
    auto res = reservation(r, kOllama, cfg());
    EXPECT_TRUE(res.output_unbounded) << np;
    EXPECT_EQ(res.output, 8192) << np;
    // ...else the largest context the configuration lets a request ask for.
    r = ok(request_with({{"options", json::object{{"num_predict", np}}}}));
    res = reservation(r, kOllama, cfg());
    EXPECT_TRUE(res.output_unbounded);
    EXPECT_EQ(res.output, 32768) << np;
  }
  // No num_predict and no max_tokens: Ollama's default is unbounded too.
  EXPECT_EQ(reservation(ok(request_with({})), kOllama, cfg()).output, 32768);
  // Without a num_ctx range: reserve_output_tokens.
  config::Config c = cfg();
  c.options.erase("num_ctx");
  EXPECT_EQ(reservation(ok(request_with({})), kOllama, c).output, 1024);
}

TEST(Reservation, AnthropicUpstreamReservesTheDefaultItIsSent) {
  const auto r = ok(request_with({}));
  EXPECT_EQ(reservation(r, kAnthropic, cfg()).output, kAnthropicDefaultMaxTokens);
  EXPECT_EQ(kAnthropicDefaultMaxTokens, 4096);
  EXPECT_EQ(reservation(ok(request_with({{"max_tokens", 300}})), kAnthropic, cfg()).output, 300);
  // OpenAI-compatible with no max_tokens: reserve_output_tokens (its default is unknown).
  const auto openai = reservation(r, kOpenAI, cfg());
  EXPECT_EQ(openai.output, 1024);
  EXPECT_TRUE(openai.output_unbounded);
}

TEST(Reservation, TheLargestOutputOfEveryWireThatMayServe) {
  const auto r = ok(request_with({}));
  constexpr Provider both[] = {Provider::openai, Provider::anthropic};
  EXPECT_EQ(reservation(r, both, cfg()).output, 4096);
}

// ---- 5. n ------------------------------------------------------------------------------

TEST(Reservation, ChoicesMultiplyTheOutput) {
  const auto r = ok(request_with({{"max_tokens", 200}, {"n", 8}}));
  EXPECT_EQ(reservation(r, kOpenAI, cfg()).output, 1600);
  // Ollama and Anthropic are not sent n: one choice.
  EXPECT_EQ(reservation(r, kOllama, cfg()).output, 200);
  EXPECT_EQ(reservation(r, kAnthropic, cfg()).output, 200);
  // n without max_tokens: reserve_output_tokens per choice.
  EXPECT_EQ(reservation(ok(request_with({{"n", 3}})), kOpenAI, cfg()).output, 3 * 1024);
}

// ---- 6. saturating ------------------------------------------------------------------------

TEST(Reservation, SaturatesInsteadOfOverflowing) {
  const auto r = ok(request_with({{"max_tokens", INT64_MAX}}));
  const auto res = reservation(r, kOpenAI, cfg());
  EXPECT_EQ(res.output, INT64_MAX);
  EXPECT_EQ(res.total(), INT64_MAX);
  const auto many = ok(request_with({{"max_tokens", INT64_MAX / 4}, {"n", 16}}));
  EXPECT_EQ(reservation(many, kOpenAI, cfg()).total(), INT64_MAX);
  const auto u64 = ok(request_with({{"max_tokens", json::value(std::uint64_t(UINT64_MAX))}}));
  EXPECT_EQ(reservation(u64, kOpenAI, cfg()).total(), INT64_MAX);
  EXPECT_EQ(saturating_add(INT64_MAX - 1, 5), INT64_MAX);
  EXPECT_EQ(saturating_mul(INT64_MAX / 2, 3), INT64_MAX);
  EXPECT_EQ(saturating_mul(0, INT64_MAX), 0);
}
