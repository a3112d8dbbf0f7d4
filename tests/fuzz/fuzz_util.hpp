#pragma once
// Shared by the fuzz targets: input splitting and the checks on what translators write.
#include <boost/json/parse.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace sluice::fuzz {

// Reads the input front to back: control bytes first, then the payload.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : p_(reinterpret_cast<const char*>(data)), n_(size) {}
  std::uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return static_cast<std::uint8_t>(*p_++);
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(byte() | (byte() << 8)); }
  std::string_view rest() const { return {p_, n_}; }

 private:
  const char* p_;
  std::size_t n_;
};

// Fails the run (libFuzzer records the input) with a message.
[[noreturn]] inline void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "fuzz check failed: %s\n%.*s\n", what, static_cast<int>(detail.size() > 2000 ? 2000 : detail.size()),
               detail.data());
  std::abort();
}

inline void expect_json(std::string_view text, const char* what) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  (void)v;
  if (ec) fail(what, text);
}

// Every "data: " line of SSE output that the gateway wrote itself is JSON (or [DONE]).
inline void expect_sse_json(std::string_view out, const char* what) {
  std::size_t at = 0;
  while (at < out.size()) {
    std::size_t nl = out.find('\n', at);
    if (nl == std::string_view::npos) nl = out.size();
    std::string_view line = out.substr(at, nl - at);
    at = nl + 1;
    if (!line.starts_with("data: ")) continue;
    line.remove_prefix(6);
    if (line == "[DONE]") continue;
    expect_json(line, what);
  }
}

}  // namespace sluice::fuzz
