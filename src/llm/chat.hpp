#pragma once
// The OpenAI chat-completions request as sluice sees it: parsed once, validated against
// the configured allow-list, then rewritten for each provider. No I/O here.
#include <boost/json/object.hpp>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/reason.hpp"
#include "config/backend.hpp"
#include "tokenizer/tokenizer.hpp"

namespace sluice::config {
struct Config;  // config/config.hpp: only chat.cpp reads its fields
}

namespace sluice::llm {

// What the internal request asks of a model.
enum class Task : std::uint8_t {
  chat,   // a chat completion (every generating client API)
  embed,  // embeddings of the input (llm/embeddings.hpp): the body is an embeddings request
};

struct RequestError {
  Reason reason = Reason::invalid_request;
  std::string message;
  std::string param;               // offending field, e.g. "options.num_ctx"
};

struct ChatRequest {
  Task task = Task::chat;
  boost::json::object body;        // the client's body, validated
  std::string model;               // as the client asked (an alias)
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  std::optional<std::int64_t> max_tokens;  // max_completion_tokens or max_tokens
  std::int64_t prompt_tokens_estimate = 0;
  std::int64_t prompt_token_bound = 0;  // see prompt_token_bound()
  // What the client API keeps of its request for its answer and its filters, never sent
  // upstream (the Responses API: the response id, instructions, store,
  // previous_response_id, the tools as the client wrote them...).
  boost::json::object extra;
  // The request in its client API's own form, for a backend that serves that API itself
  // (the Responses API: a CreateResponse body, its input an array of items); empty when
  // the API has no such backend kind.
  boost::json::object native;
  // What only such a backend can serve (a built-in tool...), naming the field: refused
  // unless every backend of the route is one (the wire_support filter).
  std::optional<RequestError> native_only;
  // What of it uses the operator's upstream account beyond the answer: the allow_params
  // name a route must list for it (builtin_tools, file_ids, prompt; the billed_fields
  // filter) and the first field that does.
  struct Billed {
    std::string kind, param;
  };
  std::vector<Billed> native_billed;
};

using ParseResult = std::variant<ChatRequest, RequestError>;

// Parses and validates: JSON well-formed; "model" a non-empty string; "messages" a
// non-empty array of {role, content}; "stream" bool; top-level fields in the known set
// (unknown -> option_not_allowed); numeric params listed in `params` within range
// (option_out_of_range); every key of the "options" object listed in `options` and within
// range.
ParseResult parse_chat_request(std::string_view body, const config::Config& cfg);

// Recomputes prompt_tokens_estimate and prompt_token_bound after a change of the body (a
// filter that adds messages: a stored conversation continued).
void recount_prompt(ChatRequest& req);

// Token count of a text by the fallback estimator (tokenizer::estimate, cl100k weights;
// its measured error is in docs/tokenizer.md).
std::int64_t estimate_tokens(std::string_view text) noexcept;

// Prompt tokens of a parsed request by OpenAI's chat formula, counted with `counter` (the
// exact BPE where its rank file is loaded). Every part an upstream is sent counts: per
// message 3 + role + content text + name (+1) + its other fields (tool_calls, tool_call_id...
// as JSON); kImageTokenBound per image part, other non-text parts as their JSON; then the
// request's tools, tool_choice, response_format, functions, function_call and prediction as JSON;
// 3 priming the reply.
// parse_chat_request fills prompt_tokens_estimate the same way with the estimator.
std::int64_t count_prompt_tokens(const ChatRequest& req, const tokenizer::Counter& counter,
                                 tokenizer::Encoding encoding);
// An upper bound of count_prompt_tokens for every BPE encoding, found without tokenizing:
// the same formula with each text's UTF-8 bytes (a BPE token is at least one byte).
// parse_chat_request computes it with the estimate, in the same walk of the messages.
inline std::int64_t prompt_token_bound(const ChatRequest& req) { return req.prompt_token_bound; }

// Tokens reserved per image part: an upper bound of what the providers publish for one
// image. OpenAI (GPT-4o class, detail high/auto): 85 + 170 per 512 px tile of the image
// scaled into 2048x2048 then to 768 px on its short side, at most 8 tiles (768x2048):
// 1445. Anthropic: width*height/750 for an image within 1.15 megapixels (larger ones are
// scaled down): about 1600. See docs/limits.md.
inline constexpr std::int64_t kImageTokenBound = 1600;

// a + b and a * b, saturating at INT64_MAX (for non-negative token figures).
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}
constexpr std::int64_t saturating_mul(std::int64_t a, std::int64_t b) noexcept {
  return a != 0 && b > INT64_MAX / a ? INT64_MAX : a * b;
}

