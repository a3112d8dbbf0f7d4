#pragma once
// What the simulator answers: plausible text from a small vocabulary, JSON objects built
// from a schema (response formats, tool arguments), tool calls, stop sequences and log
// probabilities. Deterministic: the same request (and seed) gets the same answer. No I/O,
// no timing (engine.hpp) and no wire format (wire.hpp).
//
// The text generator is reproduced exactly by simText() in tests/integration/lib.mjs:
// change both together.
#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/sim.hpp"

namespace sluice::sim {

struct GenRequest;  // wire.hpp

// The words of the text, in their fixed order (lower case ASCII, no duplicates).
std::span<const std::string_view> vocabulary() noexcept;

// A request's 64-bit seed folded to the generator's 32 bits: of its two's complement, the
// low half XOR (the high half * 0x9E3779B9 mod 2^32). Seeds 0 to 2^32 - 1 stay as they are.
std::uint32_t fold_seed(std::uint64_t seed) noexcept;

// mulberry32: a 32-bit generator that JavaScript reproduces with Math.imul.
class Rng {
 public:
  explicit Rng(std::uint32_t state) noexcept : a_(state) {}
  std::uint32_t next() noexcept;

 private:
  std::uint32_t a_;
};

// 32-bit integer hash (lowbias32), for values drawn by position (log probabilities).
std::uint32_t hash32(std::uint32_t x) noexcept;

// The text: one word per token. A sentence has 4 to 12 words, starts with a capital and
// ends with "."; a word inside a sentence is followed by "," one time in 11 (never the
// last two). Token 0 is the bare word, later tokens have a leading space:
// "Which", " light", " house", ...  For each sentence: draw its length (4 + next() % 9);
// for each word: r = next(), the word is vocabulary()[r % size], the comma test is
// (r >> 16) % 11 == 0.
class TextGen {
 public:
  explicit TextGen(std::uint32_t seed) noexcept : rng_(seed) {}
  // Appends the next token to `out` (with its leading space unless it is the first).
  void next(std::string& out);
  // True when the last token ended a sentence.
  bool at_sentence_end() const noexcept { return left_ == 0; }

 private:
  Rng rng_;
  int left_ = 0;       // words still to come in this sentence
  bool first_ = true;  // no token yet: no leading space
};

// The first n tokens for `seed`, concatenated (what a text answer of n tokens says).
std::string sim_text(std::int64_t n, std::uint64_t seed = 0);

// An answer's content split into tokens: `text` and the end offset of each token in it.
struct Pieces {
  std::string text;
  std::vector<std::uint32_t> ends;

  void add(std::string_view piece);
  std::size_t size() const noexcept { return ends.size(); }
  std::string_view piece(std::size_t i) const noexcept;
  // Keeps the first n pieces.
  void truncate(std::size_t n);
};

// A JSON value for a JSON Schema, written as pieces: "{", "\"city\":", " \"blue",
// " river\"", ",", " \"days\":", " 42", "}". Objects have their required properties (all
// of `properties` when the schema lists none), strings a few words (or the first `enum`/
// `const` value, or a fixed sample for the formats date-time, date, time, email, uri,
// uuid), integers and numbers a value within minimum/maximum, booleans, arrays 2 items
// (within minItems/maxItems), null; `anyOf`/`oneOf`/`allOf` use their first branch, `$ref`
// "#", "#/$defs/<name>" and "#/definitions/<name>" are followed. Deeper than 6 levels,
// objects are {} and arrays []. `schema` null: {"answer": "<a sentence>"} (json_object).
void json_for_schema(const boost::json::value& schema, std::uint32_t seed, Pieces& out);

enum class Finish {
  stop,           // natural end: OpenAI "stop", Ollama "stop", Anthropic "end_turn"
  length,         // cut by a limit: "length" / "length" / "max_tokens"
  stop_sequence,  // a stop sequence: "stop" / "stop" / "stop_sequence"
  tool_calls,     // a tool call: "tool_calls" / "stop" / "tool_use"
};

struct ToolCall {
  std::string id;    // "call_..." (OpenAI, Ollama) or "toolu_..." (Anthropic)
  std::string name;
};

// The whole answer, decided when the request is served. Tokens: for text and JSON, one
// per piece; a tool call has one more, first, for its head (id and name), then one per
// piece of its arguments.
struct Answer {
  Pieces reasoning;                   // a reasoning summary said before the answer (Responses)
  Pieces content;                     // text, JSON, or the tool call's arguments
  std::optional<ToolCall> tool_call;  // set: the answer is this call
  Finish finish = Finish::stop;
  std::string stop_sequence;          // Finish::stop_sequence: the one that matched
  std::uint32_t seed = 0;             // folded seed (log probabilities)

  // The answer's tokens; the reasoning summary's are output tokens too but not among these.
  std::int64_t tokens() const noexcept {
    return static_cast<std::int64_t>(content.size()) + (tool_call ? 1 : 0);
  }
  // Token i's text: the tool call's head is "" (its name goes in the wire's own field).
  std::string_view token(std::int64_t i) const noexcept;
  // The content piece of token i, or nullopt for a tool call's head.
  std::optional<std::size_t> piece_index(std::int64_t i) const noexcept;
};

// Which offered tool the answer calls, if any: none when no tool is offered, the choice
// is "none", the last message is a tool result, or the choice is "auto" and the last user
// message names no tool (case-insensitive substring). A named choice calls that tool;
// "required"/"any" the first tool the last user message names, else the first tool.
std::optional<std::size_t> choose_tool(const GenRequest& req);

// The answer to `req` under the settings `s` (its length plan: plan_output). Text:
// plan_output's tokens. JSON and tool calls: their natural length, cut at the request's
// limit or max_output_tokens (Finish::length). Stop sequences end text and JSON before
// their first occurrence (a token cut in the middle keeps its part before it).
// `call_id` is the tool call's id, if one is made. A request with `reasoning` first gets
// its summary: the first sentence of the text for the folded seed + 1, which takes its
// tokens out of the same limits (at most all of them).
Answer make_answer(const GenRequest& req, const config::SimSettings& s, std::string call_id);

// Log probabilities, by position: token i has logprob -(10 + h % 691) / 1000 (h =
// hash32(seed ^ hash32(i))), in [-0.7, -0.01]; top_logprobs are the token itself and
// k - 1 other words (" word" when the token has a leading space) with logprobs in
// (-6 - 2j, -5 - 2j] for the j-th (from 0), so the probabilities sum to less than 1.
struct TopLogprob {
  std::string token;
  double logprob = 0;
};
double token_logprob(std::uint32_t seed, std::int64_t index) noexcept;
std::vector<TopLogprob> top_logprobs(std::uint32_t seed, std::int64_t index, std::string_view token, int k);

}  // namespace sluice::sim
