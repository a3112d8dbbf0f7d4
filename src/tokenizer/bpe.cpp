// Exact byte-level BPE: rank-file loading, PCRE2 pre-tokenization, merges by rank.
//
// Per piece the algorithm is tiktoken's: a piece that is itself a token is one token;
// otherwise the adjacent pair of parts with the lowest rank (leftmost on ties) is merged
// until no pair is a token. Short pieces use tiktoken's array scan on the stack; long
// pieces (a run of letters or symbols can be megabytes) use a heap with a linked list, which
// yields the same merges in O(n log n) instead of O(n^2).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "tokenizer/tokenizer.hpp"

#include "common/text.hpp"

namespace sluice::tokenizer {
namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// The patterns of tiktoken (openai_public.py); used for plain ranks files, which carry none.
constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Pieces up to this many bytes are merged with the array scan on the stack.
constexpr std::size_t kSmallPiece = 96;

inline std::uint64_t load64(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load32(const unsigned char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline std::uint64_t mix(std::uint64_t h) noexcept {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}
inline std::uint64_t hash_bytes(const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n > 8) {
    h = (h ^ load64(p)) * 0x9fb21c651e98df25ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  std::uint64_t w;
  if (n >= 4) {
    w = (std::uint64_t{load32(p)} << 32) | load32(p + n - 4);
  } else if (n > 0) {
    w = std::uint64_t{p[0]} | (std::uint64_t{p[n / 2]} << 8) | (std::uint64_t{p[n - 1]} << 16);
  } else {
    w = 0;
  }
  return mix((h ^ w) * 0x9fb21c651e98df25ull);
}

#include "tokenizer/unicode_patch.inc"

// The pattern as PCRE2 compiles it: each \p{X} with the code points Unicode added to X
// since PCRE2's tables, \s and \S as explicit White_Space (see gen_unicode.mjs). Handles
// the syntax tiktoken's patterns use; \P{..} and \S inside a class are left as they are.
std::string adapt_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 8);
  bool in_class = false;
  const std::string ws(kWhiteSpace);
  for (std::size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'p' && i + 2 < p.size() && p[i + 2] == '{') {
        const std::size_t close = p.find('}', i + 3);
        if (close != std::string_view::npos) {
          const std::string_view name = p.substr(i + 3, close - i - 3);
          const std::string_view original = p.substr(i, close + 1 - i);
          std::string_view added;
          for (const auto& patch : kPropertyPatch) {
            if (patch.name == name) added = patch.added;
          }
          if (added.empty()) {
            out += original;
          } else if (in_class) {
            out += original;
            out += added;
          } else {
            out += '[';
            out += original;
            out += added;
            out += ']';
          }
          i = close + 1;
          continue;
        }
      }
      if (e == 's') {
        out += in_class ? ws : "[" + ws + "]";
        i += 2;
        continue;
      }
      if (e == 'S' && !in_class) {
        out += "[^" + ws + "]";
        i += 2;
        continue;
      }
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const std::size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

// Whether the text holds a code point of kPatchedRanges (or bytes that are not UTF-8, where
// the two patterns could also part ways). ASCII is skipped eight bytes at a time.
bool touches_patch(const unsigned char* s, std::size_t n) noexcept {
  constexpr std::uint32_t lowest = kPatchedRanges[0][0];
  static_assert(lowest >= 0x80);
  std::size_t i = 0;
  while (i < n) {
    if (i + 8 <= n && (load64(s + i) & 0x8080808080808080ull) == 0) {
      i += 8;
      continue;
    }
    const unsigned char b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      cp = b & 0x07;
    } else {
      return true;
    }
    if (i + len > n) return true;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return true;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    i += len;
    if (cp < lowest) continue;
    // Binary search: the last range starting at or below cp.
    std::size_t lo = 0, hi = std::size(kPatchedRanges);
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (kPatchedRanges[mid][0] <= cp) lo = mid;
      else hi = mid;
    }
    if (cp <= kPatchedRanges[lo][1]) return true;
  }
  return false;
}


