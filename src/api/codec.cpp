// The client APIs' endpoints: one line per endpoint, each served by its API's codec.
#include "api/codec.hpp"

#include <stdexcept>

namespace sluice::api {

// An API without a native backend kind: native_on() is false, so these are never called.
llm::UpstreamCall Codec::native_call(const llm::ChatRequest&, const config::Backend&) const {
  throw std::logic_error("this client API has no native backends");
}
std::optional<llm::Completion> Codec::native_answer(std::string, const llm::ChatRequest&) const {
  throw std::logic_error("this client API has no native backends");
}
std::unique_ptr<llm::StreamTranslator> Codec::native_stream(const llm::ChatRequest&) const {
  throw std::logic_error("this client API has no native backends");
}

std::string Codec::token_count(std::int64_t tokens) const {
  return R"({"input_tokens":)" + std::to_string(tokens) + "}";
}

std::span<const Endpoint> endpoints() noexcept {
  static const Endpoint table[] = {
      {"/v1/chat/completions", &openai_chat(), Op::generate},
      {"/v1/embeddings", &openai_embeddings(), Op::generate},
      {"/v1/responses", &openai_responses(), Op::generate},
      {"/v1/messages", &anthropic_messages(), Op::generate},
      {"/v1/messages/count_tokens", &anthropic_messages(), Op::count_tokens},
  };
  return table;
}

const Endpoint* endpoint(std::string_view path) noexcept {
  for (const auto& e : endpoints()) {
    if (e.path == path) return &e;
  }
  return nullptr;
}

}  // namespace sluice::api
