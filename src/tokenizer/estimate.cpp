// The fallback estimator: one pass that splits text roughly the way the encodings'
// pre-tokenizer does (words, digit groups, punctuation runs, whitespace runs, CJK and
// other scripts) and weights each kind with a figure fitted against the real BPE.
#include "tokenizer/estimate_features.hpp"

#include <cmath>
#include <iterator>

namespace sluice::tokenizer {
namespace detail {

// clang-format off
// Fitted by `bench/tokenizer_error.sh --calibrate` on the calibration corpus of
// docs/tokenizer.md (text of the Debian system, not the corpus the error is measured on);
// digit groups, invalid bytes and four-byte code points are fixed, not fitted. Order as in
// enum Feature.
constexpr double kCl100kWeights[] =
    {0.932, 0.07551, 0.04417, 0.06916, 0.4246, 1, 1.018, 0.01948, 0.08089, 0.9454, 1.107, 0, 1.13, 0.9188, 1.109, 0.7864, 1.803, 0.4251, 0.723, 1.12, 0, 0.9216, 2.859, 1};
constexpr double kO200kWeights[] =
    {0.8944, 0.09654, 0.008063, 0.07478, 0.4639, 1, 1.033, 0.02197, 0, 0.9987, 1.11, 0, 0.8118, 0.6218, 0.707, 0.9298, 0.9074, 0.19, 0.2157, 0.8386, 0, 0.2668, 2.641, 1};
// clang-format on
static_assert(std::size(kCl100kWeights) == kFeatureCount && std::size(kO200kWeights) == kFeatureCount);

const double* weights(Encoding encoding) noexcept {
  return encoding == Encoding::o200k_base ? kO200kWeights : kCl100kWeights;
}

namespace {

inline bool is_alpha(unsigned char b) noexcept { return ((b | 0x20) >= 'a' && (b | 0x20) <= 'z'); }
inline bool is_digit(unsigned char b) noexcept { return b >= '0' && b <= '9'; }
inline bool is_hspace(unsigned char b) noexcept { return b == ' ' || b == '\t' || b == '\v' || b == '\f'; }
inline bool is_newline(unsigned char b) noexcept { return b == '\n' || b == '\r'; }

// Decodes one UTF-8 sequence at s[i]; 0 when it is not valid UTF-8.
inline std::size_t decode(const unsigned char* s, std::size_t n, std::size_t i, std::uint32_t& cp) noexcept {
  const unsigned char b = s[i];
  std::size_t len;
  std::uint32_t min;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
    cp = b & 0x1F;
    min = 0x80;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    cp = b & 0x0F;
    min = 0x800;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    cp = b & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const unsigned char c = s[i + k];
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// The feature of a non-ASCII code point, and whether it continues a word like a letter.
inline Feature classify(std::uint32_t cp, bool& letter) noexcept {
  letter = false;
  if (cp < 0x800) {
    if (cp < 0x250) {
      letter = cp >= 0xC0 && cp != 0xD7 && cp != 0xF7;
      return kLatinExt;
    }
    letter = true;
    return (cp >= 0x370 && cp < 0x530) ? kCyrGreek : kOther2;
  }
  if ((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
      (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x20000 && cp <= 0x3FFFF))
    return kHan;
  if ((cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x31F0 && cp <= 0x31FF)) return kKana;
  if ((cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x3130 && cp <= 0x318F))
    return kHangul;
  if ((cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF00 && cp <= 0xFFEF)) return kCjkPunct;
  if (cp >= 0x10000) return kFour;
  if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xFE00 && cp <= 0xFE0F))
    return kSym3;
  letter = true;
  return kOther3;
}

inline bool letter_at(const unsigned char* s, std::size_t n, std::size_t i) noexcept {
  if (i >= n) return false;
  if (s[i] < 0x80) return is_alpha(s[i]);
  std::uint32_t cp;
  if (decode(s, n, i, cp) == 0) return false;
  bool letter;
  const Feature f = classify(cp, letter);
  return letter || f == kHan || f == kKana || f == kHangul;
}

}  // namespace

void estimate_features(std::string_view text, std::size_t* f) noexcept {
  for (int k = 0; k < kFeatureCount; ++k) f[k] = 0;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  // Current word: ASCII letters in its current segment; whether the last letter was lower.
  bool in_word = false, prev_lower = false;
  std::size_t seg = 0, seg_upper = 0;
  std::uint32_t prev_cp = 0;
  const auto close_segment = [&] {
    if (seg > 4) f[kLong4] += seg - 4;
    if (seg > 8) f[kLong8] += seg - 8;
    if (seg >= 2 && seg_upper == seg) f[kCaps] += seg - 1;
    seg = 0;
    seg_upper = 0;
  };
  const auto end_word = [&] {
    close_segment();
    in_word = false;
    prev_lower = false;
  };
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    if (b < 0x80) prev_cp = b;
    if (is_alpha(b)) {
      const bool upper = b <= 'Z';
      if (!in_word) {
        ++f[kWords];
        in_word = true;
      } else if (upper && prev_lower) {  // camelCase: the BPE splits there too, mostly
        close_segment();
        ++f[kWords];
      }
      ++seg;
      seg_upper += upper;
      prev_lower = !upper;
      ++i;
      continue;
    }
    if (b >= 0x80) {
      std::uint32_t cp;
      const std::size_t len = decode(s, n, i, cp);
      if (len == 0) {
        end_word();
        ++f[kInvalid];
        ++i;
        continue;
      }
      bool letter;
      const Feature feat = classify(cp, letter);
      ++f[feat == kSym3 && cp == prev_cp ? kSymRepeat : feat];
      prev_cp = cp;
      if (letter) {
        if (!in_word) {
          ++f[kWords];
          in_word = true;
        }
        prev_lower = false;
      } else {
        end_word();
      }
      i += len;
      continue;
    }
    end_word();
    if (is_digit(b)) {
      std::size_t j = i;
      while (j < n && is_digit(s[j])) ++j;
      f[kDigitGroups] += (j - i + 2) / 3;
      i = j;
      continue;
    }
    if (is_hspace(b)) {
      std::size_t j = i;
      while (j < n && is_hspace(s[j])) ++j;
      const std::size_t k = j - i;
      if (j == n) {
        ++f[kSpaceRuns];  // trailing whitespace
      } else if (is_newline(s[j])) {
        // joins the newline run
      } else if (is_digit(s[j])) {
        f[kSpaceRuns] += k >= 2 ? 2 : 1;  // a space never joins a number
      } else if (k >= 2) {
        ++f[kSpaceRuns];  // all but the last space; that one joins the next piece
      }
      i = j;
      continue;
    }
    if (is_newline(b)) {
      // \s*[\r\n]+ : whitespace up to the last newline of the run is one piece.
      std::size_t j = i, last = i, newlines = 0;
      while (j < n && (is_newline(s[j]) || is_hspace(s[j]))) {
        if (is_newline(s[j])) {
          last = j;
          ++newlines;
        }
        ++j;
      }
      ++f[kNewlineRuns];
      f[kNewlineExtra] += newlines - 1;
      i = last + 1;
      continue;
    }
    // ASCII punctuation and control characters.
    std::size_t j = i;
    while (j < n && s[j] < 0x80 && !is_alpha(s[j]) && !is_digit(s[j]) && !is_hspace(s[j]) && !is_newline(s[j]))
      ++j;
    std::size_t len = j - i;
    if (letter_at(s, n, j)) {  // [^\r\n\p{L}\p{N}]?\p{L}+ takes it
      --len;
      ++f[kGlued];
    }
    if (len > 0) {
      ++f[kPunctRuns];
      f[kPunctChars] += len;
      if (j < n && is_newline(s[j])) {
        ++f[kPunctNewline];
        while (j < n && is_newline(s[j])) ++j;
      }
    }
    i = j;
  }
  end_word();
}

}  // namespace detail

std::size_t estimate(std::string_view text, Encoding encoding) noexcept {
  if (text.empty()) return 0;
  std::size_t f[detail::kFeatureCount];
  detail::estimate_features(text, f);
  const double* w = detail::weights(encoding);
  double sum = 0;
  for (int k = 0; k < detail::kFeatureCount; ++k) sum += w[k] * static_cast<double>(f[k]);
  const auto r = static_cast<std::size_t>(std::llround(sum));
  return r == 0 ? 1 : r;
}

std::size_t estimate(std::string_view text) noexcept { return estimate(text, Encoding::cl100k_base); }

}  // namespace sluice::tokenizer