// ---------------------------------------------------------------------------------------
// Minimal JSON reader: enough for {"pat_str": "...", "special_tokens": {...}, "bpe_ranks": "..."}.
class Json {
 public:
  explicit Json(std::string_view s) : s_(s) {}

  bool fail(std::string msg) {
    if (error_.empty()) {
      std::size_t line = 1, col = 1;
      for (std::size_t i = 0; i < pos_ && i < s_.size(); ++i) {
        if (s_[i] == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
      }
      error_ = "line " + std::to_string(line) + " column " + std::to_string(col) + ": " + msg;
    }
    return false;
  }
  const std::string& error() const { return error_; }

  void ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool at_end() {
    ws();
    return pos_ == s_.size();
  }

  bool hex4(std::uint32_t& v) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else return fail("bad \\u escape");
    }
    return true;
  }
  bool string(std::string& out) {
    out.clear();
    if (!eat('"')) return fail("expected a string");
    for (;;) {
      const std::size_t run = pos_;
      while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\\' &&
             static_cast<unsigned char>(s_[pos_]) >= 0x20)
        ++pos_;
      out.append(s_.data() + run, pos_ - run);
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        --pos_;
        return fail("control character in string");
      }
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            std::uint32_t lo = 0;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              return fail("lone surrogate in \\u escape");
            pos_ += 2;
            if (!hex4(lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return fail("lone surrogate in \\u escape");
          }
          sluice::append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          return fail("bad escape in string");
      }
    }
  }
  bool integer(std::int64_t& v) {
    ws();
    const std::size_t start = pos_;
    bool neg = false;
    if (pos_ < s_.size() && s_[pos_] == '-') {
      neg = true;
      ++pos_;
    }
    v = 0;
    std::size_t digits = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (++digits > 15) return fail("integer too large");
      v = v * 10 + (s_[pos_++] - '0');
    }
    if (digits == 0 ||
        (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))) {
      pos_ = start;
      return fail("expected an integer");
    }
    if (neg) v = -v;
    return true;
  }
  // Skips any value (used for unknown keys).
  bool skip(int depth = 0) {
    if (depth > 64) return fail("nesting too deep");
    ws();
    if (pos_ >= s_.size()) return fail("unexpected end of file");
    const char c = s_[pos_];
    if (c == '"') {
      std::string tmp;
      return string(tmp);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++pos_;
      if (eat(close)) return true;
      for (;;) {
        if (c == '{') {
          std::string key;
          if (!string(key)) return false;
          if (!eat(':')) return fail("expected ':'");
        }
        if (!skip(depth + 1)) return false;
        if (eat(',')) continue;
        if (eat(close)) return true;
        return fail(std::string("expected ',' or '") + close + "'");
      }
    }
    const std::size_t start = pos_;
    while (pos_ < s_.size() && std::strchr(",]} \t\r\n", s_[pos_]) == nullptr) ++pos_;
    const std::string_view lit = s_.substr(start, pos_ - start);
    if (lit == "true" || lit == "false" || lit == "null") return true;
    if (!lit.empty() && (lit[0] == '-' || (lit[0] >= '0' && lit[0] <= '9'))) return true;
    pos_ = start;
    return fail("unexpected character");
  }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
  std::string error_;
};

