// The client APIs' requests: Anthropic Messages both ways (a client's Messages request ->
// a chat-completions body, api::anthropic_to_chat, then parsed like any chat request; an
// upstream chat.completion -> a Messages answer, api::chat_to_anthropic), the Responses
// API's request (api::responses_to_chat) and an embeddings request, each on to the bodies
// sent upstream.
#include <cstdint>
#include <string>

#include "api/messages.hpp"
#include "api/responses.hpp"
#include "fuzz_util.hpp"
#include "llm/embeddings.hpp"
#include "llm/wire.hpp"
#include "gateway_config.hpp"
#include "llm/anthropic.hpp"
#include "llm/chat.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view body = in.rest();
  if (mode & 4) {  // the Responses API's request, on to an OpenAI upstream's body
    auto conv = api::responses_to_chat(body);
    auto* c = std::get_if<api::ResponsesConversion>(&conv);
    if (!c) return 0;
    fuzz::expect_json(c->chat, "converted Responses request is not JSON");
    auto parsed = llm::parse_chat_request(c->chat, fuzz::gateway_config());
    if (auto* req = std::get_if<llm::ChatRequest>(&parsed)) {
      config::Backend b;
      b.model = "real";
      fuzz::expect_json(llm::build_call(config::Provider::openai, *req, b).body, "upstream body is not JSON");
      fuzz::expect_json(llm::build_call(config::Provider::ollama, *req, b).body, "Ollama body is not JSON");
    }
    return 0;
  }
  if (mode & 8) {  // an embeddings request, on to both wires' bodies
    auto parsed = llm::parse_embeddings_request(body, fuzz::gateway_config());
    if (auto* req = std::get_if<llm::ChatRequest>(&parsed)) {
      config::Backend b;
      b.model = "real";
      fuzz::expect_json(llm::build_call(config::Provider::openai, *req, b).body, "embeddings body is not JSON");
      fuzz::expect_json(llm::build_call(config::Provider::ollama, *req, b).body, "Ollama embed body is not JSON");
    }
    return 0;
  }
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
