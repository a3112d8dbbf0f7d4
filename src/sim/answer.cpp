#include "sim/answer.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "common/text.hpp"
#include "sim/engine.hpp"
#include "sim/wire.hpp"

namespace sluice::sim {

namespace json = boost::json;

namespace {

// Common English words. The same list, in the same order, is in tests/integration/lib.mjs.
constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "this", "are", "or", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if",
    "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may", "these",
    "about", "them", "some", "time", "could", "into", "than", "only", "two", "new", "first",
    "any", "then", "like", "our", "what", "also", "over", "most", "made", "after", "such", "many",
    "well", "where", "people", "very", "must", "through", "before", "years", "between", "way",
    "each", "great", "because", "those", "same", "state", "both", "work", "good", "long", "world",
    "down", "under", "still", "just", "life", "own", "should", "might", "back", "here", "day",
    "part", "place", "while", "even", "much", "house", "small", "number", "against", "high",
    "old", "water", "system", "case", "group", "found", "never", "since", "home", "point", "come",
    "take", "know", "make", "thought", "three", "large", "light", "hand", "money", "order",
    "power", "night", "city", "school", "often", "country", "again", "family", "left", "public",
    "within", "open", "kind", "change", "word", "less", "story", "market", "field", "around",
    "side", "end", "form", "morning", "table", "river", "sound", "road", "door", "music", "paper",
    "garden", "window", "letter", "voice", "answer", "question", "reason", "color", "idea",
    "book", "child", "mother", "father", "friend", "simple", "early", "quiet", "warm", "bright",
    "clear", "green", "blue", "happy", "ready", "strong", "gentle", "careful", "sudden", "walk",
    "read", "write", "build", "find", "bring", "carry", "follow", "learn", "begin", "watch",
    "listen", "speak", "remember", "show", "keep", "turn", "move", "hold", "stand", "leave",
    "live", "seem", "feel", "give", "ask", "call", "try", "need", "use", "tell", "help", "play",
    "run", "look", "stay", "grow", "close", "wait", "travel", "return", "explain", "decide",
    "share", "plan", "visit", "mean", "consider", "evening", "summer", "winter", "mountain",
    "ocean", "forest", "village", "street", "station", "island", "bridge", "kitchen", "picture",
    "journey", "history", "science", "nature", "language", "machine", "problem", "project",
    "moment", "weather", "season", "energy", "future", "memory", "pattern", "signal", "surface",
    "bird", "tree", "stone", "cloud", "rain", "snow", "wind", "fire", "earth", "star", "moon",
    "sun", "sea", "lake", "hill", "valley", "path", "corner", "edge", "center", "circle", "line",
    "shape", "size", "weight", "speed", "distance", "minute", "hour", "week", "month", "year",
    "today", "tomorrow", "yesterday", "always", "sometimes", "usually", "almost", "nearly",
    "quite", "rather", "perhaps", "together", "alone", "above", "below", "inside", "outside",
    "behind", "beside", "toward", "across", "along", "among", "during", "until", "without",
    "every", "another", "several", "few", "enough", "little", "different", "important",
    "possible", "certain", "common", "special", "whole", "free", "full", "real", "true", "sure",
    "late", "young", "next", "last", "best", "better", "dark", "deep", "wide", "soft", "fresh",
    "quick", "slow", "heavy", "short", "tall", "round", "flat", "empty", "rich", "poor", "safe",
    "busy", "calm", "cold", "hot", "dry", "wet",
};

constexpr std::uint32_t kWordCount = static_cast<std::uint32_t>(std::size(kWords));

std::string_view word(std::uint32_t r) noexcept { return kWords[r % kWordCount]; }

}  // namespace

std::span<const std::string_view> vocabulary() noexcept { return kWords; }

std::uint32_t fold_seed(std::uint64_t seed) noexcept {
  return static_cast<std::uint32_t>(seed) ^ (static_cast<std::uint32_t>(seed >> 32) * 0x9E3779B9u);
}

std::uint32_t Rng::next() noexcept {
  a_ += 0x6D2B79F5u;
  std::uint32_t t = a_;
  t = (t ^ (t >> 15)) * (t | 1u);
  t = (t + (t ^ (t >> 7)) * (t | 61u)) ^ t;
  return t ^ (t >> 14);
}