// Standard or URL-safe base64, padding optional.
bool base64_decode(std::string_view in, std::string& out) {
  static constexpr auto table = [] {
    std::array<signed char, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = static_cast<signed char>(i);
    t['-'] = 62;
    t['_'] = 63;
    return t;
  }();
  out.clear();
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char ch : in) {
    const int v = table[static_cast<unsigned char>(ch)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

bool parse_rank_number(std::string_view s, std::uint32_t& v) {
  if (s.empty() || s.size() > 10) return false;
  std::uint64_t x = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    x = x * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (x >= kNone) return false;
  v = static_cast<std::uint32_t>(x);
  return true;
}

struct Slot {
  std::uint32_t tag = 0;
  std::uint32_t rank1 = 0;  // rank + 1; 0 is empty
};

// Per-thread scratch: PCRE2 match data and JIT stack, and the buffers of long pieces.
struct Scratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  std::vector<std::uint32_t> next, prev, pair, tok;
  std::vector<std::uint64_t> heap;  // (rank << 32) | position, a 4-ary min-heap

  Scratch() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    // PCRE2's default 32 KiB would do for these patterns (their repeats are of single
    // characters); the 8 MiB limit is insurance, mapped lazily.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx && jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~Scratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(jit_stack);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void trim() {
    // A giant piece must not pin its buffers for the thread's lifetime.
    constexpr std::size_t keep = 1 << 16;
    if (next.capacity() > keep) {
      for (auto* v : {&next, &prev, &pair, &tok}) std::vector<std::uint32_t>().swap(*v);
      std::vector<std::uint64_t>().swap(heap);
    }
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// 4-ary min-heap over 64-bit keys: half the depth of a binary heap, children adjacent.
inline void heap_sift_down(std::uint64_t* h, std::size_t n, std::size_t i) noexcept {
  const std::uint64_t v = h[i];
  for (;;) {
    const std::size_t c = 4 * i + 1;
    if (c >= n) break;
    std::size_t m = c;
    const std::size_t end = std::min(c + 4, n);
    for (std::size_t k = c + 1; k < end; ++k) {
      if (h[k] < h[m]) m = k;
    }
    if (h[m] >= v) break;
    h[i] = h[m];
    i = m;
  }
  h[i] = v;
}
inline void heap_push(std::vector<std::uint64_t>& h, std::uint64_t v) {
  std::size_t i = h.size();
  h.push_back(v);
  while (i > 0) {
    const std::size_t parent = (i - 1) / 4;
    if (h[parent] <= v) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = v;
}
inline std::uint64_t heap_pop(std::vector<std::uint64_t>& h) noexcept {
  const std::uint64_t top = h[0];
  h[0] = h.back();
  h.pop_back();
  if (!h.empty()) heap_sift_down(h.data(), h.size(), 0);
  return top;
}

}  // namespace

struct TokRef {
  std::uint32_t off = kNone;  // into the arena; kNone where the rank is unused
  std::uint32_t len = 0;
};

struct Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
};

struct Bpe::Impl {
  // `full` is the pattern with the Unicode patch (exact on any text); `fast` the pattern as
  // given, exact on text without any of kPatchedRanges (nearly all text), and faster.
  Regex full, fast;
  std::string arena;          // token bytes, back to back
  std::vector<TokRef> toks;   // per rank
  std::vector<Slot> slots;    // open addressing, load <= 1/2
  std::uint64_t mask = 0;
  std::size_t max_len = 0;
  std::uint32_t byte_rank[256];
  std::vector<std::uint32_t> pair_rank;  // 65536 entries: rank of each 2-byte string

  ~Impl() {
    pcre2_code_free(full.code);
    pcre2_code_free(fast.code);
  }

  bool same(std::uint32_t r, const unsigned char* p, std::size_t n) const noexcept {
    const TokRef t = toks[r];
    return t.len == n && std::memcmp(arena.data() + t.off, p, n) == 0;
  }

  std::uint32_t lookup(const unsigned char* p, std::size_t n) const noexcept {
    if (n > max_len) return kNone;
    if (n == 1) return byte_rank[p[0]];
    if (n == 2) return pair_rank[(std::size_t{p[0]} << 8) | p[1]];
    const std::uint64_t h = hash_bytes(p, n);
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::uint64_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.rank1 == 0) return kNone;
      if (s.tag == tag && same(s.rank1 - 1, p, n)) return s.rank1 - 1;
    }
  }

  // Inserts; false if the bytes are already present (duplicate token).
  bool insert(std::uint32_t rank, std::uint32_t& existing) {
    const auto* p = reinterpret_cast<const unsigned char*>(arena.data() + toks[rank].off);
    const std::size_t n = toks[rank].len;
    const std::uint64_t h = hash_bytes(p, n);
    const auto tag = static_cast<std::uint32_t>(h >> 32);
    for (std::uint64_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.rank1 == 0) {
        s.tag = tag;
        s.rank1 = rank + 1;
        return true;
      }
      if (s.tag == tag && same(s.rank1 - 1, p, n)) {
        existing = s.rank1 - 1;
        return false;
      }
    }
  }

  // Merges one piece; calls emit(rank) per token in order. Returns the number of tokens.
  template <bool kIds, class Emit>
  std::size_t merge(const unsigned char* p, std::size_t n, Emit&& emit) const;
};

