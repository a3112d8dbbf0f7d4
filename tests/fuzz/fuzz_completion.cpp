// Non-streamed upstream answers: an OpenAI body (usage read, passed through), an Ollama
// /api/chat body and an Anthropic Messages body (translated to chat.completion), the
// error bodies translated between the two shapes, a completion as a Response, and
// embeddings answers (OpenAI's passed through, Ollama's translated). What sluice writes
// must be JSON.
#include <cstdint>
#include <string>

#include "api/messages.hpp"
#include "api/responses.hpp"
#include "fuzz_util.hpp"
#include "gateway_config.hpp"
#include "llm/embeddings.hpp"
#include "llm/wire.hpp"
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
  switch (mode % 7) {
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
    case 4:
      fuzz::expect_json(api::anthropic_error_from_chat(400 + mode % 100, body), "translated chat error is not JSON");
      break;
    case 5: {  // a completion as a Response (the Responses API), and a native backend's Response
      auto c = llm::read_openai_completion(std::string(body));
      if (c) fuzz::expect_json(api::chat_to_response(*c, req), "Response object is not JSON");
      req.extra["id"] = "resp_0123";
      auto n = api::responses_native_answer(std::string(body), req);
      if (n) fuzz::expect_json(n->body, "relayed Response object is not JSON");
      break;
    }
    default: {  // embeddings answers: OpenAI's passed through, Ollama's translated
      auto parsed = llm::parse_embeddings_request(
          mode & 0x80 ? R"({"model":"m","input":["a","b"],"encoding_format":"base64"})" : R"({"model":"m","input":["a","b"]})",
          fuzz::gateway_config());
      const auto& ereq = std::get<llm::ChatRequest>(parsed);
      auto o = llm::read_answer(config::Provider::openai, std::string(body), ereq, "req-1");
      if (o && o->body != body) fuzz::fail("OpenAI embeddings body changed", body);
      auto t = llm::read_answer(config::Provider::ollama, std::string(body), ereq, "req-1");
      if (t) fuzz::expect_json(t->body, "translated Ollama embeddings are not JSON");
      break;
    }
  }
  return 0;
}
