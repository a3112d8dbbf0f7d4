#define PCRE2_CODE_UNIT_WIDTH 8
#include "guard/guard.hpp"

#include "telemetry/metrics.hpp"

#include <openssl/evp.h>
#include <pcre2.h>

#include <algorithm>
#include <boost/json.hpp>
#include <stdexcept>

namespace sluice::guard {

namespace json = boost::json;
using config::GuardAction;

namespace {

// Known injection phrasings, English and Chinese (docs/guardrails.md lists them).
constexpr std::string_view kInjection =
    R"re((?:\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}?\b(?:all|any|the|your|previous|prior|above|earlier|preceding|system)\b.{0,20}?\b(?:instructions?|prompts?|rules|directions|guidelines|guardrails)\b)re"
    R"re(|\b(?:reveal|show|print|repeat|output|leak|tell me)\b.{0,20}?\b(?:your|the hidden|your hidden) (?:system prompt|instructions|initial prompt|prompt)\b)re"
    R"re(|\byou are now\b.{0,30}?\b(?:DAN|jailbroken|unrestricted|unfiltered|in developer mode)\b)re"
    R"re(|\b(?:developer|god|jailbreak|DAN) mode\b|\bdo anything now\b)re"
    R"re(|忽略.{0,10}?(?:之前|以上|前面|所有|上述).{0,10}?(?:指令|指示|提示|规则|要求))re"
    R"re(|(?:显示|输出|泄露|告诉我|打印).{0,10}?(?:系统提示|系统指令|初始指令)))re";
constexpr std::string_view kEmail = R"re([A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}(?![A-Za-z0-9_]))re";
constexpr std::string_view kIban = R"re(\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b)re";

struct Regex {
  pcre2_code* code = nullptr;
  Regex() = default;
  Regex(std::string_view pattern, std::uint32_t flags) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | flags, &err, &off, nullptr);
    if (!code) throw std::invalid_argument("guardrails pattern does not compile: " + std::string(pattern));
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  Regex(Regex&& o) noexcept : code(o.code) { o.code = nullptr; }
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
  // Calls f(begin, end) for each match, left to right.
  template <class F>
  void each(std::string_view text, F&& f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    PCRE2_SIZE at = 0;
    while (at <= text.size()) {
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, 0, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      f(ov[0], ov[1]);
      at = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    pcre2_match_data_free(md);
  }
  bool any(std::string_view text) const {
    bool found = false;
    each(text, [&](std::size_t, std::size_t) { found = true; });
    return found;
  }
};

int rank(GuardAction a) { return static_cast<int>(a); }  // off < flag < redact < block

void note(Verdict& v, Kind k, GuardAction a, std::size_t n = 1) {
  if (a == GuardAction::off || n == 0) return;
  for (auto& f : v.findings) {
    if (f.kind == k) {
      f.count += n;
      return;
    }
  }
  v.findings.push_back({k, a, n});
  if (rank(a) > rank(v.worst)) v.worst = a;
}

std::string digits_of(std::string_view s) {
  std::string d;
  for (char c : s) {
    if (c >= '0' && c <= '9') d += c;
  }
  return d;
}

// Spans of `text` to replace, found by one detector; applied right to left.
struct Span {
  std::size_t begin, end;
  std::string_view with;
};

// What a number must not touch. Square brackets count: a redaction label ("[EMAIL]")
// stands where a word was, so a second look at a redacted text reads the same numbers.
bool word_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '[' ||
         c == ']';
}

// A number as people write one: digits joined by single separators (space, dot, dash,
// brackets), maybe a leading '+', not inside a word. Found in one pass (no backtracking:
// a megabyte of digits costs a megabyte of steps).
struct DigitRun {
  std::size_t begin, end;
  std::size_t digits;
  bool card_like;  // only digits, spaces and dashes
};

std::vector<DigitRun> digit_runs(std::string_view t) {
  std::vector<DigitRun> runs;
  auto digit = [&t](std::size_t i) { return i < t.size() && t[i] >= '0' && t[i] <= '9'; };
  auto sep = [](char c) { return c == ' ' || c == '.' || c == '-' || c == '(' || c == ')'; };
  std::size_t i = 0;
  while (i < t.size()) {
    const bool plus = t[i] == '+' && (digit(i + 1) || (i + 1 < t.size() && t[i + 1] == '('));
    const bool open = t[i] == '(' && digit(i + 1);
    if (!digit(i) && !plus && !open) {
      ++i;
      continue;
    }
    const std::size_t begin = i;
    if (begin > 0 && word_char(t[begin - 1])) {  // inside a word ("ex55", "v1.2-3"): skip the rest of it
      ++i;  // (at least this character: a '(' or '+' right after a word is not part of it)
      while (i < t.size() && (word_char(t[i]) || t[i] == '.' || t[i] == '-')) ++i;
      continue;
    }
    std::size_t digits = 0, last_digit = i;
    bool card_like = !plus && !open;
    if (plus || open) ++i;
    while (i < t.size()) {
      if (digit(i)) {
        ++digits;
        last_digit = i++;
      } else if (sep(t[i]) && (digit(i + 1) || (t[i] == ')' && i + 2 < t.size() && sep(t[i + 1]) && digit(i + 2)) ||
                               (t[i] != '(' && i + 1 < t.size() && t[i + 1] == '(' && digit(i + 2)))) {
        if (t[i] == '.' || t[i] == '(' || t[i] == ')') card_like = false;
        ++i;
      } else {
        break;
      }
    }
    std::size_t end = last_digit + 1;
    if (end < t.size() && word_char(t[end])) {
      // Its last group runs into a word ("11119ne"): the number ends before that group.
      while (end > begin && digit(end - 1)) --end, --digits;
      while (end > begin && !digit(end - 1)) --end;
    }
    if (digits > 0 && end > begin) runs.push_back({begin, end, digits, card_like});
    if (i == begin) ++i;
  }
  return runs;
}

}  // namespace

