// The Anthropic Messages API both ways: a client's Messages request -> a chat-completions
// body (api::anthropic_to_chat, then parsed like any chat request), and an upstream
// chat.completion -> a Messages answer (api::chat_to_anthropic).
#include <cstdint>
#include <string>

#include "api/messages.hpp"
#include "fuzz_util.hpp"
#include "gateway_config.hpp"
#include "llm/anthropic.hpp"
#include "llm/chat.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view body = in.rest();
  if (mode & 1) {
    auto c = llm::read_openai_completion(std::string(body));
    if (!c) return 0;
    fuzz::expect_json(api::chat_to_anthropic(*c, "claude-alias", "req-1"), "Messages answer is not JSON");
    return 0;
  }
  auto conv = api::anthropic_to_chat(body, mode & 2);
  auto* chat = std::get_if<std::string>(&conv);
  if (!chat) return 0;
  fuzz::expect_json(*chat, "converted chat body is not JSON");
  auto parsed = llm::parse_chat_request(*chat, fuzz::gateway_config());
  if (auto* req = std::get_if<llm::ChatRequest>(&parsed)) {
    config::Backend b;
    b.provider = config::Provider::anthropic;
    b.model = "claude-real";
    fuzz::expect_json(llm::build_anthropic_call(*req, b).body, "Anthropic upstream body is not JSON");
  }
  return 0;
}
