// What settlement reads from an upstream: usage counts are valid only as non-negative
// integers within int64 (every other value is -1, unknown, in all three wire formats,
// streamed or not), and the output a stream relayed is counted with the tokenizer when a
// counter is attached (per token, not per chunk), in bounded memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llm/anthropic.hpp"
#include "llm/chat.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice;
using namespace sluice::llm;

namespace {

ChatRequest request(bool stream) {
  ChatRequest r;
  r.model = "alias";
  r.stream = stream;
  r.prompt_tokens_estimate = 11;
  return r;
}

const tokenizer::Counter& exact_counter() {
  static const tokenizer::Counter c = [] {
    std::string warnings;
    return tokenizer::Counter::load_dir(sluice::test::rank_dir(), &warnings);
  }();
  return c;
}

// A usage value as it may arrive, and what settlement must read from it.
struct Odd {
  const char* json;  // nullptr: the field is missing
  std::int64_t want;
};
const std::vector<Odd> kOdd = {
    {"42", 42},  {"0", 0},     {"\"12\"", -1}, {"-5", -1},   {"3.7", -1},
    {"1e30", -1}, {"12.0", -1}, {"9223372036854775808", -1}, {"null", -1}, {nullptr, -1},
};

std::string field(const char* name, const char* value) {
  return value ? std::string("\"") + name + "\":" + value + "," : std::string();
}

TEST(UsageValues, OpenAiCompletion) {
  for (const auto& o : kOdd) {
    std::string body = R"({"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{)" +
                       field("prompt_tokens", o.json) + field("completion_tokens", o.json) + R"("total_tokens":1}})";
    auto c = read_openai_completion(body);
    ASSERT_TRUE(c) << body;
    EXPECT_EQ(c->usage.prompt_tokens, o.want) << body;
    EXPECT_EQ(c->usage.completion_tokens, o.want) << body;
  }
}

TEST(UsageValues, OllamaCompletion) {
  for (const auto& o : kOdd) {
    std::string body = "{" + field("prompt_eval_count", o.json) + field("eval_count", o.json) +
                       R"("model":"m","message":{"role":"assistant","content":"hi"},"done":true})";
    auto c = translate_ollama_completion(body, request(false), "rid");
    ASSERT_TRUE(c) << body;
    EXPECT_EQ(c->usage.prompt_tokens, o.want) << body;
    EXPECT_EQ(c->usage.completion_tokens, o.want) << body;
  }
}

TEST(UsageValues, AnthropicCompletion) {
  for (const auto& o : kOdd) {
    std::string body = R"({"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{)" +
                       field("input_tokens", o.json) + field("output_tokens", o.json) + R"("x":0}})";
    auto c = translate_anthropic_completion(body, request(false), "rid");
    ASSERT_TRUE(c) << body;
    EXPECT_EQ(c->usage.prompt_tokens, o.want) << body;
    EXPECT_EQ(c->usage.completion_tokens, o.want) << body;
  }
}

TEST(UsageValues, OpenAiStream) {
  for (const auto& o : kOdd) {
    auto tr = make_openai_stream(request(true));
    std::string out;
    ASSERT_TRUE(tr->feed(R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]})"
                         "\n\n",
                         out));
    std::string usage = R"(data: {"id":"c","choices":[],"usage":{)" + field("prompt_tokens", o.json) +
                        field("completion_tokens", o.json) + R"("total_tokens":1}})" + "\n\ndata: [DONE]\n\n";
    ASSERT_TRUE(tr->feed(usage, out));
    ASSERT_TRUE(tr->finish(out));
    EXPECT_EQ(tr->usage().prompt_tokens, o.want) << usage;
    EXPECT_EQ(tr->usage().completion_tokens, o.want) << usage;
  }
}

TEST(UsageValues, OllamaStream) {
  for (const auto& o : kOdd) {
    auto tr = make_ollama_stream(request(true), "rid");
    std::string out;
    std::string lines = std::string(R"({"model":"m","message":{"role":"assistant","content":"hi"},"done":false})") + "\n{" +
                        field("prompt_eval_count", o.json) + field("eval_count", o.json) +
                        R"("model":"m","message":{"role":"assistant","content":""},"done":true})" + "\n";
    ASSERT_TRUE(tr->feed(lines, out));
    ASSERT_TRUE(tr->finish(out));
    EXPECT_EQ(tr->usage().prompt_tokens, o.want) << lines;
    EXPECT_EQ(tr->usage().completion_tokens, o.want) << lines;
  }
}

TEST(UsageValues, AnthropicStream) {
  for (const auto& o : kOdd) {
    auto tr = make_anthropic_stream(request(true), "rid");
    std::string out;
    std::string events =
        std::string("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{") +
        field("input_tokens", o.json) + "\"x\":0}}}\n\n" +
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{" +
        field("output_tokens", o.json) + "\"x\":0}}\n\n" + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    ASSERT_TRUE(tr->feed(events, out));
    ASSERT_TRUE(tr->finish(out));
    EXPECT_EQ(tr->usage().prompt_tokens, o.want) << events;
    EXPECT_EQ(tr->usage().completion_tokens, o.want) << events;
  }
}

std::string content_chunk(std::string_view text) {
  std::string s = R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":)";
  s += '"';
  s += text;  // (plain text in these tests: nothing to escape)
  s += R"("},"finish_reason":null}]})";
  return s + "\n\n";
}