std::uint32_t hash32(std::uint32_t x) noexcept {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

void TextGen::next(std::string& out) {
  const bool sentence_start = left_ == 0;
  if (sentence_start) left_ = 4 + static_cast<int>(rng_.next() % 9);
  const std::uint32_t r = rng_.next();
  const std::string_view w = word(r);
  if (!first_) out += ' ';
  first_ = false;
  const std::size_t at = out.size();
  out += w;
  if (sentence_start) out[at] = static_cast<char>(out[at] - 'a' + 'A');
  --left_;
  if (left_ == 0) {
    out += '.';
  } else if (left_ >= 2 && (r >> 16) % 11 == 0) {
    out += ',';
  }
}

std::string sim_text(std::int64_t n, std::uint64_t seed) {
  std::string s;
  TextGen g(fold_seed(seed));
  for (std::int64_t i = 0; i < n; ++i) g.next(s);
  return s;
}

// ---------------------------------------------------------------------------------------
// Pieces

void Pieces::add(std::string_view piece) {
  text += piece;
  ends.push_back(static_cast<std::uint32_t>(text.size()));
}

std::string_view Pieces::piece(std::size_t i) const noexcept {
  if (i >= ends.size()) return {};
  const std::size_t begin = i == 0 ? 0 : ends[i - 1];
  return std::string_view(text).substr(begin, ends[i] - begin);
}

void Pieces::truncate(std::size_t n) {
  if (n >= ends.size()) return;
  ends.resize(n);
  text.resize(n == 0 ? 0 : ends.back());
}

// ---------------------------------------------------------------------------------------
// JSON from a schema

namespace {

constexpr int kMaxDepth = 6;
constexpr int kMaxNodes = 200;      // values written; past it objects are {} and arrays []
constexpr std::size_t kMaxKeys = 16;  // properties per object

const json::value kEmptySchema = json::object{};

std::string_view sv(const json::string& s) noexcept { return {s.data(), s.size()}; }

const json::value* member(const json::object& o, std::string_view key) {
  return o.if_contains(key);
}

bool number_of(const json::value* v, double& out) {
  if (!v) return false;
  if (v->is_int64()) out = static_cast<double>(v->get_int64());
  else if (v->is_uint64()) out = static_cast<double>(v->get_uint64());
  else if (v->is_double()) out = v->get_double();
  else return false;
  return std::isfinite(out);
}

class SchemaWriter {
 public:
  SchemaWriter(const json::value& root, std::uint32_t seed, Pieces& out)
      : root_(root), rng_(seed ^ 0x5eed15ceu), text_(seed), out_(out) {}

  void write_root() {
    const json::value& s = resolve(root_);
    if (!s.is_object()) {  // true: any object will do
      write_answer_object();
      return;
    }
    // The root of a response format is an object, also when the schema leaves out the type.
    if (s.is_object() && !s.get_object().contains("type") && !s.get_object().contains("anyOf") &&
        !s.get_object().contains("oneOf") && !s.get_object().contains("allOf") &&
        !s.get_object().contains("enum") && !s.get_object().contains("const")) {
      object(s.get_object(), "", 0);
      return;
    }
    value(s, "", 0);
  }

  // {"answer": "<a sentence>"}
  void write_answer_object() {
    out_.add("{");
    out_.add("\"answer\":");
    std::string sentence;
    std::vector<std::size_t> cuts;  // end of each word in `sentence`
    do {
      text_.next(sentence);
      cuts.push_back(sentence.size());
    } while (!text_.at_sentence_end());
    std::size_t begin = 0;
    for (std::size_t i = 0; i < cuts.size(); ++i) {
      std::string piece;
      std::string_view w = std::string_view(sentence).substr(begin, cuts[i] - begin);
      if (i == 0) piece = " \"";
      append_escaped(piece, w);
      if (i + 1 == cuts.size()) piece += '"';
      out_.add(piece);
      begin = cuts[i];
    }
    out_.add("}");
  }

 private:
  static void append_escaped(std::string& out, std::string_view s) {
    std::string q;
    append_json_string(q, s);
    out.append(q, 1, q.size() - 2);
  }

  // Follows $ref (to "#", "#/$defs/X", "#/definitions/X"), at most 8 times.
  const json::value& resolve(const json::value& s) const {
    const json::value* cur = &s;
    for (int hop = 0; hop < 8 && cur->is_object(); ++hop) {
      const json::value* ref = member(cur->get_object(), "$ref");
      if (!ref || !ref->is_string()) break;
      const std::string_view r = sv(ref->get_string());
      const json::value* next = nullptr;
      if (r == "#") {
        next = &root_;
      } else {
        for (std::string_view prefix : {std::string_view("#/$defs/"), std::string_view("#/definitions/")}) {
          if (r.starts_with(prefix) && root_.is_object()) {
            const std::string_view container = prefix.substr(2, prefix.size() - 3);
            if (const json::value* defs = member(root_.get_object(), container); defs && defs->is_object())
              next = member(defs->get_object(), r.substr(prefix.size()));
          }
        }
      }
      if (!next) return kEmptySchema;
      cur = next;
    }
    return *cur;
  }

  // "string", "integer", ... from `type` (the first that is not "null"), else guessed.
  static std::string_view type_of(const json::object& s) {
    if (const json::value* t = member(s, "type")) {
      if (t->is_string()) return sv(t->get_string());
      if (t->is_array()) {
        std::string_view first;
        for (const auto& e : t->get_array()) {
          if (!e.is_string()) continue;
          if (first.empty()) first = sv(e.get_string());
          if (e.get_string() != "null") return sv(e.get_string());
        }
        if (!first.empty()) return first;
      }
    }
    if (s.contains("properties")) return "object";
    if (s.contains("items")) return "array";
    return "string";
  }

  void piece(std::string_view lead, std::string_view text) {
    std::string p(lead);
    p += text;
    out_.add(p);
  }

  void value(const json::value& schema, std::string_view lead, int depth) {
    ++nodes_;
    const json::value& s = resolve(schema);
    if (!s.is_object()) {  // true, false or something else: any value will do
      words(lead, nullptr);
      return;
    }
    const json::object& o = s.get_object();
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      const json::value* branches = member(o, key);
      if (!branches || !branches->is_array() || branches->get_array().empty()) continue;
      // The first branch that is not just {"type":"null"}.
      const json::array& a = branches->get_array();
      const json::value* pick = &a[0];
      for (const auto& b : a) {
        const json::value& rb = resolve(b);
        if (rb.is_object() && type_of(rb.get_object()) == "null" && rb.get_object().contains("type")) continue;
        pick = &b;
        break;
      }
      --nodes_;
      value(*pick, lead, depth);
      return;
    }
    if (const json::value* c = member(o, "const")) {
      piece(lead, json::serialize(*c));
      return;
    }
    if (const json::value* e = member(o, "enum"); e && e->is_array() && !e->get_array().empty()) {
      const json::array& a = e->get_array();
      piece(lead, json::serialize(a[rng_.next() % a.size()]));
      return;
    }
    const std::string_view type = type_of(o);
    if (type == "object") {
      object(o, lead, depth);
    } else if (type == "array") {
      array(o, lead, depth);
    } else if (type == "integer" || type == "number") {
      number(o, lead, type == "integer");
    } else if (type == "boolean") {
      piece(lead, (rng_.next() & 1) ? "true" : "false");
    } else if (type == "null") {
      piece(lead, "null");
    } else {
      words(lead, &o);
    }
  }

  void object(const json::object& o, std::string_view lead, int depth) {
    std::vector<std::pair<std::string_view, const json::value*>> keys;
    const json::value* props = member(o, "properties");
    const json::object* p = props && props->is_object() ? &props->get_object() : nullptr;
    const json::value* req = member(o, "required");
    if (req && req->is_array()) {
      for (const auto& k : req->get_array()) {
        if (!k.is_string()) continue;
        const json::value* ps = p ? member(*p, sv(k.get_string())) : nullptr;
        keys.emplace_back(sv(k.get_string()), ps ? ps : &kEmptySchema);
      }
    } else if (p) {
      for (const auto& kv : *p) keys.emplace_back(kv.key(), &kv.value());
    }
    if (keys.size() > kMaxKeys) keys.resize(kMaxKeys);
    if (keys.empty() || depth >= kMaxDepth || nodes_ > kMaxNodes) {
      piece(lead, "{}");
      return;
    }
    piece(lead, "{");
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) out_.add(",");
      std::string k = i > 0 ? " " : "";
      append_json_string(k, keys[i].first);
      k += ':';
      out_.add(k);
      value(*keys[i].second, " ", depth + 1);
    }
    out_.add("}");
  }

  void array(const json::object& o, std::string_view lead, int depth) {
    std::int64_t n = 2;
    double d = 0;
    if (number_of(member(o, "minItems"), d) && d > n) n = std::min<std::int64_t>(5, static_cast<std::int64_t>(d));
    if (number_of(member(o, "maxItems"), d) && d < n) n = std::max<std::int64_t>(0, static_cast<std::int64_t>(d));
    if (n == 0 || depth >= kMaxDepth || nodes_ > kMaxNodes) {
      piece(lead, "[]");
      return;
    }
    const json::value* items = member(o, "items");
    const json::value& item = items && (items->is_object() || items->is_bool()) ? *items : kEmptySchema;
    piece(lead, "[");
    for (std::int64_t i = 0; i < n; ++i) {
      if (i > 0) out_.add(",");
      value(item, i > 0 ? " " : "", depth + 1);
    }
    out_.add("]");
  }

  void number(const json::object& o, std::string_view lead, bool integer) {
    constexpr double kBound = 1e15;  // exact in a double and in an int64
    double lo = 0, hi = 0, v = 0;
    bool has_lo = false, has_hi = false;
    if (number_of(member(o, "minimum"), v)) { lo = std::ceil(v); has_lo = true; }
    if (number_of(member(o, "exclusiveMinimum"), v)) { lo = std::floor(v) + 1; has_lo = true; }
    if (number_of(member(o, "maximum"), v)) { hi = std::floor(v); has_hi = true; }
    if (number_of(member(o, "exclusiveMaximum"), v)) { hi = std::ceil(v) - 1; has_hi = true; }
    if (!has_lo && !has_hi) { lo = 0; hi = 100; }
    else if (!has_hi) hi = lo + 100;
    else if (!has_lo) lo = hi >= 0 && hi <= 100 ? 0 : hi - 100;
    lo = std::clamp(lo, -kBound, kBound);
    hi = std::clamp(hi, -kBound, kBound);
    if (hi < lo) hi = lo;
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    const auto x = static_cast<std::int64_t>(lo) + static_cast<std::int64_t>(rng_.next() % span);
    char buf[40];
    char* end = buf;
    if (!integer && static_cast<double>(x) + 0.5 <= hi) {
      end = std::to_chars(buf, buf + sizeof buf, static_cast<double>(x) + 0.5).ptr;
    } else {
      end = std::to_chars(buf, buf + sizeof buf, x).ptr;
    }
    piece(lead, std::string_view(buf, static_cast<std::size_t>(end - buf)));
  }

  // A string of 1 to 3 words (within minLength/maxLength), or a sample of its format.
  void words(std::string_view lead, const json::object* o) {
    if (o) {
      if (const json::value* f = member(*o, "format"); f && f->is_string()) {
        static constexpr std::pair<std::string_view, std::string_view> kFormats[] = {
            {"date-time", "2024-05-01T12:00:00Z"}, {"date", "2024-05-01"}, {"time", "12:00:00"},
            {"email", "someone@example.com"}, {"uri", "https://example.com/"},
            {"uuid", "123e4567-e89b-12d3-a456-426614174000"}};
        for (const auto& [name, sample] : kFormats) {
          if (f->get_string() == name) {
            std::string q;
            append_json_string(q, sample);
            piece(lead, q);
            return;
          }
        }
      }
    }
    double d = 0;
    std::size_t min_len = 0, max_len = 200;
    if (o && number_of(member(*o, "minLength"), d) && d > 0) min_len = static_cast<std::size_t>(std::min(d, 200.0));
    if (o && number_of(member(*o, "maxLength"), d) && d >= 0) max_len = static_cast<std::size_t>(std::min(d, 200.0));
    if (max_len < min_len) max_len = min_len;
    const std::uint32_t want = 1 + rng_.next() % 3;
    std::vector<std::string> ws;
    std::size_t len = 0;
    for (std::uint32_t i = 0; i < 60 && (i < want || len < min_len); ++i) {
      std::string w(word(rng_.next()));
      const std::size_t add = w.size() + (ws.empty() ? 0 : 1);
      if (len + add > max_len) {
        if (ws.empty()) {
          w.resize(max_len);
          len = w.size();
          ws.push_back(std::move(w));
        }
        break;
      }
      len += add;
      ws.push_back(std::move(w));
    }
    if (len < min_len) {  // words longer than max_len left it short: pad
      if (ws.empty()) ws.emplace_back();
      ws.back().append(min_len - len, 'a');
    }
    if (ws.empty()) {
      piece(lead, "\"\"");
      return;
    }
    for (std::size_t i = 0; i < ws.size(); ++i) {
      std::string p = i == 0 ? std::string(lead) + "\"" : std::string(" ");
      p += ws[i];
      if (i + 1 == ws.size()) p += '"';
      out_.add(p);
    }
  }

  const json::value& root_;
  Rng rng_;
  TextGen text_;
  Pieces& out_;
  int nodes_ = 0;
};

}  // namespace

