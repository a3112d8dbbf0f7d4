#pragma once
// Client APIs as codecs. Each API a client speaks to the gateway (OpenAI chat completions,
// Anthropic Messages...) is one codec, in one file of src/api: it turns the client's
// request into the internal request (llm::ChatRequest, the chat-completions form every
// phase works on), and writes the internal answer, stream events and errors in the client's
// own wire format. The phases know no dialect; adding one is adding a codec and its line in
// the endpoint table (codec.cpp). See docs/phases.md, "Client APIs". No I/O here.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/reason.hpp"
#include "llm/chat.hpp"

namespace sluice::config {
struct Backend;
}

namespace sluice::api {

// What a request asks of the gateway at its endpoint.
enum class Op : std::uint8_t {
  generate,      // a model's answer: a completion (streamed or whole), embeddings
  count_tokens,  // the prompt's token count; nothing is generated
};

// A model as the listings show it: the alias a client asks for, and who serves it.
struct ModelEntry {
  std::string_view id;
  std::string_view owned_by;  // the route's primary provider
};

class Codec {
 public:
  virtual ~Codec() = default;
  // The API's name, as filters and records see it ("chat.completions", "messages").
  virtual std::string_view name() const = 0;

  // The client's body -> the internal request, validated (config: the parameter policy
  // and the options' ranges). A refusal names its reason, message and field.
  virtual llm::ParseResult decode(std::string_view body, Op op, const config::Config& cfg) const = 0;

  // The internal answer (a chat.completion) -> the client's body. `done.body` may be
  // moved from.
  virtual std::string answer(llm::Completion& done, const llm::ChatRequest& req,
                             std::string_view request_id) const = 0;
  // A translator that writes chat.completion.chunk frames -> one that writes the client's
  // events. Its counters (usage, content chunks, finish, errors) stay the inner one's.
  virtual std::unique_ptr<llm::StreamTranslator> stream(std::unique_ptr<llm::StreamTranslator> chunks,
                                                        const llm::ChatRequest& req,
                                                        std::string_view request_id) const = 0;
  // The answer to a count_tokens request.
  virtual std::string token_count(std::int64_t tokens) const;

  // A refusal or failure before the answer began (the body of the local reply).
  virtual std::string error_body(Reason reason, std::string_view message, std::string_view param) const = 0;
  // A failure after a stream began: the event that ends it.
  virtual std::string error_event(Reason reason, std::string_view message) const = 0;
  // An upstream's client error passed through (an OpenAI-shaped error body) in this
  // API's shape, keeping the upstream's message.
  virtual std::string upstream_error(int status, std::string chat_error_body) const = 0;

  // A backend that serves this API itself (the Responses API on a backend with
  // native_responses): the request goes to it in the client's own form and its answer
  // comes back in it, with the features only it has (built-in tools, reasoning items).
  // native_on says whether `backend` is one; the three others are called only then.
  virtual bool native_on(const config::Backend&) const { return false; }
  // The call (request.native, for the backend's model; the conversation already resolved).
  virtual llm::UpstreamCall native_call(const llm::ChatRequest& req, const config::Backend& backend) const;
  // A whole 2xx answer -> the client's body (in Completion::body) with its usage and
  // finish; nullopt when the body is not one.
  virtual std::optional<llm::Completion> native_answer(std::string body, const llm::ChatRequest& req) const;
  // The relay of a streamed answer: the client's events, with the counters of any stream.
  virtual std::unique_ptr<llm::StreamTranslator> native_stream(const llm::ChatRequest& req) const;

  // GET /v1/models and /v1/models/{id} in this API's shapes.
  virtual void model(std::string& out, const ModelEntry& m) const = 0;
  virtual void model_list(std::string& out, std::span<const ModelEntry> models) const = 0;
};

// A client API's endpoint: where it is served, by which codec, for what.
struct Endpoint {
  std::string_view path;
  const Codec* codec;
  Op op;
};

// The endpoint at `path` (POST), or null.
const Endpoint* endpoint(std::string_view path) noexcept;
// Every endpoint, in the table's order.
std::span<const Endpoint> endpoints() noexcept;

// The codecs by name: OpenAI's (the default: errors of any other path, the model
// listings) and Anthropic's (clients that send anthropic-version get its shapes).
const Codec& openai_chat() noexcept;
const Codec& openai_embeddings() noexcept;
const Codec& openai_responses() noexcept;
const Codec& anthropic_messages() noexcept;

}  // namespace sluice::api