// What a request reserves at admission (token quotas): an upper bound of what the upstream
// may charge for it. Pure; every sum saturates at INT64_MAX.
struct Reservation {
  std::int64_t prompt = 0;   // prompt tokens
  std::int64_t output = 0;   // output tokens: the bound sent upstream, times the choices (n)
  bool output_unbounded = false;  // the upstream was sent no bound: `output` is the configured cap
  std::int64_t total() const noexcept { return saturating_add(prompt, output); }
};
// The output tokens the upstream of `provider` may generate for `req`, by what its call
// carries (build_*_call): OpenAI-compatible and simulated: max_completion_tokens /
// max_tokens times n (no bound sent: rate_limits.reserve_output_tokens); Ollama:
// options.num_predict, else max_tokens (n is not sent), a value <= 0 or none meaning
// unbounded; Anthropic: max_tokens, else kAnthropicDefaultMaxTokens (4096).
// An unbounded Ollama output reserves the context it was given (options.num_ctx), else the
// configured range's maximum of options.num_ctx, else rate_limits.reserve_output_tokens.
std::int64_t output_token_bound(const ChatRequest& req, config::Provider provider, const config::Config& cfg,
                                bool* unbounded = nullptr);
// Prompts of bodies up to this size are counted exactly (BPE, where the rank file is
// loaded) when the byte bound is refused, and for settlement without the upstream's usage;
// larger ones keep the bound, which is never below the exact count (counting runs ~40 MB/s).
inline constexpr std::size_t kExactCountMaxBytes = 256 * 1024;
// The reservation of `req` when any of `providers` may serve it (a route's backends, its
// canary and fallbacks): the prompt by count_prompt_tokens with `exact`, or when `exact`
// is null by prompt_token_bound (bytes: never below the exact count, whatever the text);
// the output by output_token_bound, the largest over `providers`.
Reservation reservation(const ChatRequest& req, std::span<const config::Provider> providers,
                        const config::Config& cfg, const tokenizer::Counter* exact = nullptr,
                        tokenizer::Encoding encoding = tokenizer::Encoding::cl100k_base);

struct UpstreamCall {
  std::string target;   // path on the backend, including its path prefix
  std::string body;     // JSON
};

// OpenAI-compatible upstream: model replaced by the backend's real model; when
// streaming, stream_options.include_usage is always requested (the gateway needs usage
// even when the client did not ask; it then drops the usage chunk).
UpstreamCall build_openai_call(const ChatRequest& req, const config::Backend& backend);

// Ollama /api/chat: messages, stream, model; max_tokens -> options.num_predict; OpenAI
// sampling params (temperature, top_p, seed, stop...) -> options; client "options"
// passed through after validation.
UpstreamCall build_ollama_call(const ChatRequest& req, const config::Backend& backend);

// An upstream's reported usage. Each count is valid only as a non-negative integer (a JSON
// number without fraction, within int64); anything else (missing, a string, negative,
// fractional, 1e30) is read as -1 = unknown, and settlement falls back to counting.
struct Usage {
  std::int64_t prompt_tokens = -1;       // -1 = unknown
  std::int64_t completion_tokens = -1;
};
// The usage count a parser keeps: `n` when valid (>= 0), else -1.
constexpr std::int64_t usage_count(std::int64_t n) noexcept { return n >= 0 ? n : -1; }

// The output text of a chat.completion body (every choice's message content, refusal,
// reasoning, tool call names and arguments), for counting when the upstream's completion
// count is not valid. Empty for a body that is not a chat.completion.
std::string completion_output_text(std::string_view chat_completion_body);

// A non-streaming upstream answer turned into the OpenAI chat.completion body.
struct Completion {
  std::string body;
  Usage usage;
  std::string finish_reason;
};
// OpenAI upstream: the body passes through unchanged; usage is read from it.
std::optional<Completion> read_openai_completion(std::string upstream_body);  // moved into body
// Ollama upstream: translated to chat.completion (id "chatcmpl-<request_id>", model =
// the client's alias, usage from prompt_eval_count / eval_count).
std::optional<Completion> translate_ollama_completion(std::string_view upstream_body,
                                                      const ChatRequest& req,
                                                      std::string_view request_id);

// Turns an upstream response body stream into the SSE frames the client receives
// ("data: {...chat.completion.chunk...}\n\n" ... "data: [DONE]\n\n").
class StreamTranslator {
 public:
  virtual ~StreamTranslator() = default;
  // Feeds raw upstream body bytes; appends complete client frames to `out`. Returns false
  // on a failure (see error()); the translator has then already appended error_frame()
  // (which ends with [DONE]): the caller only ends the stream.
  virtual bool feed(std::string_view bytes, std::string& out) = 0;
  // Upstream body ended. Appends closing frames ([DONE] if the upstream did not send it).
  // Returns false if the upstream ended before its end marker (a truncated stream): then
  // nothing was appended and the caller sends error_frame(). When it returns true with
  // error() set, an upstream error event was relayed and the stream is already closed.
  virtual bool finish(std::string& out) = 0;

