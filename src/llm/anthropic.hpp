#pragma once
// Anthropic as an upstream (provider: anthropic): a chat request becomes a Messages call;
// the answer and its events come back as chat completions. (Anthropic as a client API is
// api/messages.hpp.) No I/O here.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/reason.hpp"
#include "llm/chat.hpp"

namespace sluice::llm {

// Requests without max_tokens get this many (the Messages API requires the field).
inline constexpr std::int64_t kAnthropicDefaultMaxTokens = 4096;

// A chat request -> POST <prefix>/v1/messages: system and developer messages become
// `system`; user and assistant turns keep their text (consecutive turns of one role are
// joined, as the Messages API wants them alternating); assistant tool_calls become tool_use
// blocks (arguments that are not a JSON object: input {}), tool messages tool_result
// blocks of a user turn (one without tool_call_id stays text marked "[tool result]");
// function tools -> tools, tool_choice/parallel_tool_calls -> tool_choice; temperature is
// capped at 1 (the Messages range); stop -> stop_sequences; user -> metadata.user_id.
// Credentials go in headers (the gateway's).
UpstreamCall build_anthropic_call(const ChatRequest& req, const config::Backend& backend);

// A Messages answer -> the chat.completion body (id "chatcmpl-<request_id>", model = the
// client's alias, text blocks joined, tool_use blocks -> tool_calls, usage from
// input_tokens/output_tokens). nullopt for anything else.
std::optional<Completion> translate_anthropic_completion(std::string_view upstream_body, const ChatRequest& req,
                                                         std::string_view request_id);
// An Anthropic error body -> the OpenAI error shape, keeping type and message.
std::string chat_error_from_anthropic(std::string_view anthropic_error_body);

// Messages events -> chat.completion.chunk frames (tool_use blocks -> delta.tool_calls);
// an `error` event becomes an error frame.
std::unique_ptr<StreamTranslator> make_anthropic_stream(const ChatRequest& req, std::string_view request_id);

}  // namespace sluice::llm
