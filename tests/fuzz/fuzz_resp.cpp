// The Redis reply reader (store/resp.hpp: hiredis' RESP2 reader building RedisReply trees)
// on arbitrary server bytes, handed over in reads of a size taken from the input.
#include <cstdint>
#include <memory>

#include "fuzz_util.hpp"
#include "store/resp.hpp"

using namespace sluice;

namespace {

std::size_t count(const store::RedisReply& r, int depth) {
  if (depth > 16) fuzz::fail("reply nested deeper than RESP allows here", {});
  std::size_t n = 1;
  for (const auto& e : r.elements) n += count(e, depth + 1);
  if (r.type != store::RedisReply::Type::array && !r.elements.empty()) fuzz::fail("elements on a non-array", {});
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::size_t step = 1 + in.byte();
  const std::string_view bytes = in.rest();
  store::detail::RespReader reader;
  for (std::size_t at = 0; at < bytes.size(); at += step) {
    const auto piece = bytes.substr(at, step);
    if (!reader.feed(piece.data(), piece.size())) return 0;
    for (;;) {
      std::unique_ptr<store::RedisReply> reply;
      if (!reader.next(reply)) {
        (void)reader.error();
        return 0;
      }
      if (!reply) break;
      count(*reply, 0);
    }
  }
  return 0;
}