// 2000 tokens in 100 chunks of 20: without a counter, 100 (chunks); with one, 2000.
TEST(RelayedTokens, PerTokenWithACounterPerChunkWithout) {
  SLUICE_REQUIRE_RANK_FILES();
  const auto& counter = exact_counter();
  std::string piece;
  for (int i = 0; i < 20; ++i) piece += " hello";
  std::string whole;
  for (int i = 0; i < 100; ++i) whole += piece;
  ASSERT_EQ(counter.count(whole, tokenizer::Encoding::cl100k_base), 2000u);

  auto plain = make_openai_stream(request(true));
  auto counted = make_openai_stream(request(true));
  counted->count_output(&counter, tokenizer::Encoding::cl100k_base);
  std::string out;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(plain->feed(content_chunk(piece), out));
    ASSERT_TRUE(counted->feed(content_chunk(piece), out));
  }
  EXPECT_EQ(plain->relayed_tokens(), 100);
  EXPECT_EQ(counted->relayed_tokens(), 2000);
}

// Tool call names and arguments count, in every wire format; text without spaces is cut
// at a character boundary, which adds at most one token per fold.
TEST(RelayedTokens, ToolCallsAndEveryWire) {
  SLUICE_REQUIRE_RANK_FILES();
  const auto& counter = exact_counter();
  const auto enc = tokenizer::Encoding::cl100k_base;
  std::vector<std::string> args;
  std::string all_args;
  for (int i = 0; i < 300; ++i) {
    args.push_back("{\\\"row\\\":" + std::to_string(i) + ",\\\"v\\\":\\\"\xe6\xbc\xa2\xe5\xad\x97\xe3\x81\x8b\xe3\x81\xaa\\\"}");
    all_args += "{\"row\":" + std::to_string(i) + ",\"v\":\"\xe6\xbc\xa2\xe5\xad\x97\xe3\x81\x8b\xe3\x81\xaa\"}";
  }
  const std::int64_t want = static_cast<std::int64_t>(counter.count("store" + all_args, enc));
  const std::int64_t folds = static_cast<std::int64_t>(all_args.size() / StreamTranslator::kRelayedFoldBytes) + 1;

  {  // OpenAI deltas
    auto tr = make_openai_stream(request(true));
    tr->count_output(&counter, enc);
    std::string out;
    for (int i = 0; i < 300; ++i) {
      std::string call = i == 0 ? R"({"index":0,"id":"call_1","type":"function","function":{"name":"store","arguments":")" + args[i] + "\"}}"
                                : R"({"index":0,"function":{"arguments":")" + args[i] + "\"}}";
      ASSERT_TRUE(tr->feed(R"(data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[)" + call + R"(]},"finish_reason":null}]})" "\n\n", out));
    }
    EXPECT_GE(tr->relayed_tokens(), want);
    EXPECT_LE(tr->relayed_tokens(), want + folds);
  }
  {  // Anthropic events
    auto tr = make_anthropic_stream(request(true), "rid");
    tr->count_output(&counter, enc);
    std::string out;
    ASSERT_TRUE(tr->feed("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"store\",\"input\":{}}}\n\n", out));
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(tr->feed("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"" + args[i] + "\"}}\n\n", out));
    }
    EXPECT_GE(tr->relayed_tokens(), want);
    EXPECT_LE(tr->relayed_tokens(), want + folds);
    // Re-encoded for an Anthropic client: the inner translator's count.
  }
  {  // Ollama lines: text content
    auto tr = make_ollama_stream(request(true), "rid");
    tr->count_output(&counter, enc);
    std::string out, text;
    for (int i = 0; i < 300; ++i) {
      const std::string piece = " row " + std::to_string(i) + " \xe6\xbc\xa2\xe5\xad\x97";
      text += piece;
      ASSERT_TRUE(tr->feed(R"({"model":"m","message":{"role":"assistant","content":")" + piece + R"("},"done":false})" "\n", out));
    }
    const auto w = static_cast<std::int64_t>(counter.count(text, enc));
    EXPECT_GE(tr->relayed_tokens(), w);
    EXPECT_LE(tr->relayed_tokens(), w + static_cast<std::int64_t>(text.size() / StreamTranslator::kRelayedFoldBytes) + 1);
  }
}

TEST(CompletionOutputText, ContentRefusalReasoningAndToolCalls) {
  const std::string body =
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"A","refusal":"B","reasoning_content":"C",)"
      R"("tool_calls":[{"id":"1","type":"function","function":{"name":"D","arguments":"{\"x\":1}"}}]}},)"
      R"({"index":1,"message":{"role":"assistant","content":null,"reasoning":"E"}}]})";
  EXPECT_EQ(completion_output_text(body), "ABCD{\"x\":1}E");
  EXPECT_EQ(completion_output_text("not json"), "");
  EXPECT_EQ(completion_output_text(R"({"choices":"x"})"), "");
}

}  // namespace
