#include "common/text.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>

namespace sluice {

namespace {
// 1 for bytes that need escaping in a JSON string, and for the bytes of non-ASCII
// sequences, which are checked.
constexpr auto kEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = true;
  for (int c = 0x80; c < 0x100; ++c) t[c] = true;
  t['"'] = true;
  t['\\'] = true;
  return t;
}();
}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  // Copy runs of plain bytes (and well-formed UTF-8) in bulk; escape the rest. A byte
  // that is not part of well-formed UTF-8 (a client's path, an upstream body cut short)
  // becomes U+FFFD: JSON text is UTF-8, and its readers refuse anything else.
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (!kEscape[c]) continue;
    if (c >= 0x80) {
      if (const std::size_t n = utf8_sequence_at(s, i); n > 0) {
        i += n - 1;  // part of the run
        continue;
      }
      out.append(s.data() + run, i - run);
      run = i + 1;
      out += "\xEF\xBF\xBD";
      continue;
    }
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xf]);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string mask_key(std::string_view key) {
  if (key.empty()) return {};
  const size_t tail = key.size() >= 12 ? 4 : 0;
  size_t prefix = 0;
  if (auto dash = key.rfind('-'); dash != std::string_view::npos && dash + 1 < key.size()) {
    prefix = std::min<size_t>(dash + 1, 12);
  }
  // Never reveal more than half of the key.
  while (prefix + tail > key.size() / 2 && prefix > 0) --prefix;
  std::string out(key.substr(0, prefix));
  out += "***";
  out += key.substr(key.size() - tail);
  return out;
}

bool parse_u64(std::string_view s, std::uint64_t& out) noexcept {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::size_t utf8_sequence_at(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  bool ok = n > 0 && c != 0 && i + n <= s.size() && !(n == 2 && c < 0xC2);
  for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  if (ok && n == 3) {  // no overlong forms, no surrogates
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
  }
  if (ok && n == 4) {
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
  }
  return ok ? n : 0;
}

bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_at(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_clean_utf8(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t n = utf8_sequence_at(s, i); n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Without printf or gmtime (printf cost ~3,500 instructions an event): the civil date
// from the day number (H. Hinnant's civil_from_days).
void append_iso8601(std::string& out, std::int64_t unix_ms) {
  std::int64_t days = unix_ms / 86'400'000, ms_of_day = unix_ms % 86'400'000;
  if (ms_of_day < 0) ms_of_day += 86'400'000, --days;
  const std::int64_t z = days + 719'468;
  const std::int64_t era = (z >= 0 ? z : z - 146'096) / 146'097;
  const std::int64_t doe = z - era * 146'097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36'524 - doe / 146'096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const std::int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t year = yoe + era * 400 + (month <= 2);
  if (year < 0 || year > 9999) {  // beyond four digits (no request has such a time): the number as it is
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, unix_ms);
    out.append(buf, r.ptr);
    return;
  }
  const auto secs = ms_of_day / 1000;
  const int fields[] = {static_cast<int>(year / 100), static_cast<int>(year % 100), static_cast<int>(month),
                        static_cast<int>(day), static_cast<int>(secs / 3600), static_cast<int>(secs / 60 % 60),
                        static_cast<int>(secs % 60)};
  char buf[] = "YYYY-MM-DDTHH:MM:SS.mmmZ";
  constexpr int at[] = {0, 2, 5, 8, 11, 14, 17};
  for (int i = 0; i < 7; ++i) {
    buf[at[i]] = static_cast<char>('0' + fields[i] / 10);
    buf[at[i] + 1] = static_cast<char>('0' + fields[i] % 10);
  }
  const int ms = static_cast<int>(ms_of_day % 1000);
  buf[20] = static_cast<char>('0' + ms / 100);
  buf[21] = static_cast<char>('0' + ms / 10 % 10);
  buf[22] = static_cast<char>('0' + ms % 10);
  out.append(buf, 24);
}


bool percent_decode(std::string_view s, std::string& out, bool plus_is_space) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return false;
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
    }
  }
  return true;
}

void append_hex(std::string& out, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + 2 * bytes.size());
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
}

void append_base64(std::string& out, std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.reserve(out.size() + (bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto byte = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    const std::uint32_t v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
}

void append_float32_base64(std::string& out, std::span<const float> values) {
  std::string bytes;
  bytes.reserve(values.size() * 4);
  for (const float f : values) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    for (int k = 0; k < 4; ++k) bytes += static_cast<char>((u >> (8 * k)) & 0xff);  // little-endian
  }
  append_base64(out, bytes);
}

}  // namespace sluice
