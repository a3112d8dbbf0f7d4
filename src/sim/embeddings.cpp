#include "sim/embeddings.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "common/text.hpp"
#include "sim/engine.hpp"

namespace sluice::sim {

namespace json = boost::json;

namespace {

// Feature kinds, hashed in front of the feature's bytes so that a word and a trigram with
// the same letters land apart.
constexpr char kWord = 'w', kTrigram = 't', kRaw = 'r';

constexpr double kWordWeight = 1.0;
constexpr double kTrigramWeight = 0.5;
constexpr double kStopWordFactor = 0.5;

// Common English function words: they say little about what a text is about, so they
// count half (word and trigrams).
constexpr std::array<std::string_view, 24> kStopWords = {
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is",
    "it", "of", "on", "or", "that", "the", "this", "to", "was", "were", "with", "i"};

std::uint64_t feature_hash(char kind, std::string_view bytes) noexcept {
  // FNV-1a over the kind and the bytes; fmix64 spreads its weak low bits before the modulo.
  return fmix64(fnv1a(bytes, fnv1a(std::string_view(&kind, 1))));
}

class Accumulator {
 public:
  explicit Accumulator(int dimensions) : v_(static_cast<std::size_t>(dimensions), 0.0) {}

  void add(char kind, std::string_view bytes, double weight) {
    const std::uint64_t h = feature_hash(kind, bytes);
    const std::size_t i = static_cast<std::size_t>(h % v_.size());
    v_[i] += (h >> 63) ? -weight : weight;
  }

  void add_word(std::string_view w, double factor) {
    add(kWord, w, kWordWeight * factor);
    std::string padded;
    padded.reserve(w.size() + 2);
    padded += ' ';
    padded += w;
    padded += ' ';
    for (std::size_t i = 0; i + 3 <= padded.size(); ++i)
      add(kTrigram, std::string_view(padded).substr(i, 3), kTrigramWeight * factor);
  }

  // L2-normalised floats; `fallback` is hashed as one feature when nothing was added (or
  // everything cancelled out), so every input has a unit vector.
  std::vector<float> finish(std::string_view fallback) {
    double norm2 = 0;
    for (double x : v_) norm2 += x * x;
    if (norm2 == 0) {
      add(kRaw, fallback, 1.0);
      norm2 = 1.0;
    }
    const double inv = 1.0 / std::sqrt(norm2);
    std::vector<float> out(v_.size());
    for (std::size_t i = 0; i < v_.size(); ++i) out[i] = static_cast<float>(v_[i] * inv);
    return out;
  }