void json_for_schema(const json::value& schema, std::uint32_t seed, Pieces& out) {
  SchemaWriter w(schema, seed, out);
  if (schema.is_null()) w.write_answer_object();
  else w.write_root();
}

// ---------------------------------------------------------------------------------------
// Answers

std::string_view Answer::token(std::int64_t i) const noexcept {
  const auto p = piece_index(i);
  return p ? content.piece(*p) : std::string_view();
}

std::optional<std::size_t> Answer::piece_index(std::int64_t i) const noexcept {
  if (i < 0) return std::nullopt;
  if (tool_call) {
    if (i == 0) return std::nullopt;
    return static_cast<std::size_t>(i - 1);
  }
  return static_cast<std::size_t>(i);
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Ends the content before the first occurrence of any stop sequence.
void apply_stop(Answer& a, const std::vector<std::string>& stops) {
  std::size_t best = std::string::npos;
  const std::string* matched = nullptr;
  for (const auto& s : stops) {
    if (s.empty()) continue;
    const std::size_t p = a.content.text.find(s);
    if (p < best) {
      best = p;
      matched = &s;
    }
  }
  if (!matched) return;
  auto& ends = a.content.ends;
  std::size_t k = 0;
  while (k < ends.size() && ends[k] <= best) ++k;
  const std::size_t start = k == 0 ? 0 : ends[k - 1];
  if (k < ends.size() && start < best) {
    ends[k] = static_cast<std::uint32_t>(best);
    ++k;
  }
  ends.resize(k);
  a.content.text.resize(best);
  a.finish = Finish::stop_sequence;
  a.stop_sequence = *matched;
}

// The reasoning summary: the first sentence of the text for the folded seed + 1 (not the
// answer's own first sentence), at most `cap` tokens.
Pieces reasoning_summary(std::uint32_t seed, std::int64_t cap) {
  Pieces p;
  TextGen g(seed + 1);
  std::string token;
  while (static_cast<std::int64_t>(p.size()) < cap) {
    token.clear();
    g.next(token);
    p.add(token);
    if (g.at_sentence_end()) break;
  }
  return p;
}

}  // namespace