  bool first_token_seen() const noexcept { return content_chunks_ > 0; }
  std::int64_t content_chunks() const noexcept { return content_chunks_; }  // ~tokens
  const Usage& usage() const noexcept { return usage_; }
  const std::string& finish_reason() const noexcept { return finish_reason_; }
  bool done() const noexcept { return done_; }
  const std::string& error() const noexcept { return error_; }

  // Counts the output text relayed to the client (content, refusal, reasoning, tool call
  // names and arguments) with `counter` (exact BPE where its rank file is loaded, else the
  // estimator). Attached only when token quotas apply: without it, relayed_tokens() is the
  // count of content chunks. The text is folded into a running count every
  // kRelayedFoldBytes, so a stream keeps at most that much of it.
  virtual void count_output(const tokenizer::Counter* counter, tokenizer::Encoding encoding) {
    counter_ = counter;
    encoding_ = encoding;
  }
  // The tokens of the output relayed so far (with a counter), else the content chunks.
  virtual std::int64_t relayed_tokens() const;
  // The whole answer the stream amounted to, in the client's form, once it ended well
  // (the Responses API's final Response object); empty when the API has none.
  virtual std::string final_answer() const { return {}; }
  // The event that ends the stream on a failure the gateway saw after it began, when the
  // client API numbers its events (the Responses API); empty: the codec's error_event.
  virtual std::string error_event(Reason, std::string_view) { return {}; }
  static constexpr std::size_t kRelayedFoldBytes = 4096;

 protected:
  // A piece of output text that is relayed to the client (only kept with a counter).
  void relayed(std::string_view text) {
    if (!counter_ || text.empty()) return;
    relayed_text_ += text;
    if (relayed_text_.size() >= kRelayedFoldBytes) fold_relayed();
  }
  void fold_relayed();

  std::int64_t content_chunks_ = 0;
  const tokenizer::Counter* counter_ = nullptr;
  tokenizer::Encoding encoding_ = tokenizer::Encoding::cl100k_base;
  std::string relayed_text_;       // not counted yet (< kRelayedFoldBytes + one piece)
  std::int64_t relayed_counted_ = 0;
  Usage usage_;
  std::string finish_reason_;
  bool done_ = false;
  std::string error_;
};

// OpenAI SSE: events pass through byte-for-byte, except the usage-only chunk, which is
// dropped unless the client asked for include_usage. Upstream error events pass through.
std::unique_ptr<StreamTranslator> make_openai_stream(const ChatRequest& req);
// Ollama NDJSON -> OpenAI chunks; the final line's counts become usage; a line with
// "error" becomes an error frame.
std::unique_ptr<StreamTranslator> make_ollama_stream(const ChatRequest& req,
                                                     std::string_view request_id);

// The OpenAI usage object: {"prompt_tokens":P,"completion_tokens":C,"total_tokens":P+C}.
void append_usage(std::string& out, std::int64_t prompt, std::int64_t completion);

// What translated answers start with (id "chatcmpl-<request_id>", created now, the
// client's model), up to and including `"choices":[`: a chat.completion body, and a
// "data: " chat.completion.chunk frame.
void append_completion_head(std::string& out, std::string_view request_id, std::string_view model);
std::string chunk_prefix(std::string_view request_id, std::string_view model);
// What closes a chunk after its choices: with include_usage, every chunk but the last
// (the usage chunk) carries "usage": null, as the spec has it.
inline std::string_view chunk_close(bool include_usage) {
  return include_usage ? std::string_view("],\"usage\":null}\n\n") : std::string_view("]}\n\n");
}
// What ends a translated stream after its finish chunk: the usage chunk (`prefix` from
// chunk_prefix) when the client asked for it, then "data: [DONE]".
void append_stream_end(std::string& out, std::string_view prefix, bool include_usage, std::int64_t prompt,
                       std::int64_t completion);

// An answer made by the gateway itself (a route's canned reply), as an OpenAI upstream
// would have sent it: a chat.completion body, or when `req.stream` its SSE frames (role
// and content, the finish chunk, usage, [DONE]). Zero tokens in the usage.
std::string canned_openai_answer(const ChatRequest& req, std::string_view request_id, std::string_view text);

// "data: {"error":{...}}\n\n" — how a failure mid-stream reaches the client, followed by
// "data: [DONE]\n\n" so SDKs end cleanly.
std::string error_frame(Reason reason, std::string_view message);

}  // namespace sluice::llm
