// What a Messages client is charged: the parts of its request that reach the upstream
// (tool_use inputs, tool_result contents, tools) are reserved, and its stream's relayed
// output is counted as the inner chat stream's.
#include <gtest/gtest.h>

#include <string>

#include "api/codec.hpp"
#include "api/messages.hpp"
#include "config/config.hpp"
#include "llm/chat.hpp"
#include "rank_files.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace sluice;
using namespace sluice::api;
using llm::ChatRequest;
using tokenizer::Encoding;

namespace {

const tokenizer::Counter& counter() {
  static const tokenizer::Counter c = [] {
    std::string warnings;
    return tokenizer::Counter::load_dir(sluice::test::rank_dir(), &warnings);
  }();
  return c;
}

std::int64_t bpe(std::string_view text) { return static_cast<std::int64_t>(counter().count(text, Encoding::cl100k_base)); }

TEST(MessagesAccounting, ToolUseInputAndToolResultsAreReserved) {
  SLUICE_REQUIRE_RANK_FILES();
  ASSERT_TRUE(counter().exact(Encoding::cl100k_base)) << "run scripts/fetch-tokenizer.sh";
  const std::string input = std::string(R"({"q":")") + std::string(6000, 'z') + R"("})";
  const std::string messages_body = R"({"model":"m","max_tokens":10,"tools":[{"name":"t","description":")" +
                                    std::string(8000, 'd') + R"(","input_schema":{"type":"object"}}],
      "messages":[{"role":"user","content":"go"},
        {"role":"assistant","content":[{"type":"tool_use","id":"tu_1","name":"t","input":)" + input + R"(}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":")" +
                                    std::string(7000, 'o') + R"("}]}]})";
  config::Config cfg;
  auto parsed = anthropic_messages().decode(messages_body, Op::generate, cfg);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(parsed)) << std::get<llm::RequestError>(parsed).message;
  const config::Provider wire[] = {config::Provider::anthropic};
  const auto got = llm::reservation(std::get<ChatRequest>(parsed), wire, cfg, &counter(), Encoding::cl100k_base).prompt;
  EXPECT_GE(got, bpe(std::string(8000, 'd')) + bpe(std::string(6000, 'z')) + bpe(std::string(7000, 'o')));
}

TEST(MessagesAccounting, StreamCountsWhatItsInnerTranslatorRelayed) {
  SLUICE_REQUIRE_RANK_FILES();
  ChatRequest req;
  req.model = "alias";
  req.stream = true;
  auto tr = anthropic_messages().stream(llm::make_openai_stream(req), req, "rid");
  tr->count_output(&counter(), Encoding::cl100k_base);
  std::string out;
  ASSERT_TRUE(tr->feed(R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":" hello hello hello"},"finish_reason":null}]})"
                       "\n\n",
                       out));
  EXPECT_EQ(tr->relayed_tokens(), bpe(" hello hello hello"));
}

}  // namespace
