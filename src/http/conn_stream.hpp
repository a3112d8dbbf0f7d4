#pragma once
// Internal to src/http (includes Asio/Beast): a client connection's byte stream, plain TCP
// or TLS over it. Beast's HTTP reads and the server's writes take it as any stream; which
// layer serves an operation is chosen per call.
#include <chrono>
#include <memory>
#include <utility>

#include "http/beast.hpp"

namespace sluice::http::detail {

class ConnStream {
 public:
  using tcp_stream = boost::beast::tcp_stream;
  using tls_stream = boost::beast::ssl_stream<tcp_stream&>;
  using executor_type = tcp_stream::executor_type;

  explicit ConnStream(boost::asio::ip::tcp::socket s) : tcp_(std::move(s)) {}

  executor_type get_executor() noexcept { return tcp_.get_executor(); }
  tcp_stream& tcp() noexcept { return tcp_; }
  boost::asio::ip::tcp::socket& socket() noexcept { return tcp_.socket(); }
  // Null until start_tls().
  tls_stream* tls() noexcept { return tls_.get(); }
  void start_tls(boost::asio::ssl::context& ctx) { tls_ = std::make_unique<tls_stream>(tcp_, ctx); }

  // Bound the operations started from now on (TLS ones too: they run on the TCP stream).
  void expires_after(std::chrono::steady_clock::duration d) { tcp_.expires_after(d); }
  void expires_never() { tcp_.expires_never(); }
  void close() { tcp_.close(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    if (tls_) return tls_->async_read_some(b, std::forward<Token>(token));
    return tcp_.async_read_some(b, std::forward<Token>(token));
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    if (tls_) return tls_->async_write_some(b, std::forward<Token>(token));
    return tcp_.async_write_some(b, std::forward<Token>(token));
  }

 private:
  tcp_stream tcp_;
  std::unique_ptr<tls_stream> tls_;  // (declared after tcp_: destroyed before the stream it wraps)
};

}  // namespace sluice::http::detail
