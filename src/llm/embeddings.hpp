#pragma once
// Embeddings as an internal request (llm::ChatRequest with task embed): parsed and checked
// against OpenAI's CreateEmbeddingRequest, counted for quotas, sent to an OpenAI-compatible
// upstream as is or to Ollama's /api/embed, and answered in OpenAI's shape. No I/O here.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>
#include <string>
#include <string_view>

#include "llm/chat.hpp"

namespace sluice::llm {

// Inputs per request (OpenAI's limit for one request).
inline constexpr std::size_t kMaxEmbeddingInputs = 2048;
// Tokens an embedding model may add to each input beyond its text: BERT-style models add
// [CLS] and [SEP], others a BOS/EOS pair or an instruction prefix. Counted in the
// reservation's bound and in the exact count, so a quota holds whatever the model adds.
inline constexpr std::int64_t kEmbeddingInputOverhead = 8;

// A CreateEmbeddingRequest: model (a non-empty string); input (a non-empty string, an array
// of 1..2048 non-empty strings, an array of token ids, or an array of such arrays);
// encoding_format "float" or "base64"; dimensions an integer >= 1; user a string. Other
// fields are refused as unknown (option_not_allowed). The prompt estimate and bound count
// the strings (estimator, bytes) and the token ids (one each), plus
// kEmbeddingInputOverhead per input.
ParseResult parse_embeddings_request(std::string_view body, const config::Config& cfg);

// The input's tokens: each string counted with `counter`, each token id one, plus
// kEmbeddingInputOverhead per input (an upper bound of what the upstream charges).
std::int64_t count_embedding_tokens(const ChatRequest& req, const tokenizer::Counter& counter,
                                    tokenizer::Encoding encoding);

// Why `provider` cannot serve the embeddings request `req` (the field at fault in `param`),
// or nullopt when it can. Anthropic has no embeddings API; Ollama takes text only.
std::optional<RequestError> embeddings_unsupported(const ChatRequest& req, config::Provider provider);

// OpenAI-compatible: POST <prefix>/v1/embeddings with the real model; the rest as sent.
UpstreamCall build_openai_embeddings_call(const ChatRequest& req, const config::Backend& backend);
// Ollama: POST <prefix>/api/embed {model, input, dimensions?}.
UpstreamCall build_ollama_embeddings_call(const ChatRequest& req, const config::Backend& backend);

// An OpenAI embeddings answer (a list with a data array): passed through; usage read from
// it (no completion tokens). nullopt for anything else.
std::optional<Completion> read_openai_embeddings(std::string upstream_body);
// Ollama's {"embeddings":[[...]...],"prompt_eval_count":N} -> OpenAI's list, model = the
// client's alias; each vector as floats, or with encoding_format base64 as the base64 of
// its float32 little-endian bytes. nullopt for anything else: not one vector per input,
// vectors of different lengths, a value that is not a finite float32.
std::optional<Completion> translate_ollama_embeddings(std::string_view upstream_body, const ChatRequest& req);

// Micro-batching (gateway/embed_batch.hpp): embeddings requests to one backend sent as one
// call (embed_batch.cpp).
//
// What two requests must share to go in one call: encoding_format, dimensions, and the
// kind of their inputs (text, or token ids: one call's input holds one kind).
std::string embedding_batch_key(const ChatRequest& req);
// A request's inputs, one JSON value each (a string, or an array of token ids).
std::vector<boost::json::value> embedding_inputs(const ChatRequest& req);
// The request of one call: `first` with `inputs` (every request's, in order) as its input.
ChatRequest merge_embeddings(const ChatRequest& first, boost::json::array inputs);
// The upstream's answer to such a call, split back: one answer per request in the
// upstream's own form (OpenAI's list, or Ollama's {"embeddings":...}), request k's
// `counts[k]` vectors in order (OpenAI's index from 0 again); the prompt tokens shared in
// proportion to `weights` (largest remainder: they add up to the total). nullopt when the
// answer does not hold one vector per input.
std::optional<std::vector<std::string>> split_embeddings_answer(config::Provider wire, std::string_view body,
                                                                std::span<const std::size_t> counts,
                                                                std::span<const std::int64_t> weights);

}  // namespace sluice::llm