std::optional<std::size_t> choose_tool(const GenRequest& req) {
  if (req.tools.empty() || req.tool_choice == ToolChoice::none || req.last_is_tool_result) return std::nullopt;
  if (req.tool_choice == ToolChoice::named) {
    for (std::size_t i = 0; i < req.tools.size(); ++i) {
      if (req.tools[i].name == req.tool_choice_name) return i;
    }
  }
  const std::string said = lower(req.last_user_text);
  for (std::size_t i = 0; i < req.tools.size(); ++i) {
    if (!req.tools[i].name.empty() && said.find(lower(req.tools[i].name)) != std::string::npos) return i;
  }
  if (req.tool_choice == ToolChoice::required || req.tool_choice == ToolChoice::named) return 0;
  return std::nullopt;
}

Answer make_answer(const GenRequest& req, const config::SimSettings& s, std::string call_id) {
  Answer a;
  a.seed = fold_seed(req.seed);
  // The most tokens the answer may have: the request's limit, max_output_tokens.
  std::int64_t cap = std::max(0, s.max_output_tokens);
  if (req.max_tokens) cap = std::min(cap, std::max<std::int64_t>(0, *req.max_tokens));
  if (req.reasoning) {
    // Reasoning comes first and counts against the same limits (as OpenAI's
    // max_output_tokens does): what the summary takes, the answer cannot.
    a.reasoning = reasoning_summary(a.seed, cap);
    cap -= static_cast<std::int64_t>(a.reasoning.size());
  }

  if (auto t = choose_tool(req); t && cap >= 1) {
    const GenRequest::Tool& tool = req.tools[*t];
    a.tool_call = ToolCall{std::move(call_id), tool.name};
    if (tool.parameters.is_object()) {
      json_for_schema(tool.parameters, a.seed, a.content);
    } else {
      a.content.add("{");
      a.content.add("}");
    }
    a.finish = Finish::tool_calls;
    if (a.tokens() > cap) {
      a.content.truncate(static_cast<std::size_t>(cap - 1));
      a.finish = Finish::length;
    }
    return a;
  }

  if (req.format != Format::text) {
    json_for_schema(req.format == Format::json_schema ? req.schema : json::value(), a.seed, a.content);
    a.finish = Finish::stop;
    if (a.tokens() > cap) {
      a.content.truncate(static_cast<std::size_t>(cap));
      a.finish = Finish::length;
    }
  } else {
    const OutputPlan plan = plan_output(req.max_tokens, s);
    const std::int64_t n = std::min(plan.tokens, cap);  // less than planned only after reasoning
    TextGen g(a.seed);
    a.content.ends.reserve(static_cast<std::size_t>(n));
    a.content.text.reserve(static_cast<std::size_t>(n) * 7);
    for (std::int64_t i = 0; i < n; ++i) {
      g.next(a.content.text);
      a.content.ends.push_back(static_cast<std::uint32_t>(a.content.text.size()));
    }
    a.finish = plan.length_limited || n < plan.tokens ? Finish::length : Finish::stop;
  }
  apply_stop(a, req.stop);
  return a;
}

