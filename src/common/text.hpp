#pragma once
// Small string helpers used everywhere: JSON string escaping, case-insensitive compare,
// key masking, number formatting.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

// A transparent hash: unordered maps keyed by std::string found by std::string_view (no
// allocation per lookup), with std::equal_to<>.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Appends s as a quoted JSON string (RFC 8259 escaping).
void append_json_string(std::string& out, std::string_view s);
// Appends `,"name":"value"` (`name` is written as is: a literal).
inline void append_json_member(std::string& out, std::string_view name, std::string_view value) {
  out += ",\"";
  out += name;
  out += "\":";
  append_json_string(out, value);
}

bool iequals(std::string_view a, std::string_view b) noexcept;

// Appends the UTF-8 encoding of code point `cp` (up to U+10FFFF; not checked).
void append_utf8(std::string& out, std::uint32_t cp);

// The length (1-4) of the well-formed UTF-8 sequence that starts s[i], or 0 when none
// does: a stray continuation byte, a cut sequence, an overlong form, a surrogate, a code
// point above U+10FFFF. NUL counts as not well-formed (databases and C strings refuse it).
std::size_t utf8_sequence_at(std::string_view s, std::size_t i) noexcept;
// Every byte of s is part of a well-formed sequence (see above).
bool valid_utf8(std::string_view s) noexcept;
// Appends s with each byte that is not part of a well-formed sequence replaced by U+FFFD.
void append_clean_utf8(std::string& out, std::string_view s);

// "sk-prod-abcdef1a2b" -> "sk-prod-***1a2b": keeps a prefix up to the last '-' (at most
// 12 chars) and the last 4 chars; never more than half of the key is shown.
std::string mask_key(std::string_view key);

// Appends a Unix time in ms as UTC "2024-05-01T12:34:56.789Z" (unquoted). Years outside
// 0000..9999 (no request has such a time) are written as the number of ms instead.
void append_iso8601(std::string& out, std::int64_t unix_ms);

// Appends the standard base64 (RFC 4648, padded) of `bytes`.
void append_base64(std::string& out, std::string_view bytes);
// Lower-case hex of the bytes (a digest: "9f86d0...").
void append_hex(std::string& out, std::string_view bytes);

// FNV-1a 64 over `bytes`, from `h` (its offset basis by default), and MurmurHash3's
// fmix64 finaliser (spreads FNV's weak low bits): together a fast non-cryptographic hash.
inline constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ULL;
constexpr std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = kFnvBasis) noexcept {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}
constexpr std::uint64_t fmix64(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}
// Appends the base64 of `values` as float32 little-endian bytes, on any host (OpenAI's
// embeddings with encoding_format "base64").
void append_float32_base64(std::string& out, std::span<const float> values);

// Parses a base-10 unsigned integer; false on anything else.
bool parse_u64(std::string_view s, std::uint64_t& out) noexcept;
// %XX escapes decoded ('+' as a space too with plus_is_space, as in query strings); false
// on a broken escape.
bool percent_decode(std::string_view s, std::string& out, bool plus_is_space);

}  // namespace sluice
