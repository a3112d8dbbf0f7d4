#pragma once
// Wire formats of the simulator: request parsing and response bodies for the OpenAI,
// Ollama and Anthropic chat APIs and OpenAI's Responses API (its own file: responses.cpp).
// Pure functions, no I/O.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "http/server.hpp"
#include "sim/answer.hpp"
#include "sim/sim.hpp"

namespace sluice::sim {

enum class Api { openai, ollama, anthropic, responses };

// What the content must be: text, or a JSON object (any, or one for a schema).
enum class Format { text, json_object, json_schema };
enum class ToolChoice { automatic, none, required, named };

struct GenRequest {
  Api api = Api::openai;
  std::string model;
  bool stream = false;
  bool include_usage = false;               // OpenAI stream_options.include_usage
  std::optional<std::int64_t> max_tokens;   // as the request set it (see plan_output)
  std::int64_t prompt_tokens = 1;           // content bytes / 4, min 1
  std::uint64_t seed = 0;                   // the request's seed (two's complement), else 0
  std::vector<std::string> stop;            // stop sequences (empty ones left out)
  Format format = Format::text;
  boost::json::value schema;                // Format::json_schema: the schema (null: none given)
  struct Tool {
    std::string name;
    boost::json::value parameters;          // its JSON Schema (null: none)
  };
  std::vector<Tool> tools;                  // function tools offered
  ToolChoice tool_choice = ToolChoice::automatic;
  std::string tool_choice_name;             // ToolChoice::named
  std::string last_user_text;               // the text of the last user message (when tools are offered)
  bool last_is_tool_result = false;         // the last message is a tool's result
  bool logprobs = false;                    // OpenAI logprobs: true
  int top_logprobs = 0;                     // OpenAI top_logprobs (0..20)
  bool reasoning = false;                   // Responses "reasoning" given: a summary precedes the answer
  boost::json::object echo;                 // Responses: the request's fields its Response repeats
  LoadOptions load;                         // Ollama: options.num_ctx, num_gpu, num_batch (else its defaults)
  bool unload_after = false;                // Ollama: keep_alive 0 (the model is unloaded after the answer)
};

// Ollama's keep_alive: 0 (a number, or a duration string "0", "0s", "0m"): unload.
bool keep_alive_zero(const boost::json::value* v);
// options.num_ctx, num_gpu and num_batch of an Ollama request into `o` (integers; num_ctx and
// num_batch >= 1, num_gpu >= -1). False and `error` on a bad one.
bool read_load_options(const boost::json::object& options, LoadOptions& o, std::string& error);

// Parses a generation request body:
// - OpenAI /v1/chat/completions: model, messages, stream (default false),
//   stream_options.include_usage, max_completion_tokens (preferred) or max_tokens (>= 1),
//   seed, stop (string or array), response_format (json_object, json_schema), tools
//   (function tools), tool_choice, logprobs, top_logprobs (0..20).
// - Ollama /api/chat: model, messages, stream (default true), options.num_predict
//   (negative = no limit), options.seed, options.stop, format ("json" or a schema), tools.
// - Anthropic /v1/messages: model, messages, system, stream (default false), max_tokens
//   (>= 1), stop_sequences, tools (input_schema), tool_choice.
// - OpenAI /v1/responses: see parse_responses_request (responses.hpp).
// Prompt bytes are the message contents (strings, or the "text" of content parts) plus the
// Anthropic "system" text. Returns nullopt and sets `error` when the body is unusable.
std::optional<GenRequest> parse_request(Api api, std::string_view body, std::string& error);

// A request body as a JSON object (stored in `sp`); nullopt, with `error` said as the
// simulator answers it, when it is not JSON or not an object.
std::optional<boost::json::value> parse_body(std::string_view body, std::string& error, boost::json::storage_ptr sp = {});

// The identity of one answer.
struct ReplyInfo {
  Api api = Api::openai;
  std::string id;             // "chatcmpl-..." / "msg_..." / "resp_..." (unused by Ollama)
  std::string model;          // echoed from the request
  std::int64_t created = 0;   // unix seconds
  std::int64_t prompt_tokens = 0;
  bool include_usage = false;
  bool logprobs = false;      // OpenAI: log probabilities asked for
  int top_logprobs = 0;
  boost::json::object echo;   // Responses: GenRequest::echo
};

// Durations reported by Ollama's final object (nanoseconds).
struct Timing {
  std::int64_t total_ns = 0;
  std::int64_t load_ns = 0;
  std::int64_t prompt_eval_ns = 0;   // arrival (or slot) to first token
  std::int64_t eval_ns = 0;          // first token to last
};

std::string_view stream_content_type(Api api);  // text/event-stream or application/x-ndjson

// The stream bytes for token `index` of the answer (one chunk). Index 0 also carries what
// precedes the first token: the assistant role (OpenAI) or message_start,
// content_block_start and ping (Anthropic). A tool call's token 0 is its head: OpenAI
// delta.tool_calls with id, type and name (arguments ""), Anthropic a tool_use
// content_block_start; later tokens are pieces of the arguments (OpenAI
// delta.tool_calls[0].function.arguments, Anthropic input_json_delta). Ollama sends a tool
// call whole, in its last token's line: the other tokens of a tool call return "".
std::string stream_token(const ReplyInfo& r, const Answer& a, std::int64_t index);

// Everything after the last token: OpenAI final chunk with finish_reason, the usage chunk
// when include_usage, "data: [DONE]"; Ollama final object with counts and durations;
// Anthropic content_block_stop, message_delta, message_stop.
std::string stream_end(const ReplyInfo& r, const Answer& a, const Timing& t);

// Non-streaming answer body.
std::string full_body(const ReplyInfo& r, const Answer& a, const Timing& t);

enum class ErrorKind { bad_request, not_found, rate_limited, internal, unavailable, queue_full };
// Error reply in the API's shape (status from the kind; Retry-After: 1 on 429):
// OpenAI {"error":{"message","type","code","param"}}, Ollama {"error":"..."},
// Anthropic {"type":"error","error":{"type","message"}}.
http::Response error_response(Api api, ErrorKind kind, std::string_view message);
int status_of(ErrorKind kind) noexcept;

// GET /v1/models and GET /api/tags bodies.
std::string openai_models_body(const std::vector<std::string>& models, std::int64_t created);
std::string ollama_tags_body(const std::vector<std::string>& models);

// RFC 3339 UTC with nanoseconds, as Ollama writes created_at.
std::string rfc3339_now();

// Pieces shared by the request parsers and answer writers of the APIs.

// "model": a non-empty string, else false with `error` set.
bool read_model(const boost::json::object& body, std::string& model, std::string& error);
// An integer (an integral double too, within range); false for anything else.
bool get_int(const boost::json::value& v, std::int64_t& out);
// Bytes of a message "content": a string, or an array of parts whose "text" is counted.
std::size_t content_bytes(const boost::json::value& content);
// The text of a message "content": a string, or the "text" of its parts of type
// `text_type` (or of no type).
std::string content_text(const boost::json::value& content, std::string_view text_type);
// Sets the requested output format from a format's type ("text", "json_object",
// "json_schema") and its schema (json_schema without one: any object). False for another type.
bool set_format(GenRequest& r, std::string_view type, const boost::json::value* schema);
// "event: <type>\ndata: <json>\n\n"
std::string sse_event(std::string_view type, const boost::json::object& data);

}  // namespace sluice::sim