template <bool kIds, class Emit>
std::size_t Bpe::Impl::merge(const unsigned char* p, std::size_t n, Emit&& emit) const {
  if (n == 0) return 0;
  if (const std::uint32_t whole = lookup(p, n); whole != kNone) {
    if constexpr (kIds) emit(whole);
    return 1;
  }
  if (n <= kSmallPiece) {
    // tiktoken's scan: start[i] is where part i begins, pr[i] the rank of part i joined
    // with part i+1, tok[i] the rank of part i.
    std::uint32_t start[kSmallPiece + 1];
    std::uint32_t pr[kSmallPiece];
    std::uint32_t tok[kSmallPiece];
    std::size_t m = n;
    for (std::size_t i = 0; i < n; ++i) {
      start[i] = static_cast<std::uint32_t>(i);
      pr[i] = i + 1 < n ? pair_rank[(std::size_t{p[i]} << 8) | p[i + 1]] : kNone;
      if constexpr (kIds) tok[i] = byte_rank[p[i]];
    }
    start[n] = static_cast<std::uint32_t>(n);
    for (;;) {
      std::uint32_t best = kNone;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < m; ++i) {
        if (pr[i] < best) {
          best = pr[i];
          at = i;
        }
      }
      if (best == kNone) break;
      if constexpr (kIds) tok[at] = best;
      // Part at+1 joins part at.
      for (std::size_t i = at + 1; i + 1 < m; ++i) {
        start[i] = start[i + 1];
        pr[i] = pr[i + 1];
        if constexpr (kIds) tok[i] = tok[i + 1];
      }
      start[m - 1] = start[m];
      --m;
      pr[at] = at + 1 < m ? lookup(p + start[at], start[at + 2] - start[at]) : kNone;
      if (at > 0) pr[at - 1] = lookup(p + start[at - 1], start[at + 1] - start[at - 1]);
    }
    if constexpr (kIds) {
      for (std::size_t i = 0; i < m; ++i) emit(tok[i]);
    }
    return m;
  }

  // Long piece: parts form a linked list keyed by their first byte; a min-heap of
  // (pair rank, position) gives the same order as the scan (lowest rank, leftmost first).
  if (n >= kNone) {  // positions are 32-bit; a 4 GiB piece is not text: count it as bytes
    if constexpr (kIds) {
      for (std::size_t i = 0; i < n; ++i) emit(byte_rank[p[i]]);
    }
    return n;
  }
  Scratch& s = scratch();
  const auto N = static_cast<std::uint32_t>(n);
  s.next.resize(n);
  s.prev.resize(n);
  s.pair.resize(n);
  if constexpr (kIds) s.tok.resize(n);
  s.heap.clear();
  constexpr std::uint32_t dead = kNone;
  for (std::uint32_t i = 0; i < N; ++i) {
    s.next[i] = i + 1;
    s.prev[i] = i == 0 ? kNone : i - 1;
    s.pair[i] = i + 1 < N ? pair_rank[(std::size_t{p[i]} << 8) | p[i + 1]] : kNone;
    if constexpr (kIds) s.tok[i] = byte_rank[p[i]];
    if (s.pair[i] != kNone) s.heap.push_back((std::uint64_t{s.pair[i]} << 32) | i);
  }
  for (std::size_t k = s.heap.size() / 4 + 1; k-- > 0;) {
    if (k < s.heap.size()) heap_sift_down(s.heap.data(), s.heap.size(), k);
  }
  std::size_t parts = n;
  while (!s.heap.empty()) {
    const std::uint64_t top = heap_pop(s.heap);
    const auto rank = static_cast<std::uint32_t>(top >> 32);
    const auto i = static_cast<std::uint32_t>(top);
    // Stale entry: the part is gone, or its pair changed (a longer span has another rank).
    if (s.next[i] == dead || s.pair[i] != rank) continue;
    const std::uint32_t j = s.next[i];
    const std::uint32_t k = s.next[j];
    s.next[j] = dead;
    s.next[i] = k;
    if (k < N) s.prev[k] = i;
    --parts;
    if constexpr (kIds) s.tok[i] = rank;
    s.pair[i] = k < N ? lookup(p + i, s.next[k] - i) : kNone;
    if (s.pair[i] != kNone) heap_push(s.heap, (std::uint64_t{s.pair[i]} << 32) | i);
    if (const std::uint32_t h = s.prev[i]; h != kNone) {
      s.pair[h] = lookup(p + h, k - h);
      if (s.pair[h] != kNone) heap_push(s.heap, (std::uint64_t{s.pair[h]} << 32) | h);
    }
  }
  if constexpr (kIds) {
    for (std::uint32_t i = 0; i < N; i = s.next[i]) emit(s.tok[i]);
  }
  s.trim();
  return parts;
}

