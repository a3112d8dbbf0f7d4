// A client's chat-completions body (llm::parse_chat_request with the gateway's default
// allow-lists), then, when accepted, the upstream bodies built from it for each provider.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "gateway_config.hpp"
#include "llm/anthropic.hpp"
#include "llm/chat.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = llm::parse_chat_request(body, fuzz::gateway_config());
  auto* req = std::get_if<llm::ChatRequest>(&parsed);
  if (!req) return 0;
  if (req->prompt_tokens_estimate < 0 || req->prompt_token_bound < 0) fuzz::fail("negative prompt estimate", body);
  config::Backend b;
  b.model = "real-model";
  b.path_prefix = "/v1";
  b.provider = config::Provider::openai;
  fuzz::expect_json(llm::build_openai_call(*req, b).body, "OpenAI upstream body is not JSON");
  b.provider = config::Provider::ollama;
  fuzz::expect_json(llm::build_ollama_call(*req, b).body, "Ollama upstream body is not JSON");
  b.provider = config::Provider::anthropic;
  fuzz::expect_json(llm::build_anthropic_call(*req, b).body, "Anthropic upstream body is not JSON");
  const std::string canned = llm::canned_openai_answer(*req, "req-1", "canned");
  if (req->stream) fuzz::expect_sse_json(canned, "canned stream is not JSON");
  else fuzz::expect_json(canned, "canned answer is not JSON");
  return 0;
}
