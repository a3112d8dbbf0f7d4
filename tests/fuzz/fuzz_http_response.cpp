// The upstream response as the client reads it (src/http/client.cpp): Beast's
// response_parser<buffer_body> (header limit 64 KiB, no body limit: callers bound it),
// interim 1xx heads skipped with a fresh parser (101 refused), then the de-chunked body
// read piece by piece into a 4 KiB buffer. The socket hands over the input in reads of a
// size taken from it.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>

#include "fuzz_util.hpp"

namespace bhttp = boost::beast::http;
using Parser = bhttp::response_parser<bhttp::buffer_body>;
using boost::beast::error_code;

namespace {

struct Conn {
  std::string_view src;
  std::size_t pos = 0;
  std::size_t step = 1;
  boost::beast::flat_buffer buffer;

  bool read_more() {
    if (pos == src.size()) return false;
    const std::size_t n = std::min(step, src.size() - pos);
    auto b = buffer.prepare(n);
    std::memcpy(b.data(), src.data() + pos, n);
    buffer.commit(n);
    pos += n;
    return true;
  }
};

std::unique_ptr<Parser> make_parser() {
  auto p = std::make_unique<Parser>();
  p->header_limit(64 * 1024);
  p->body_limit(std::numeric_limits<std::uint64_t>::max());
  return p;
}

// What http::async_read_some does: parse what is buffered, read when the parser needs more.
error_code read_some(Conn& c, Parser& p) {
  error_code ec;
  bool need_more = c.buffer.size() == 0;
  for (int guard = 0; guard < 1 << 20; ++guard) {
    if (need_more) {
      if (!c.read_more()) {
        if (p.got_some()) {
          p.put_eof(ec);
          return ec;
        }
        return bhttp::error::end_of_stream;
      }
    }
    const auto used = p.put(c.buffer.data(), ec);
    c.buffer.consume(used);
    if (ec == bhttp::error::need_more) {
      ec = {};
      need_more = true;
      continue;
    }
    return ec;
  }
  sluice::fuzz::fail("read_some made no progress", {});
}

error_code read_head(Conn& c, Parser& p) {
  for (int guard = 0; guard < 1 << 20; ++guard) {
    if (p.is_header_done()) return {};
    auto ec = read_some(c, p);
    if (ec == bhttp::error::need_buffer) ec = {};  // the head is done; the body waits for a buffer
    if (ec) return ec;
  }
  sluice::fuzz::fail("read_head made no progress", {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sluice::fuzz::Input in(data, size);
  Conn c;
  c.step = 1 + in.u16() % 4096;
  c.src = in.rest();

  auto parser = make_parser();
  error_code ec = read_head(c, *parser);
  while (!ec && parser->get().result_int() >= 100 && parser->get().result_int() < 200) {
    if (parser->get().result_int() == 101) return 0;
    parser = make_parser();
    ec = read_head(c, *parser);
  }
  if (ec) return 0;
  const auto& m = parser->get();
  volatile std::size_t sink = m[bhttp::field::content_type].size() + m["retry-after"].size();
  (void)sink;

  char buf[4096];
  std::uint64_t total = 0;
  for (int guard = 0; !parser->is_done(); ++guard) {
    if (guard > 1 << 20) sluice::fuzz::fail("body read made no progress", {});
    auto& body = parser->get().body();
    body.data = buf;
    body.size = sizeof buf;
    ec = read_some(c, *parser);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return 0;
    const std::size_t got = sizeof buf - parser->get().body().size;
    if (got > sizeof buf) sluice::fuzz::fail("piece larger than the buffer", {});
    total += got;
  }
  // 204 and 304 have no body whatever their Content-Length says (RFC 9112 §6.3).
  const int status = parser->get().result_int();
  if (auto cl = parser->content_length(); cl && !parser->chunked() && status != 204 && status != 304 && total != *cl) {
    sluice::fuzz::fail("body length differs from Content-Length", {});
  }
  volatile bool ka = parser->keep_alive();
  (void)ka;
  return 0;
}