Bpe::~Bpe() = default;

template <class Sink>
void Bpe::run(std::string_view text, Sink& sink) const {
  if (text.empty()) return;
  const Impl& im = *impl_;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const std::size_t n = text.size();
  const Regex& re = im.fast.code && !touches_patch(subject, n) ? im.fast : im.full;
  Scratch& s = scratch();
  std::size_t pos = 0;
  while (pos < n) {
    const int rc = re.jit ? pcre2_jit_match(re.code, subject, n, pos, 0, s.md, s.mctx)
                          : pcre2_match(re.code, subject, n, pos, 0, s.md, s.mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Not expected with these patterns (no recursion, no match limit reached); the
      // rest is still counted, as byte-level pieces of at most 64 bytes.
      while (pos < n) {
        const std::size_t len = std::min<std::size_t>(64, n - pos);
        sink(subject + pos, len);
        pos += len;
      }
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const std::size_t b = ov[0], e = ov[1];
    // Bytes the pattern skipped can only be invalid UTF-8: a piece of their own.
    if (b > pos) sink(subject + pos, b - pos);
    if (e <= b) {  // an empty match (no branch allows one): step over a byte
      sink(subject + b, 1);
      pos = b + 1;
      continue;
    }
    sink(subject + b, e - b);
    pos = e;
  }
  if (pos < n) sink(subject + pos, n - pos);
}

std::vector<std::uint32_t> Bpe::encode(std::string_view text) const {
  std::vector<std::uint32_t> out;
  out.reserve(text.size() / 4 + 1);
  auto sink = [&](const unsigned char* p, std::size_t len) {
    impl_->merge<true>(p, len, [&](std::uint32_t r) { out.push_back(r); });
  };
  run(text, sink);
  return out;
}

std::size_t Bpe::count(std::string_view text) const {
  std::size_t total = 0;
  auto sink = [&](const unsigned char* p, std::size_t len) {
    total += impl_->merge<false>(p, len, [](std::uint32_t) {});
  };
  run(text, sink);
  return total;
}

std::string Bpe::decode(std::span<const std::uint32_t> ids) const {
  std::string out;
  for (const std::uint32_t id : ids) {
    if (id < impl_->toks.size() && impl_->toks[id].off != kNone)
      out.append(impl_->arena, impl_->toks[id].off, impl_->toks[id].len);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Loading

namespace {

bool read_file(const std::string& path, std::string& out, std::string& error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  out.clear();
  char buf[1 << 16];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) {
    error = path + ": read error";
    return false;
  }
  return true;
}

struct RankEntry {
  std::uint32_t rank;
  std::uint32_t off;
  std::uint32_t len;
};

// Lines of "<base64> <rank>" (tiktoken files) or "! <first rank> <base64> <base64> ..."
// (the tiktoken npm package: consecutive ranks from the first). `where` prefixes errors.
bool parse_ranks(std::string_view text, std::string_view where, std::string& arena,
                 std::vector<RankEntry>& entries, std::string& error) {
  std::string bytes;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(' ') == std::string_view::npos) continue;
    const auto fail = [&](const std::string& msg) {
      error = std::string(where) + (where.empty() ? "" : " ") + "line " + std::to_string(line_no) + ": " + msg;
      return false;
    };
    std::vector<std::string_view> fields;
    for (std::size_t i = 0; i < line.size();) {
      const std::size_t sp = line.find(' ', i);
      const std::size_t end = sp == std::string_view::npos ? line.size() : sp;
      if (end > i) fields.push_back(line.substr(i, end - i));
      i = end + 1;
    }
    std::uint32_t rank;
    std::size_t first_token;
    if (fields[0] == "!") {
      if (fields.size() < 2 || !parse_rank_number(fields[1], rank))
        return fail("expected '! <first rank> <base64 token>...'");
      first_token = 2;
    } else {
      if (fields.size() != 2 || !parse_rank_number(fields[1], rank))
        return fail("expected '<base64 token> <rank>'");
      first_token = 0;
      fields.pop_back();
    }
    for (std::size_t f = first_token; f < fields.size(); ++f, ++rank) {
      if (rank == kNone - 1) return fail("rank out of range");
      if (!base64_decode(fields[f], bytes) || bytes.empty())
        return fail("token " + std::to_string(f - first_token + 1) + " (rank " +
                    std::to_string(rank) + "): invalid base64 '" + std::string(fields[f]) + "'");
      if (arena.size() + bytes.size() >= kNone) return fail("rank data too large");
      entries.push_back({rank, static_cast<std::uint32_t>(arena.size()),
                         static_cast<std::uint32_t>(bytes.size())});
      arena += bytes;
    }
  }
  return true;
}

}  // namespace

