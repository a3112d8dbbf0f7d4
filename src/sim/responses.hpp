#pragma once
// OpenAI's Responses API served natively (POST /v1/responses): the request (CreateResponse)
// read into a GenRequest, and the Response object and stream events of an answer. Pure
// functions, no I/O; wire.cpp's entry points dispatch here for Api::responses.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sim/answer.hpp"
#include "sim/wire.hpp"

namespace sluice::sim {

// Reads a CreateResponse body:
// - model (a non-empty string); input: a string (one user message) or an array of items,
//   objects with a "type" ("message", "function_call", "function_call_output",
//   "reasoning", ...) or, for a message, a "role" alone. Prompt bytes: instructions and
//   each item's content (a string or the "text" of its parts), arguments, output and
//   summary text. The last user message's input_text names a tool (choose_tool); a
//   function_call_output last is a tool's result.
// - stream, max_output_tokens (>= 1), tools (function tools {type, name, parameters};
//   other types are accepted and never called), tool_choice ("none", "auto", "required",
//   {type:"function", name}, or another object: auto), text.format (text, json_object,
//   json_schema with "schema"), reasoning (an object: a summary precedes the answer).
// - instructions, store, temperature, top_p, metadata, parallel_tool_calls, user,
//   truncation ("auto" | "disabled"), include, stream_options: type-checked, echoed in the
//   Response where it has them, otherwise without effect.
// - previous_response_id and conversation are refused: this server stores nothing.
// Other fields are ignored. Returns nullopt and sets `error` when the body is unusable.
std::optional<GenRequest> parse_responses_request(std::string_view body, std::string& error);

// The stream events sent with token `index` (see stream_token): token 0 also carries
// response.created, response.in_progress, the reasoning item whole (added, its summary
// part and text, done) and the answer's item opened; a message's token is a
// response.output_text.delta, a tool call's token 0 its head (output_item.added) and each
// later one a response.function_call_arguments.delta. sequence_number counts from 0
// across the stream.
std::string responses_stream_token(const ReplyInfo& r, const Answer& a, std::int64_t index);

// After the last token: the item closed (output_text.done and content_part.done, or
// function_call_arguments.done; output_item.done), then response.completed, or
// response.incomplete when a limit cut the answer, carrying the whole Response.
std::string responses_stream_end(const ReplyInfo& r, const Answer& a);

// The Response object of a finished answer.
std::string responses_body(const ReplyInfo& r, const Answer& a);

}  // namespace sluice::sim
