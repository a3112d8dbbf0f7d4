#pragma once
// Test helpers for embeddings: cosine, norm, and an independent base64 -> float32 decoder
// (so the simulator's encoder is not checked against itself).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::sim::testing {

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double norm(const std::vector<float>& a) { return std::sqrt(dot(a, a)); }

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  return dot(a, b) / (norm(a) * norm(b));
}

// Standard base64 (with padding) of little-endian float32s; a malformed string fails the
// calling test and yields what was decoded so far.
inline std::vector<float> decode_float32_base64(std::string_view s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<unsigned char> bytes;
  EXPECT_EQ(s.size() % 4, 0u) << "base64 length";
  for (std::size_t i = 0; i + 4 <= s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (s[i + k] == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        v[k] = value(s[i + k]);
        EXPECT_GE(v[k], 0) << "bad base64 character at " << i + k;
        if (v[k] < 0) return {};
      }
    }
    const std::uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    bytes.push_back(static_cast<unsigned char>(n >> 16));
    if (pad < 2) bytes.push_back(static_cast<unsigned char>(n >> 8));
    if (pad < 1) bytes.push_back(static_cast<unsigned char>(n));
  }
  EXPECT_EQ(bytes.size() % 4, 0u) << "not a whole number of float32s";
  std::vector<float> out;
  for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    const std::uint32_t u = bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) |
                            (static_cast<std::uint32_t>(bytes[i + 3]) << 24);
    out.push_back(std::bit_cast<float>(u));
  }
  return out;
}

}  // namespace sluice::sim::testing
