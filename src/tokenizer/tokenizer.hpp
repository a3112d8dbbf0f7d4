#pragma once
// Token counting for the OpenAI encodings: an exact byte-level BPE (tiktoken's algorithm,
// PCRE2 pre-tokenization with each encoding's pattern) when the rank file is loaded, and a
// cheap O(n) estimator otherwise. No Boost, no I/O after load; every const member is safe
// to call from many threads at once. See docs/tokenizer.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tokenizer {

enum class Encoding { cl100k_base, o200k_base };
inline constexpr std::size_t kEncodingCount = 2;

// "cl100k_base" / "o200k_base"; nullopt for anything else.
std::optional<Encoding> encoding_from_name(std::string_view name) noexcept;
std::string_view encoding_name(Encoding e) noexcept;
// gpt-4o*, chatgpt-4o*, o1*, o3*, o4*, gpt-4.1*, gpt-4.5*, gpt-5* -> o200k_base; anything
// else (gpt-4, gpt-3.5-turbo, embeddings, unknown aliases) -> cl100k_base.
Encoding encoding_for_model(std::string_view model) noexcept;

// The default place scripts/fetch-tokenizer.sh leaves the rank files, relative to the
// source tree: <dir>/cl100k_base.json, <dir>/o200k_base.json.
inline constexpr std::string_view kDefaultRankDir = "data/tokenizer/node_modules/tiktoken/encoders";

class Bpe {
 public:
  // Reads a rank file: the JSON of the tiktoken npm package ({"pat_str", "special_tokens",
  // "bpe_ranks"}) or a plain tiktoken file ("<base64> <rank>" per line; the pattern is then
  // the built-in one of `encoding`). nullptr and *error set ("<file>: ...") on failure.
  static std::shared_ptr<const Bpe> load(const std::string& rank_file, Encoding encoding,
                                         std::string* error);
  // Same from bytes already in memory; `name` only labels errors.
  static std::shared_ptr<const Bpe> parse(std::string_view contents, Encoding encoding,
                                          std::string_view name, std::string* error);

  // Token ids of `text`, special tokens (<|endoftext|> ...) treated as plain text, like
  // tiktoken's encode_ordinary. Invalid UTF-8 does not fail: bytes no pattern branch
  // matches are encoded as byte-level pieces of their own.
  std::vector<std::uint32_t> encode(std::string_view text) const;
  // encode(text).size() without building the vector.
  std::size_t count(std::string_view text) const;
  // The bytes of `ids` back to back (ids that are no rank are skipped).
  std::string decode(std::span<const std::uint32_t> ids) const;

  Encoding encoding() const noexcept { return encoding_; }
  std::size_t vocabulary_size() const noexcept { return rank_count_; }
  const std::string& pattern() const noexcept { return pattern_; }

  ~Bpe();
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  struct Impl;

 private:
  Bpe() = default;
  template <class Sink>
  void run(std::string_view text, Sink& sink) const;

  Encoding encoding_ = Encoding::cl100k_base;
  std::size_t rank_count_ = 0;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

// Fallback estimate of the token count of `text` when no rank file is loaded: one pass over
// the bytes, no allocation. Classifies runs the way the pre-tokenizer splits text (words,
// digit groups, punctuation, whitespace, CJK and other scripts) and weights each class
// with figures calibrated against the real BPE; docs/tokenizer.md has the measured error.
// The one-argument form uses the cl100k_base weights (cl100k_base needs more tokens than
// o200k_base for most text).
std::size_t estimate(std::string_view text) noexcept;
std::size_t estimate(std::string_view text, Encoding encoding) noexcept;

// An exact Bpe per encoding where one is loaded, the estimator for the others. Copies share
// the loaded tables; const use is thread-safe.
class Counter {
 public:
  Counter() = default;
  // Loads <dir>/cl100k_base.json and <dir>/o200k_base.json (or <name>.tiktoken). An
  // encoding whose file is missing or bad stays on the estimator; *warnings gets one
  // line per such encoding ("" when both loaded).
  static Counter load_dir(const std::string& dir, std::string* warnings);

  void set(Encoding encoding, std::shared_ptr<const Bpe> bpe);
  std::size_t count(std::string_view text, Encoding encoding) const;
  bool exact(Encoding encoding) const noexcept { return bpe(encoding) != nullptr; }
  const Bpe* bpe(Encoding encoding) const noexcept {
    return bpes_[static_cast<std::size_t>(encoding)].get();
  }

 private:
  std::shared_ptr<const Bpe> bpes_[kEncodingCount];
};

struct ChatMessage {
  std::string_view role;
  std::string_view content;
  std::string_view name;  // empty: no name
};

// Prompt tokens of a chat request by OpenAI's documented formula (the cookbook's
// num_tokens_from_messages): 3 per message, plus the tokens of role and content, plus the
// tokens of name and 1 more when a name is given, plus 3 priming the reply.
inline constexpr std::size_t kTokensPerMessage = 3;
inline constexpr std::size_t kTokensPerName = 1;
inline constexpr std::size_t kReplyPrimingTokens = 3;
std::size_t count_chat(const Counter& counter, Encoding encoding,
                       std::span<const ChatMessage> messages);

}  // namespace sluice::tokenizer
