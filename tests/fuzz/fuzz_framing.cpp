// SSE and NDJSON framing (src/llm/framing.hpp) fed arbitrary upstream bytes in pieces of
// a size taken from the input, with a small event bound so the limit path is reached too.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "llm/framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sluice::fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::size_t step = 1 + in.u16() % 512;
  const std::size_t max_bytes = (mode & 2) ? 64 : (1 << 20);
  const std::string_view bytes = in.rest();

  if (mode & 1) {
    sluice::llm::NdjsonParser p(max_bytes);
    std::size_t lines = 0;
    auto on_line = [&](std::string_view line) {
      if (line.empty()) sluice::fuzz::fail("empty NDJSON line delivered", {});
      if (line.find('\n') != std::string_view::npos) sluice::fuzz::fail("newline inside an NDJSON line", line);
      if (line.size() > max_bytes) sluice::fuzz::fail("NDJSON line over the bound", {});
      ++lines;
    };
    bool ok = true;
    for (std::size_t at = 0; ok && at < bytes.size(); at += step) ok = p.feed(bytes.substr(at, step), on_line);
    if (ok) p.finish(on_line);
  } else {
    sluice::llm::SseParser p(max_bytes);
    auto on_event = [&](const sluice::llm::SseEvent& e) {
      if (e.event.find('\n') != std::string_view::npos || e.id.find('\n') != std::string_view::npos) {
        sluice::fuzz::fail("newline inside an SSE field", e.event);
      }
      if (e.data.size() > max_bytes) sluice::fuzz::fail("SSE event over the bound", {});
    };
    bool ok = true;
    for (std::size_t at = 0; ok && at < bytes.size(); at += step) ok = p.feed(bytes.substr(at, step), on_event);
    (void)p.pending();
  }
  return 0;
}
