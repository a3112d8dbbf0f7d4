// Non-streamed upstream answers: an OpenAI body (usage read, passed through), an Ollama
// /api/chat body and an Anthropic Messages body (translated to chat.completion), and the
// error bodies translated between the two shapes. What sluice writes must be JSON.
#include <cstdint>
#include <string>

#include "api/messages.hpp"
#include "fuzz_util.hpp"
#include "llm/anthropic.hpp"
#include "llm/chat.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view body = in.rest();
  llm::ChatRequest req;
  req.model = "m";
  req.prompt_tokens_estimate = 5;
  switch (mode % 5) {
    case 0: {
      auto c = llm::read_openai_completion(std::string(body));
      if (c && c->body != body) fuzz::fail("OpenAI body changed", body);
      break;
    }
    case 1: {
      auto c = llm::translate_ollama_completion(body, req, "req-1");
      if (c) fuzz::expect_json(c->body, "translated Ollama completion is not JSON");
      break;
    }
    case 2: {
      auto c = llm::translate_anthropic_completion(body, req, "req-1");
      if (c) fuzz::expect_json(c->body, "translated Anthropic completion is not JSON");
      break;
    }
    case 3:
      fuzz::expect_json(llm::chat_error_from_anthropic(body), "translated Anthropic error is not JSON");
      break;
    default:
      fuzz::expect_json(api::anthropic_error_from_chat(400 + mode % 100, body), "translated chat error is not JSON");
      break;
  }
  return 0;
}
