#pragma once
// The Anthropic Messages API as a client API (POST /v1/messages, /v1/messages/count_tokens):
// a Messages request is turned into the equivalent chat-completions request, which then
// takes the usual path (validation, routing, admission, any upstream); the answer is turned
// back into a Messages answer or event stream. No I/O here. The codec (api/codec.hpp) is
// built on these functions; they are public for the tests and the fuzz targets.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "common/reason.hpp"
#include "llm/chat.hpp"

namespace sluice::api {

using llm::Completion;
using llm::RequestError;
using llm::StreamTranslator;

// A Messages request -> a chat-completions body (JSON). Checks the Messages schema: model,
// max_tokens (required, >= 1), messages (user/assistant turns; content a string or text,
// tool_use (assistant) and tool_result (user) blocks), system (a string or text blocks),
// stream, temperature, top_p, top_k, stop_sequences, metadata.user_id, tools (client
// tools) and tool_choice. tool_use blocks become the assistant message's tool_calls,
// tool_result blocks `tool` messages ("Error: " before the content when is_error).
// Anything else (server tools, thinking, image blocks...) is refused with a clear 400
// naming the field rather than silently dropped. Streams ask for usage (for message_delta).
// `for_count`: a count_tokens request, which has no max_tokens.
using AnthropicConversion = std::variant<std::string, RequestError>;
AnthropicConversion anthropic_to_chat(std::string_view body, bool for_count = false);

// A chat.completion body -> a Messages answer ("message" with a text block, then one
// tool_use block per tool call (input = the parsed arguments, {} when they are not a JSON
// object), stop_reason, usage). The text block is left out when empty and there are tool
// calls. `model` is the alias the client asked for; `id` becomes "msg_<id>".
std::string chat_to_anthropic(const Completion& done, std::string_view model, std::string_view id);

// An error in the Messages API's shape: {"type":"error","error":{"type","message"}}.
std::string anthropic_error_body(Reason reason, std::string_view message);
// The same for an HTTP status (an upstream's error passed through).
std::string anthropic_error_body(int status, std::string_view message);
// An OpenAI-shaped error body (an upstream's 4xx passed through) in the Messages shape,
// keeping its message.
std::string anthropic_error_from_chat(int status, std::string_view chat_error_body);
// As an SSE event, for a failure after the stream began.
std::string anthropic_error_event(Reason reason, std::string_view message);

// Wraps a translator that produces chat.completion.chunk frames and re-encodes them as
// Messages events: message_start, then per content block content_block_start,
// content_block_delta (text_delta, or input_json_delta for a tool call's arguments)...,
// content_block_stop, then message_delta (stop_reason, usage), message_stop. An error frame
// becomes an `error` event. Counters (content chunks, usage, finish reason, errors) are
// those of the inner translator.
std::unique_ptr<StreamTranslator> make_anthropic_output(std::unique_ptr<StreamTranslator> inner,
                                                        std::string model, std::string id,
                                                        std::int64_t input_tokens);

}  // namespace sluice::api
