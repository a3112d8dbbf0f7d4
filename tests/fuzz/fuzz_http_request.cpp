// The client request as the server reads it (src/http/server.cpp run_session): Beast's
// request_parser<string_body> with the server's header and body limits, the head first,
// then the framing/Host checks (http/request_checks.hpp), then the body parsed eagerly
// from what is buffered. The input arrives in two reads split at a position taken from it.
#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <cstring>

#include "fuzz_util.hpp"
#include "http/request_checks.hpp"
#include "http/server.hpp"

namespace bhttp = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sluice::fuzz::Input in(data, size);
  const std::size_t split = in.u16();
  const std::string_view bytes = in.rest();
  const sluice::http::ServerOptions opts;

  // Pipelined requests on one connection: each gets a fresh parser on what is left.
  boost::beast::flat_buffer buffer;
  std::size_t fed = std::min(split, bytes.size());
  auto append = [&](std::string_view s) {
    if (s.empty()) return;
    auto b = buffer.prepare(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    buffer.commit(s.size());
  };
  append(bytes.substr(0, fed));
  for (int requests = 0; requests < 8; ++requests) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
    parser.body_limit(opts.max_body_bytes);
    boost::beast::error_code ec;
    // The head (what async_read_header does): feed until the header is done.
    for (;;) {
      const auto used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == bhttp::error::need_more) {
        if (fed == bytes.size()) return 0;  // the client stopped sending
        append(bytes.substr(fed));
        fed = bytes.size();
        ec = {};
        continue;
      }
      if (ec || parser.is_header_done()) break;
      if (used == 0) {
        if (fed == bytes.size()) return 0;
        append(bytes.substr(fed));
        fed = bytes.size();
      }
    }
    if (ec) return 0;  // 400/413/431
    const auto& m = parser.get();
    const std::string refused = sluice::http::detail::refused_head(m);
    if (!refused.empty()) return 0;
    // The body.
    parser.eager(true);
    while (!parser.is_done()) {
      const auto used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == bhttp::error::need_more || (!ec && used == 0)) {
        if (fed == bytes.size()) {
          parser.put_eof(ec);
          if (ec) return 0;
          break;
        }
        append(bytes.substr(fed));
        fed = bytes.size();
        ec = {};
        continue;
      }
      if (ec) return 0;
    }
    if (!parser.is_done()) return 0;
    // What the handler reads (RequestImpl).
    const auto& msg = parser.get();
    volatile std::size_t sink = msg.method_string().size() + msg.target().size() + msg.body().size();
    sink = sink + msg[bhttp::field::content_type].size() + msg["authorization"].size();
    if (msg.body().size() > opts.max_body_bytes) sluice::fuzz::fail("body over the limit", {});
    if (!msg.keep_alive()) return 0;
    if (buffer.size() == 0 && fed == bytes.size()) return 0;
  }
  return 0;
}