struct Screen::Impl {
  Regex injection{kInjection, PCRE2_CASELESS | PCRE2_DOTALL};
  Regex email{kEmail, 0}, iban{kIban, 0};
  std::vector<Regex> patterns;
};

Screen::Screen(const config::GuardPolicy& policy) : policy_(policy), impl_(std::make_unique<Impl>()) {
  for (const auto& p : policy_.patterns) impl_->patterns.emplace_back(p, PCRE2_CASELESS);
}

Screen::~Screen() = default;

void Screen::inspect_text(std::string& text, bool system, Verdict& v) const {
  const auto& p = policy_;
  if (p.injection != GuardAction::off && impl_->injection.any(text)) note(v, Kind::injection, p.injection);
  if (p.pattern_action != GuardAction::off) {
    for (const auto& re : impl_->patterns) {
      if (re.any(text)) {
        note(v, Kind::pattern, p.pattern_action);
        break;
      }
    }
  }
  if (p.base64 != GuardAction::off) {
    // A run of base64 characters, with upper and lower case letters and digits in it.
    std::size_t run = 0, found = 0;
    bool upper = false, lower = false, digit = false;
    auto end_run = [&] {
      if (run >= p.base64_min_chars && upper && lower && digit) ++found;
      run = 0;
      upper = lower = digit = false;
    };
    for (char c : text) {
      const bool b64 = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
                       c == '/' || c == '=' || c == '-' || c == '_';
      if (!b64) {
        end_run();
        continue;
      }
      ++run;
      upper |= c >= 'A' && c <= 'Z';
      lower |= c >= 'a' && c <= 'z';
      digit |= c >= '0' && c <= '9';
    }
    end_run();
    note(v, Kind::base64, p.base64, found);
  }
  (void)system;
  // Hidden tag characters: U+E0000..U+E007F are F3 A0 80 80 .. F3 A0 81 BF in UTF-8.
  if (p.unicode_tags != GuardAction::off) {
    // The text is copied byte by byte and a tag character is taken off the copy's end as
    // soon as it is complete there: one taken out of the middle of another cannot leave a
    // new one behind (F3 A0 [F3 A0 81 A9] 81 A9), and nesting costs no second pass.
    std::size_t n = 0;
    std::string kept;
    kept.reserve(text.size());
    auto tag_at_end = [&kept] {
      const std::size_t k = kept.size();
      if (k < 4) return false;
      const auto b = [&kept, k](std::size_t back) { return static_cast<unsigned char>(kept[k - back]); };
      return b(4) == 0xF3 && b(3) == 0xA0 && (b(2) == 0x80 || b(2) == 0x81) && b(1) >= 0x80 && b(1) <= 0xBF;
    };
    for (char c : text) {
      kept += c;
      if (tag_at_end()) {
        ++n;
        kept.resize(kept.size() - 4);
      }
    }
    note(v, Kind::unicode_tags, p.unicode_tags, n);
    if (n > 0 && p.unicode_tags == GuardAction::redact) text = std::move(kept);
  }
  // PII: e-mail addresses, then IBANs, cards and phones (an IBAN holds digits; a card
  // number is also a run of digits); what one detector found is not found again by the
  // next. Spans are kept in order of their start, so an overlap is a binary search.
  std::vector<Span> spans;       // every detector's, sorted by begin
  std::vector<Span> redactions;  // those to replace
  auto taken = [&spans](std::size_t b, std::size_t e) {
    auto it = std::lower_bound(spans.begin(), spans.end(), e, [](const Span& s, std::size_t x) { return s.begin < x; });
    return it != spans.begin() && std::prev(it)->end > b;  // the last span starting before e ends after b
  };
  auto found = [&](Kind k, GuardAction a, std::string_view label, std::vector<std::pair<std::size_t, std::size_t>>& hits) {
    std::size_t n = 0;
    std::vector<Span> mine;
    for (auto [b, e] : hits) {
      if (taken(b, e)) continue;
      ++n;
      mine.push_back({b, e, label});
    }
    note(v, k, a, n);
    if (a == GuardAction::redact) redactions.insert(redactions.end(), mine.begin(), mine.end());
    const auto mid = spans.insert(spans.end(), mine.begin(), mine.end());
    std::inplace_merge(spans.begin(), mid, spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  };
  std::vector<std::pair<std::size_t, std::size_t>> hits;
  if (p.email != GuardAction::off) {
    impl_->email.each(text, [&](std::size_t b, std::size_t e) { hits.emplace_back(b, e); });
    found(Kind::email, p.email, "[EMAIL]", hits);
  }
  if (p.iban != GuardAction::off) {
    hits.clear();
    impl_->iban.each(text, [&](std::size_t b, std::size_t e) {
      // The longest candidate first, then shorter ones ending before a space (an IBAN
      // followed by more groups of digits or letters).
      for (std::size_t end = e; end > b; --end) {
        if (end != e && text[end] != ' ') continue;
        if (end - b < 15) break;
        if (!taken(b, end) && iban_valid(std::string_view(text).substr(b, end - b))) {
          hits.emplace_back(b, end);
          break;
        }
      }
    });
    found(Kind::iban, p.iban, "[IBAN]", hits);
  }
  // Numbers are read with what was found so far blanked out (as its label will stand
  // there: not a digit, not a word), so a second look at the redacted text finds the same.
  const bool numbers = p.card != GuardAction::off || p.phone != GuardAction::off;
  std::vector<DigitRun> runs;
  if (numbers) {
    std::string blanked = text;
    for (const auto& s : spans) std::fill(blanked.begin() + s.begin, blanked.begin() + s.end, ']');
    runs = digit_runs(blanked);
  }
  if (p.card != GuardAction::off) {
    hits.clear();
    for (const auto& r : runs) {
      if (r.card_like && r.digits >= 13 && r.digits <= 19 && luhn_valid(digits_of(std::string_view(text).substr(r.begin, r.end - r.begin)))) {
        hits.emplace_back(r.begin, r.end);
      }
    }
    found(Kind::card, p.card, "[CARD]", hits);
  }
  if (p.phone != GuardAction::off) {
    hits.clear();
    for (const auto& r : runs) {
      if (r.digits >= 10 && r.digits <= 15) hits.emplace_back(r.begin, r.end);
    }
    found(Kind::phone, p.phone, "[PHONE]", hits);
  }
  spans = std::move(redactions);
  if (!spans.empty()) {
    // One pass (a replace per span would move the rest of the text each time).
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    std::string out;
    out.reserve(text.size());
    std::size_t at = 0;
    for (const auto& s : spans) {
      out.append(text, at, s.begin - at);
      out += s.with;
      at = s.end;
    }
    out.append(text, at, std::string::npos);
    text = std::move(out);
  }
}

Verdict Screen::inspect(json::object& body) const {
  Verdict v;
  auto* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return v;
  std::size_t system_bytes = 0;
  for (auto& m : messages->get_array()) {
    auto* o = m.if_object();
    if (!o) continue;
    const auto* role = o->if_contains("role");
    const bool system = role && role->is_string() && (role->get_string() == "system" || role->get_string() == "developer");
    auto one = [&](json::value& t) {
      if (!t.is_string()) return;
      std::string text(t.get_string());
      if (system) system_bytes += text.size();
      inspect_text(text, system, v);
      if (text != std::string_view(t.get_string())) t = text;  // redacted
    };
    auto* content = o->if_contains("content");
    if (!content) continue;
    if (content->is_string()) {
      one(*content);
    } else if (content->is_array()) {
      for (auto& part : content->get_array()) {
        if (auto* po = part.if_object()) {
          if (auto* t = po->if_contains("text")) one(*t);
        }
      }
    }
  }
  if (policy_.system_size != GuardAction::off && system_bytes > policy_.max_system_bytes) {
    note(v, Kind::system_size, policy_.system_size);
  }
  return v;
}

void Screen::inspect_native(json::object& native, Verdict& v) const {
  auto one = [&](json::value& t, bool system) {
    if (!t.is_string()) return;
    std::string text(t.get_string());
    inspect_text(text, system, v);
    if (text != std::string_view(t.get_string())) t = text;
  };
  if (auto* i = native.if_contains("instructions")) one(*i, true);
  auto* input = native.if_contains("input");
  if (!input) return;
  if (input->is_string()) {
    one(*input, false);
    return;
  }
  if (!input->is_array()) return;
  for (auto& item : input->get_array()) {
    auto* o = item.if_object();
    if (!o) continue;
    auto* content = o->if_contains("content");
    if (!content) continue;
    if (content->is_string()) {
      one(*content, false);
    } else if (content->is_array()) {
      for (auto& part : content->get_array()) {
        if (auto* po = part.if_object()) {
          if (auto* t = po->if_contains("text")) one(*t, false);
        }
      }
    }
  }
}

std::string Verdict::summary() const {
  if (findings.empty()) return {};
  std::string s(config::to_string(worst));
  s += ':';
  bool first_kind = true;
  for (const auto& f : findings) {
    if (f.action != worst) continue;
    if (!first_kind) s += ',';
    first_kind = false;
    s += to_string(f.kind);
  }
  for (const auto& f : findings) {
    if (f.action == worst) continue;
    s += ';';
    s += config::to_string(f.action);
    s += ':';
    s += to_string(f.kind);
  }
  return s;
}

const Finding* Verdict::first(GuardAction a) const {
  for (const auto& f : findings) {
    if (f.action == a) return &f;
  }
  return nullptr;
}

std::string_view to_string(Kind k) noexcept {
  switch (k) {
    case Kind::injection: return "injection";
    case Kind::unicode_tags: return "unicode_tags";
    case Kind::base64: return "base64";
    case Kind::system_size: return "system_size";
    case Kind::pattern: return "pattern";
    case Kind::email: return "email";
    case Kind::phone: return "phone";
    case Kind::card: return "card";
    case Kind::iban: return "iban";
    case Kind::model: return "model";
  }
  return "?";
}

bool luhn_valid(std::string_view d) noexcept {
  if (d.size() < 13 || d.size() > 19) return false;
  int sum = 0;
  bool twice = false;
  for (auto it = d.rbegin(); it != d.rend(); ++it) {
    if (*it < '0' || *it > '9') return false;
    int x = *it - '0';
    if (twice) x = x * 2 > 9 ? x * 2 - 9 : x * 2;
    sum += x;
    twice = !twice;
  }
  return sum % 10 == 0;
}

bool iban_valid(std::string_view s) noexcept {
  std::string t;
  for (char c : s) {
    if (c != ' ') t += c;
  }
  if (t.size() < 15 || t.size() > 34) return false;
  // The first four characters moved to the end; letters as 10..35; the number mod 97 is 1.
  const std::string r = t.substr(4) + t.substr(0, 4);
  int mod = 0;
  for (char c : r) {
    if (c >= '0' && c <= '9') {
      mod = (mod * 10 + (c - '0')) % 97;
    } else if (c >= 'A' && c <= 'Z') {
      mod = (mod * 100 + (c - 'A' + 10)) % 97;
    } else {
      return false;
    }
  }
  return mod == 1;
}

std::string guard_text(const json::object& body) {
  std::string out;
  const auto* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return out;
  for (const auto& m : messages->get_array()) {
    const auto* o = m.if_object();
    if (!o) continue;
    const auto* role = o->if_contains("role");
    auto line = [&](const json::value& t) {
      if (!t.is_string()) return;
      if (!out.empty()) out += '\n';
      if (role && role->is_string()) {
        out += role->get_string();
        out += ": ";
      }
      out += t.get_string();
    };
    const auto* content = o->if_contains("content");
    if (!content) continue;
    if (content->is_string()) line(*content);
    else if (content->is_array()) {
      for (const auto& part : content->get_array()) {
        if (const auto* t = part.is_object() ? part.get_object().if_contains("text") : nullptr) line(*t);
      }
    }
  }
  return out;
}

std::string_view guard_call_path(config::GuardModelApi api) {
  return api == config::GuardModelApi::moderation ? "/moderations" : "/chat/completions";
}

std::string guard_call_body(config::GuardModelApi api, std::string_view model, std::string_view text) {
  json::object b{{"model", model}};
  if (api == config::GuardModelApi::moderation) {
    b["input"] = text;
  } else {
    b["messages"] = json::array{json::object{{"role", "user"}, {"content", text}}};
    b["max_tokens"] = 16;
    b["temperature"] = 0;
  }
  return json::serialize(b);
}

std::optional<bool> read_guard_answer(config::GuardModelApi api, std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const auto* o = ec ? nullptr : v.if_object();
  if (!o) return std::nullopt;
  if (api == config::GuardModelApi::moderation) {
    const auto* results = o->if_contains("results");
    if (!results || !results->is_array() || results->get_array().empty()) return std::nullopt;
    bool flagged = false;
    for (const auto& r : results->get_array()) {
      const auto* f = r.is_object() ? r.get_object().if_contains("flagged") : nullptr;
      if (!f || !f->is_bool()) return std::nullopt;
      flagged = flagged || f->get_bool();
    }
    return flagged;
  }
  const auto* choices = o->if_contains("choices");
  if (!choices || !choices->is_array() || choices->get_array().empty()) return std::nullopt;
  const auto* c0 = choices->get_array()[0].if_object();
  const auto* msg = c0 ? c0->if_contains("message") : nullptr;
  const auto* content = msg && msg->is_object() ? msg->get_object().if_contains("content") : nullptr;
  if (!content || !content->is_string()) return std::nullopt;
  std::string_view t = content->get_string();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\n')) t.remove_prefix(1);
  if (t.starts_with("unsafe")) return true;
  if (t.starts_with("safe")) return false;
  return std::nullopt;
}

std::optional<bool> VerdictCache::get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return std::nullopt;
  if (std::chrono::steady_clock::now() >= it->second.second) {
    map_.erase(it);
    return std::nullopt;
  }
  return it->second.first;
}