 private:
  std::vector<double> v_;
};

bool word_byte(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

bool stop_word(std::string_view w) noexcept {
  return std::find(kStopWords.begin(), kStopWords.end(), w) != kStopWords.end();
}

// A token id: an integer >= 0 (JSON integers only).
bool get_token(const json::value& v, std::int64_t& out) {
  if (v.is_int64() && v.get_int64() >= 0) {
    out = v.get_int64();
    return true;
  }
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    out = static_cast<std::int64_t>(v.get_uint64());
    return true;
  }
  return false;
}

bool present(const json::value* v) { return v && !v->is_null(); }

// OpenAI "input": a string, [string], [int] or [[int]], each non-empty.
bool parse_openai_input(const json::value* in, std::vector<EmbedInput>& out, std::string& error) {
  constexpr const char* kShape =
      "'input' must be a non-empty string, array of non-empty strings, array of token ids "
      "or array of non-empty token-id arrays";
  if (!present(in)) {
    error = "'input' is required";
    return false;
  }
  if (in->is_string()) {
    if (in->get_string().empty()) {
      error = "'input' must not be empty";
      return false;
    }
    out.push_back({false, std::string(in->get_string()), {}});
    return true;
  }
  if (!in->is_array() || in->get_array().empty()) {
    error = in->is_array() ? "'input' must not be empty" : kShape;
    return false;
  }
  const json::array& a = in->get_array();
  if (a.size() > kMaxEmbeddingInputs && !a.front().is_number()) {
    error = "'input' may hold at most " + std::to_string(kMaxEmbeddingInputs) + " inputs";
    return false;
  }
  // One input of token ids.
  auto token_input = [&](const json::array& ids) {
    EmbedInput e;
    e.is_tokens = true;
    e.tokens.reserve(ids.size());
    for (const auto& t : ids) {
      std::int64_t id = 0;
      if (!get_token(t, id)) {
        error = "'input' token ids must be integers >= 0";
        return false;
      }
      e.tokens.push_back(id);
    }
    out.push_back(std::move(e));
    return true;
  };
  if (a.front().is_number()) return token_input(a);
  out.reserve(a.size());
  const bool strings = a.front().is_string();
  for (const auto& item : a) {
    if (strings) {
      if (!item.is_string() || item.get_string().empty()) {
        error = item.is_string() ? "'input' strings must not be empty" : kShape;
        return false;
      }
      out.push_back({false, std::string(item.get_string()), {}});
      continue;
    }
    if (!item.is_array() || item.get_array().empty()) {
      error = kShape;
      return false;
    }
    if (!token_input(item.get_array())) return false;
  }
  return true;
}

// Ollama "input": a string or [string]; "" and [] give no inputs, as in Ollama.
bool parse_ollama_input(const json::value* in, std::vector<EmbedInput>& out, std::string& error) {
  if (!present(in)) return true;
  if (in->is_string()) {
    if (!in->get_string().empty()) out.push_back({false, std::string(in->get_string()), {}});
    return true;
  }
  if (!in->is_array()) {
    error = "invalid input type";
    return false;
  }
  const json::array& a = in->get_array();
  if (a.size() > kMaxEmbeddingInputs) {
    error = "input may hold at most " + std::to_string(kMaxEmbeddingInputs) + " strings";
    return false;
  }
  for (const auto& item : a) {
    if (!item.is_string()) {
      error = "invalid input type";
      return false;
    }
    out.push_back({false, std::string(item.get_string()), {}});
  }
  return true;
}

void append_int(std::string& s, std::int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, end);
}

// [f0,f1,...] with each float's shortest round-trip form: parsing a number back as a
// double and narrowing it to float gives the same float32 as the base64 answer.
void append_floats(std::string& s, const std::vector<float>& v) {
  s += '[';
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v[i]);
    s.append(buf, end);
  }
  s += ']';
}

}  // namespace

std::vector<float> embed_text(std::string_view text, int dimensions) {
  Accumulator acc(std::max(1, dimensions));
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    acc.add_word(word, stop_word(word) ? kStopWordFactor : 1.0);
    word.clear();
  };
  for (unsigned char c : text) {
    if (word_byte(c)) {
      word += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    } else {
      flush();
    }
  }
  flush();
  return acc.finish(text);
}

std::vector<float> embed_tokens(std::span<const std::int64_t> ids, int dimensions) {
  Accumulator acc(std::max(1, dimensions));
  char buf[24];
  for (std::int64_t id : ids) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, id);
    acc.add(kWord, std::string_view(buf, static_cast<std::size_t>(end - buf)), kWordWeight);
  }
  return acc.finish("");
}

std::int64_t input_tokens(const EmbedInput& in) noexcept {
  return in.is_tokens ? static_cast<std::int64_t>(in.tokens.size()) : estimate_prompt_tokens(in.text.size());
}

std::vector<float> embed(const EmbedInput& in, int dimensions) {
  return in.is_tokens ? embed_tokens(in.tokens, dimensions) : embed_text(in.text, dimensions);
}

