#pragma once
// Embeddings of the simulator: deterministic vectors by feature hashing (no model), and
// the request/answer bodies of OpenAI POST /v1/embeddings and Ollama POST /api/embed.
// Pure functions, no I/O.
//
// A text's vector: the lowercased words (runs of ASCII letters and digits, and of bytes
// >= 0x80 so that UTF-8 text has words too) and the character trigrams of each word padded
// with one space either side (" cat " -> " ca", "cat", "at ") are hashed with FNV-1a
// (64 bits, then a murmur finaliser) into D dimensions: the hash modulo D picks the
// dimension, its top bit the sign. A word adds 1, each of its trigrams 0.5; common English
// function words ("the", "a", "of", ...) count half. The sum is L2-normalised. Texts that
// share words and word pieces point the same way: "the cat sat on the mat" and "the cat
// sat on a mat" have cosine 0.958, unrelated sentences ~0 (+/- about 1/sqrt(D)). Token-id
// inputs hash each id (its decimal digits) as a word. A text without any word (only
// punctuation or spaces) hashes its raw bytes as one feature.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/wire.hpp"

namespace sluice::sim {

inline constexpr int kDefaultEmbeddingDimensions = 256;
inline constexpr int kMaxEmbeddingDimensions = 4096;
inline constexpr std::size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request

// The unit vector of a text / of token ids, `dimensions` >= 1 floats.
std::vector<float> embed_text(std::string_view text, int dimensions);
std::vector<float> embed_tokens(std::span<const std::int64_t> ids, int dimensions);

// One input of a request: a text, or token ids (OpenAI only).
struct EmbedInput {
  bool is_tokens = false;
  std::string text;
  std::vector<std::int64_t> tokens;
};

struct EmbedRequest {
  Api api = Api::openai;  // openai (/v1/embeddings) or ollama (/api/embed)
  std::string model;
  std::vector<EmbedInput> inputs;
  int dimensions = kDefaultEmbeddingDimensions;
  bool base64 = false;            // OpenAI encoding_format "base64"
  std::int64_t prompt_tokens = 0; // sum over the inputs of input_tokens()
};

// Tokens of one input: for a text the simulator's prompt estimate (bytes / 4, at least 1,
// as for chat prompts), for token ids their number.
std::int64_t input_tokens(const EmbedInput& in) noexcept;

// The vector of one input of `r` (r.dimensions floats).
std::vector<float> embed(const EmbedInput& in, int dimensions);

// Parses an embeddings request body:
// - OpenAI /v1/embeddings: model (non-empty string), input: a non-empty string, a
//   non-empty array of non-empty strings, a non-empty array of token ids (integers >= 0),
//   or a non-empty array of such arrays (at most kMaxEmbeddingInputs inputs);
//   encoding_format "float" (default) | "base64"; dimensions (integer in
//   [1, kMaxEmbeddingDimensions]); user (string).
// - Ollama /api/embed: model (non-empty string), input: a string or an array of strings
//   (missing, "" or [] give no inputs: Ollama answers them with no embeddings); truncate
//   (boolean); dimensions (as above); options (object); keep_alive (ignored).
// Returns nullopt and sets `error` when the body is unusable.
std::optional<EmbedRequest> parse_embed_request(Api api, std::string_view body, std::string& error);

// The base64 of the vector as float32 little-endian bytes (OpenAI encoding_format base64).
std::string float32_base64(std::span<const float> v);

// OpenAI answer: {"object":"list","data":[{"object":"embedding","index":i,"embedding":
// [...] or "<base64>"}],"model":...,"usage":{"prompt_tokens":N,"total_tokens":N}}.
std::string openai_embeddings_body(const EmbedRequest& r, const std::vector<std::vector<float>>& vectors);

// Ollama answer: {"model":...,"embeddings":[[...]],"total_duration":ns,"load_duration":ns,
// "prompt_eval_count":N}.
std::string ollama_embed_body(const EmbedRequest& r, const std::vector<std::vector<float>>& vectors,
                              std::int64_t total_ns, std::int64_t load_ns);

}  // namespace sluice::sim
