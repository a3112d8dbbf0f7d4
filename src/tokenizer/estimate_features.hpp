#pragma once
// Internals of estimate(), shared with the calibration in bench/tokenizer_error.cpp: the
// features one pass over the text counts, and the weight of each per encoding. The
// estimate is the weighted sum, rounded, and at least 1 for non-empty text.
#include <cstddef>
#include <string_view>

#include "tokenizer/tokenizer.hpp"

namespace sluice::tokenizer::detail {

enum Feature : int {
  kWords,         // runs of letters (ASCII or other alphabets), split at lower->Upper
  kLong4,         // ASCII letters beyond the 4th of each such run
  kLong8,         // ... beyond the 8th
  kCaps,          // letters after the first of an all-caps run ("HTTP", "KEY")
  kGlued,         // words glued to a punctuation char before them ("_case", "/asio", ".hpp")
  kDigitGroups,   // digit runs in groups of three: exactly one token each (weight fixed)
  kPunctRuns,     // runs of ASCII punctuation (the last char before a word joins the word)
  kPunctChars,    // chars in those runs
  kPunctNewline,  // newlines glued to a punctuation run ("{\n", ";\n")
  kSpaceRuns,     // runs of spaces/tabs that are not one space before a word
  kNewlineRuns,   // runs of whitespace holding newlines
  kNewlineExtra,  // newlines beyond the first in such a run
  kHan,           // CJK ideographs
  kKana,          // hiragana, katakana
  kHangul,        // hangul
  kCjkPunct,      // CJK and fullwidth punctuation
  kLatinExt,      // U+0080..U+024F: accented Latin, Latin-1 symbols
  kCyrGreek,      // U+0370..U+052F
  kOther2,        // other two-byte code points (Armenian, Hebrew, Arabic, ...)
  kSym3,          // U+2000..U+2BFF punctuation and symbols, private use, variation selectors
  kSymRepeat,     // ... repeating the code point before ("────")
  kOther3,        // other three-byte code points (Indic, Thai, ...)
  kFour,          // four-byte code points outside CJK (emoji, ...)
  kInvalid,       // bytes that are not UTF-8
  kFeatureCount
};

inline constexpr const char* kFeatureNames[kFeatureCount] = {
    "words", "long4", "long8", "caps", "glued", "digit_groups", "punct_runs", "punct_chars", "punct_newline",
    "space_runs", "newline_runs", "newline_extra", "han", "kana", "hangul", "cjk_punct",
    "latin_ext", "cyr_greek", "other2", "sym3", "sym_repeat", "other3", "four_byte", "invalid"};

// Counts the features of `text` into f[0..kFeatureCount) (overwritten). O(n), no allocation.
void estimate_features(std::string_view text, std::size_t* f) noexcept;

// The kFeatureCount weights of an encoding, fitted by `bench/tokenizer_error.sh --calibrate`
// (docs/tokenizer.md).
const double* weights(Encoding encoding) noexcept;

}  // namespace sluice::tokenizer::detail