std::optional<EmbedRequest> parse_embed_request(Api api, std::string_view body, std::string& error) {
  const bool ollama = api == Api::ollama;
  std::optional<json::value> v = parse_body(body, error);
  if (!v) return std::nullopt;
  const json::object& o = v->get_object();
  EmbedRequest r;
  r.api = ollama ? Api::ollama : Api::openai;

  const json::value* model = o.if_contains("model");
  if (!model || !model->is_string() || model->get_string().empty()) {
    error = ollama ? "model is required" : "'model' must be a non-empty string";
    return std::nullopt;
  }
  r.model = std::string(model->get_string());

  if (ollama ? !parse_ollama_input(o.if_contains("input"), r.inputs, error)
             : !parse_openai_input(o.if_contains("input"), r.inputs, error))
    return std::nullopt;

  if (const json::value* d = o.if_contains("dimensions"); present(d)) {
    std::int64_t n = 0;
    const bool unset = ollama && get_int(*d, n) && n == 0;  // Go's zero value: not given
    if (!unset) {
      if (!get_int(*d, n) || n < 1 || n > kMaxEmbeddingDimensions) {
        error = "'dimensions' must be an integer from 1 to " + std::to_string(kMaxEmbeddingDimensions);
        return std::nullopt;
      }
      r.dimensions = static_cast<int>(n);
    }
  }

  if (ollama) {
    if (const json::value* t = o.if_contains("truncate"); present(t) && !t->is_bool()) {
      error = "'truncate' must be a boolean";
      return std::nullopt;
    }
    if (const json::value* opts = o.if_contains("options"); present(opts) && !opts->is_object()) {
      error = "'options' must be an object";
      return std::nullopt;
    }
  } else {
    if (const json::value* f = o.if_contains("encoding_format"); present(f)) {
      if (!f->is_string() || (f->get_string() != "float" && f->get_string() != "base64")) {
        error = "'encoding_format' must be \"float\" or \"base64\"";
        return std::nullopt;
      }
      r.base64 = f->get_string() == "base64";
    }
    if (const json::value* u = o.if_contains("user"); present(u) && !u->is_string()) {
      error = "'user' must be a string";
      return std::nullopt;
    }
  }

  for (const auto& in : r.inputs) r.prompt_tokens += input_tokens(in);
  return r;
}

std::string float32_base64(std::span<const float> v) {
  std::string out;
  append_float32_base64(out, v);
  return out;
}

std::string openai_embeddings_body(const EmbedRequest& r, const std::vector<std::vector<float>>& vectors) {
  std::string s;
  s.reserve(128 + r.model.size() + vectors.size() * (64 + static_cast<std::size_t>(r.dimensions) * 12));
  s += "{\"object\":\"list\",\"data\":[";
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    if (i) s += ',';
    s += "{\"object\":\"embedding\",\"index\":";
    append_int(s, static_cast<std::int64_t>(i));
    s += ",\"embedding\":";
    if (r.base64) {
      s += '"';
      s += float32_base64(vectors[i]);
      s += '"';
    } else {
      append_floats(s, vectors[i]);
    }
    s += '}';
  }
  s += "],\"model\":";
  append_json_string(s, r.model);
  s += ",\"usage\":{\"prompt_tokens\":";
  append_int(s, r.prompt_tokens);
  s += ",\"total_tokens\":";
  append_int(s, r.prompt_tokens);
  s += "}}";
  return s;
}

std::string ollama_embed_body(const EmbedRequest& r, const std::vector<std::vector<float>>& vectors,
                              std::int64_t total_ns, std::int64_t load_ns) {
  std::string s;
  s.reserve(128 + r.model.size() + vectors.size() * static_cast<std::size_t>(r.dimensions) * 12);
  s += "{\"model\":";
  append_json_string(s, r.model);
  s += ",\"embeddings\":[";
  for (std::size_t i = 0; i < vectors.size(); ++i) {
    if (i) s += ',';
    append_floats(s, vectors[i]);
  }
  s += "],\"total_duration\":";
  append_int(s, total_ns);
  s += ",\"load_duration\":";
  append_int(s, load_ns);
  s += ",\"prompt_eval_count\":";
  append_int(s, r.prompt_tokens);
  s += '}';
  return s;
}

}  // namespace sluice::sim