std::shared_ptr<const Bpe> Bpe::load(const std::string& rank_file, Encoding encoding,
                                     std::string* error) {
  std::string contents, err;
  if (!read_file(rank_file, contents, err)) {
    if (error) *error = err;
    return nullptr;
  }
  return parse(contents, encoding, rank_file, error);
}

std::shared_ptr<const Bpe> Bpe::parse(std::string_view contents, Encoding encoding,
                                      std::string_view name, std::string* error) {
  const auto fail = [&](const std::string& msg) -> std::shared_ptr<const Bpe> {
    if (error) *error = std::string(name) + ": " + msg;
    return nullptr;
  };
  std::string pattern;
  std::string ranks_text;
  std::string_view ranks = contents;
  const std::size_t first = contents.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return fail("empty file");
  std::string where;
  if (contents[first] == '{') {
    Json j(contents);
    bool have_ranks = false;
    const auto bad = [&] { return fail(j.error()); };
    if (!j.eat('{')) return bad();
    if (!j.peek('}')) {
      for (;;) {
        std::string key;
        if (!j.string(key)) return bad();
        if (!j.eat(':')) return j.fail("expected ':'"), bad();
        if (key == "pat_str") {
          if (!j.string(pattern)) return bad();
        } else if (key == "bpe_ranks") {
          if (!j.string(ranks_text)) return bad();
          have_ranks = true;
        } else if (key == "special_tokens") {
          // Checked for shape only: special tokens count as plain text (docs/tokenizer.md).
          if (!j.eat('{')) return j.fail("special_tokens: expected an object"), bad();
          if (!j.eat('}')) {
            for (;;) {
              std::string tok;
              std::int64_t id;
              if (!j.string(tok)) return bad();
              if (!j.eat(':')) return j.fail("expected ':'"), bad();
              if (!j.integer(id)) return bad();
              if (j.eat(',')) continue;
              if (j.eat('}')) break;
              return j.fail("expected ',' or '}'"), bad();
            }
          }
        } else if (!j.skip()) {
          return bad();
        }
        if (j.eat(',')) continue;
        if (j.peek('}')) break;
        return j.fail("expected ',' or '}'"), bad();
      }
    }
    if (!j.eat('}')) return j.fail("expected '}'"), bad();
    if (!j.at_end()) return j.fail("trailing data after the object"), bad();
    if (!have_ranks) return fail("no \"bpe_ranks\" member");
    ranks = ranks_text;
    where = "bpe_ranks";
  }
  if (pattern.empty())
    pattern = encoding == Encoding::o200k_base ? kO200kPattern : kCl100kPattern;

  auto impl = std::make_unique<Impl>();
  std::vector<RankEntry> entries;
  std::string err;
  if (!parse_ranks(ranks, where, impl->arena, entries, err)) return fail(err);
  if (entries.empty()) return fail("no ranks");

  std::uint32_t max_rank = 0;
  for (const auto& e : entries) max_rank = std::max(max_rank, e.rank);
  if (max_rank > 64u * 1024 * 1024) return fail("rank " + std::to_string(max_rank) + " too large");
  impl->toks.assign(std::size_t{max_rank} + 1, TokRef{});
  std::size_t cap = 16;
  while (cap < entries.size() * 2) cap <<= 1;
  impl->slots.assign(cap, Slot{});
  impl->mask = cap - 1;
  for (const auto& e : entries) {
    if (impl->toks[e.rank].off != kNone) return fail("rank " + std::to_string(e.rank) + " appears twice");
    impl->toks[e.rank] = {e.off, e.len};
    impl->max_len = std::max<std::size_t>(impl->max_len, e.len);
    std::uint32_t existing = 0;
    if (!impl->insert(e.rank, existing))
      return fail("rank " + std::to_string(e.rank) + " repeats the bytes of rank " +
                  std::to_string(existing));
  }
  // Byte-level BPE needs every single byte as a token; 1- and 2-byte strings get tables.
  impl->max_len = std::max<std::size_t>(impl->max_len, 2);
  for (int b = 0; b < 256; ++b) {
    impl->byte_rank[b] = kNone;
    const unsigned char c = static_cast<unsigned char>(b);
    std::uint32_t r = kNone;
    const std::uint64_t h = hash_bytes(&c, 1);
    for (std::uint64_t i = h & impl->mask; impl->slots[i].rank1 != 0; i = (i + 1) & impl->mask) {
      const std::uint32_t cand = impl->slots[i].rank1 - 1;
      if (impl->same(cand, &c, 1)) {
        r = cand;
        break;
      }
    }
    if (r == kNone) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return fail(std::string("no token for the single byte ") + hex +
                  " (byte-level BPE needs all 256)");
    }
    impl->byte_rank[b] = r;
  }
  impl->pair_rank.assign(65536, kNone);
  for (const auto& e : entries) {
    if (e.len == 2) {
      const auto* q = reinterpret_cast<const unsigned char*>(impl->arena.data() + e.off);
      impl->pair_rank[(std::size_t{q[0]} << 8) | q[1]] = e.rank;
    }
  }

  const auto compile = [](const std::string& pat, Regex& re, std::string& err) {
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    re.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, nullptr);
    if (!re.code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(errcode, msg, sizeof msg);
      err = "pattern does not compile at offset " + std::to_string(erroff) + ": " +
            reinterpret_cast<const char*>(msg);
      return false;
    }
    re.jit = pcre2_jit_compile(re.code, PCRE2_JIT_COMPLETE) == 0;
    return true;
  };
  if (!compile(pattern, impl->fast, err)) return fail(err);
  const std::string adapted = adapt_pattern(pattern);
  if (adapted != pattern && !compile(adapted, impl->full, err)) return fail(err);
  if (!impl->full.code) std::swap(impl->full, impl->fast);  // nothing to patch: one pattern

  std::shared_ptr<Bpe> bpe(new Bpe());
  bpe->encoding_ = encoding;
  bpe->rank_count_ = entries.size();
  bpe->pattern_ = std::move(pattern);
  bpe->impl_ = std::move(impl);
  return bpe;
}

}  // namespace sluice::tokenizer