void VerdictCache::clear() {
  std::lock_guard lock(mu_);
  map_.clear();
}

void VerdictCache::put(const std::string& key, bool flagged, std::chrono::milliseconds ttl) {
  if (ttl.count() <= 0) return;
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (map_.size() >= kMax) {
    std::erase_if(map_, [now](const auto& e) { return e.second.second <= now; });
    while (map_.size() >= kMax / 2) map_.erase(map_.begin());  // (any half: a bound, not an order)
  }
  map_[key] = {flagged, now + ttl};
}

std::string VerdictCache::key(std::string_view policy, std::string_view text) {
  std::string in(policy);
  in += '\n';  // (no policy name holds one)
  in += text;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

void Guards::count_model(bool ok) noexcept {
  model_calls_.fetch_add(1, std::memory_order_relaxed);
  if (!ok) model_failures_.fetch_add(1, std::memory_order_relaxed);
}

Guards::Guards(const std::vector<config::GuardPolicy>& policies) { reconfigure(policies); }

void Guards::reconfigure(const std::vector<config::GuardPolicy>& policies) {
  auto set = std::make_unique<Set>();
  for (const auto& p : policies) set->push_back(std::make_unique<Screen>(p));  // compiled before the swap
  current_.store(set.get(), std::memory_order_release);
  sets_.push_back(std::move(set));
  verdicts_.clear();
}

const Screen* Guards::find(std::string_view name) const noexcept {
  for (const auto& s : *current_.load(std::memory_order_acquire)) {
    if (s->policy().name == name) return s.get();
  }
  return nullptr;
}

void Guards::count(const Verdict& v) noexcept {
  for (const auto& f : v.findings) {
    counts_[static_cast<std::size_t>(f.kind)][static_cast<std::size_t>(f.action)].fetch_add(1, std::memory_order_relaxed);
  }
}

void Guards::render_metrics(std::string& out) const {
  telemetry::metric_help(out, "sluice_guard_model_calls_total", "counter", "Calls to guard models (guardrails[].model).");
  telemetry::metric_line(out, "sluice_guard_model_calls_total", "",
                         static_cast<double>(model_calls_.load(std::memory_order_relaxed)));
  telemetry::metric_help(out, "sluice_guard_model_failures_total", "counter",
                         "Guard model calls that failed or timed out.");
  telemetry::metric_line(out, "sluice_guard_model_failures_total", "",
                         static_cast<double>(model_failures_.load(std::memory_order_relaxed)));
  telemetry::metric_help(out, "sluice_guardrail_findings_total", "counter",
                         "Requests in which a guardrail found something, by what and what it did.");
  for (std::size_t k = 0; k < kKinds; ++k) {
    for (std::size_t a = 1; a < 4; ++a) {
      const std::string labels = "kind=\"" + std::string(to_string(static_cast<Kind>(k))) + "\",action=\"" +
                                 std::string(config::to_string(static_cast<GuardAction>(a))) + "\"";
      telemetry::metric_line(out, "sluice_guardrail_findings_total", labels,
                             static_cast<double>(counts_[k][a].load(std::memory_order_relaxed)));
    }
  }
}

}  // namespace sluice::guard
