#pragma once
// Which chat fields a wire cannot honour (support.cpp).
#include <optional>

#include "llm/chat.hpp"

namespace sluice::llm {

// The first field of `req` that `wire`'s adapter would have to drop although it changes the
// answer (n > 1, logprobs, audio, reasoning_effort... on Ollama and Anthropic), as a refusal
// (option_not_allowed) naming it; nullopt when every field set is sent or translated.
std::optional<RequestError> chat_field_unsupported(const ChatRequest& req, config::Provider wire);

}  // namespace sluice::llm
