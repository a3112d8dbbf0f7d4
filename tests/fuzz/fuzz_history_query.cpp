// The /history and /history/stats query strings (history::parse_list_query,
// parse_stats_query), with the clock fixed by the input.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "history/history.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view qs = in.rest();
  std::string error;
  if (mode & 1) {
    auto q = history::parse_list_query(qs, error);
    if (!q && error.empty()) fuzz::fail("list query refused without an error", qs);
    if (q && (q->limit < 1 || q->limit > 1000)) fuzz::fail("list limit out of range", qs);
  } else {
    const std::int64_t now_ms = (mode & 2) ? 0 : 1'780'000'000'000 + (mode >> 2) * 3'600'000LL;
    auto q = history::parse_stats_query(qs, error, now_ms);
    if (!q && error.empty()) fuzz::fail("stats query refused without an error", qs);
    if (q && q->since_ms >= q->until_ms) fuzz::fail("stats window empty or reversed", qs);
  }
  return 0;
}