// ---------------------------------------------------------------------------------------
// Log probabilities

namespace {

std::uint32_t position_hash(std::uint32_t seed, std::int64_t index) noexcept {
  return hash32(seed ^ hash32(static_cast<std::uint32_t>(index)));
}

}  // namespace

double token_logprob(std::uint32_t seed, std::int64_t index) noexcept {
  const std::uint32_t h = position_hash(seed, index);
  return -static_cast<double>(10 + h % 691) / 1000.0;
}

std::vector<TopLogprob> top_logprobs(std::uint32_t seed, std::int64_t index, std::string_view token, int k) {
  std::vector<TopLogprob> out;
  if (k <= 0) return out;
  out.reserve(static_cast<std::size_t>(k));
  out.push_back({std::string(token), token_logprob(seed, index)});
  const std::uint32_t h = position_hash(seed, index);
  const bool space = !token.empty() && token.front() == ' ';
  const std::uint32_t start = h % kWordCount;
  for (std::uint32_t m = 1; out.size() < static_cast<std::size_t>(k) && m <= kWordCount; ++m) {
    std::string alt = space ? " " : "";
    alt += kWords[(start + m * 7919u) % kWordCount];
    if (alt == token) continue;
    const auto j = static_cast<std::uint32_t>(out.size() - 1);
    const double lp = -static_cast<double>(5000 + 2000 * j + hash32(h + j + 1) % 1000) / 1000.0;
    out.push_back({std::move(alt), lp});
  }
  return out;
}

}  // namespace sluice::sim
