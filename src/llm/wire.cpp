// Dispatch by wire and task to the adapters.
#include "llm/wire.hpp"

#include "llm/anthropic.hpp"
#include "llm/embeddings.hpp"
#include "llm/support.hpp"

namespace sluice::llm {

std::optional<RequestError> unsupported(const ChatRequest& req, config::Provider wire, bool drop_fields) {
  if (req.task == Task::embed) return embeddings_unsupported(req, wire);
  if (drop_fields) return std::nullopt;
  return chat_field_unsupported(req, wire);
}

UpstreamCall build_call(config::Provider wire, const ChatRequest& req, const config::Backend& backend) {
  if (req.task == Task::embed) {
    return wire == config::Provider::ollama ? build_ollama_embeddings_call(req, backend)
                                            : build_openai_embeddings_call(req, backend);
  }
  switch (wire) {
    case config::Provider::ollama: return build_ollama_call(req, backend);
    case config::Provider::anthropic: return build_anthropic_call(req, backend);
    case config::Provider::openai:
    case config::Provider::simulated: break;
  }
  return build_openai_call(req, backend);
}

std::optional<Completion> read_answer(config::Provider wire, std::string body, const ChatRequest& req,
                                      std::string_view request_id) {
  if (req.task == Task::embed) {
    return wire == config::Provider::ollama ? translate_ollama_embeddings(body, req)
                                            : read_openai_embeddings(std::move(body));
  }
  switch (wire) {
    case config::Provider::ollama: return translate_ollama_completion(body, req, request_id);
    case config::Provider::anthropic: return translate_anthropic_completion(body, req, request_id);
    case config::Provider::openai:
    case config::Provider::simulated: break;
  }
  return read_openai_completion(std::move(body));
}

std::string read_error(config::Provider wire, std::string body) {
  return wire == config::Provider::anthropic ? chat_error_from_anthropic(body) : body;
}

std::unique_ptr<StreamTranslator> make_stream(config::Provider wire, const ChatRequest& req,
                                              std::string_view request_id) {
  switch (wire) {
    case config::Provider::ollama: return make_ollama_stream(req, request_id);
    case config::Provider::anthropic: return make_anthropic_stream(req, request_id);
    case config::Provider::openai:
    case config::Provider::simulated: break;
  }
  return make_openai_stream(req);
}

}  // namespace sluice::llm
