#pragma once
// Internal to src/http (includes Asio/Beast): write what a socket accepts right away.
//
// Most writes of a gateway fit in the socket's send buffer. An async write still arms the
// stream's timeout timer, queues an operation and resumes the coroutine through the loop;
// a plain non-blocking send does the same work in one syscall. Only what the socket did
// not take goes through the async path (with its timeout).
#include <type_traits>

#include "http/beast.hpp"
#include "http/conn_stream.hpp"

namespace sluice::http::detail {

// Sends as much of `bufs` as the socket takes without blocking. Returns the bytes sent;
// `ec` is set on a real error (would_block is not one).
template <class ConstBuffers>
std::size_t write_now(boost::asio::ip::tcp::socket& sock, const ConstBuffers& bufs,
                      boost::system::error_code& ec) {
  if (!sock.non_blocking()) sock.non_blocking(true, ec);
  if (ec) return 0;
  std::size_t n = sock.write_some(bufs, ec);
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
  return n;
}

// Writes all of `bufs`: first without blocking, the rest (if any) asynchronously within
// the stream's expiry. Returns the error, if any. `Stream` is a beast::tcp_stream or a
// client connection (ConnStream); over TLS everything goes through the TLS stream (whose
// records are written whole: Beast's flat_stream gathers small buffers into one).
template <class Stream, class ConstBuffers>
boost::asio::awaitable<boost::system::error_code> write_all(Stream& stream, const ConstBuffers& bufs,
                                                            std::chrono::steady_clock::duration timeout) {
  boost::system::error_code ec;
  if constexpr (std::is_same_v<Stream, ConnStream>) {
    if (stream.tls()) {
      stream.expires_after(timeout);
      auto [tec, written] = co_await boost::asio::async_write(*stream.tls(), bufs, boost::asio::as_tuple(boost::asio::use_awaitable));
      co_return tec;
    }
  }
  const std::size_t total = boost::asio::buffer_size(bufs);
  const std::size_t n = write_now(stream.socket(), bufs, ec);
  if (ec || n == total) co_return ec;
  boost::beast::buffers_suffix<ConstBuffers> rest(bufs);
  rest.consume(n);
  stream.expires_after(timeout);
  auto [wec, written] = co_await boost::asio::async_write(stream, rest, boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return wec;
}

}  // namespace sluice::http::detail
