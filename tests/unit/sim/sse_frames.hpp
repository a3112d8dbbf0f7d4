#pragma once
// Test helper: splits "event: x\ndata: {...}\n\n" / "data: {...}\n\n" frames. A trailing
// unterminated frame fails the calling test.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace sluice::sim::testing {

struct SseFrame {
  std::string event;
  std::string data;
};

inline std::vector<SseFrame> sse_frames(std::string_view s) {
  std::vector<SseFrame> out;
  while (!s.empty()) {
    auto end = s.find("\n\n");
    EXPECT_NE(end, std::string_view::npos) << "unterminated frame: " << s;
    if (end == std::string_view::npos) break;
    std::string_view f = s.substr(0, end);
    s.remove_prefix(end + 2);
    SseFrame fr;
    while (!f.empty()) {
      auto nl = f.find('\n');
      std::string_view line = f.substr(0, nl);
      if (line.starts_with("event: ")) fr.event = line.substr(7);
      if (line.starts_with("data: ")) fr.data = line.substr(6);
      if (nl == std::string_view::npos) break;
      f.remove_prefix(nl + 1);
    }
    out.push_back(fr);
  }
  return out;
}

}  // namespace sluice::sim::testing
