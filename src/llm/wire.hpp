#pragma once
// The upstream side of the internal request, by the wire a backend speaks (OpenAI-compatible
// — also the simulator —, Ollama, Anthropic) and what the request asks (a chat completion,
// embeddings): the call to send, and the answer read back into the internal form. The
// gateway calls these only; each wire's adapter is its own file (openai.cpp, ollama.cpp,
// anthropic.cpp, embeddings.cpp). No I/O here.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "llm/chat.hpp"

namespace sluice::llm {

// Why `wire` cannot serve `req` (no such API, an input it does not take, a field that
// would change the answer and has no translation), naming the field; nullopt when it can.
// With `drop_fields` (a route's drop_params), fields without a translation are left out of
// the call instead (the adapters send only what they translate).
std::optional<RequestError> unsupported(const ChatRequest& req, config::Provider wire, bool drop_fields = false);

// The request for a backend of `wire` (its real model, its path prefix).
UpstreamCall build_call(config::Provider wire, const ChatRequest& req, const config::Backend& backend);

// A whole 2xx answer -> the internal answer (a chat.completion, or an embeddings list);
// nullopt when the body is not one.
std::optional<Completion> read_answer(config::Provider wire, std::string body, const ChatRequest& req,
                                      std::string_view request_id);

// A non-2xx answer's body (an API error) in OpenAI's error shape, keeping its message.
std::string read_error(config::Provider wire, std::string body);

// The translator of a streamed answer (chat only) into chat.completion.chunk frames.
std::unique_ptr<StreamTranslator> make_stream(config::Provider wire, const ChatRequest& req,
                                              std::string_view request_id);

}  // namespace sluice::llm
