#pragma once
// Upstream HTTP/1.1 client with keep-alive pooling, one instance per worker thread (not
// thread-safe, no locks). Plain TCP or TLS (SNI, certificate and host name checks).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "http/server.hpp"

namespace sluice::http {

struct Target {
  bool tls = false;
  std::string host;
  std::uint16_t port = 80;
  bool verify = true;       // verify the certificate chain and host name
  std::string ca_file;      // extra CA bundle (PEM), optional
};

struct ClientRequest {
  std::string method = "POST";
  std::string target;       // path and query
  HeaderList headers;       // Host, Content-Length and Connection are set by the client
  std::string body;
  std::string content_type = "application/json";
};

enum class ClientErrc : std::uint8_t {
  connect_failed,   // resolve/connect/TLS handshake failed
  local_resources,  // this process could not open a socket (EMFILE, ENFILE, ENOBUFS, ENOMEM)
  timeout,          // a deadline passed (connect, head, read)
  io,               // the connection failed mid-exchange
  protocol,         // not valid HTTP
  too_large,        // body above the caller's limit
  cancelled,        // the caller cancelled (e.g. the client left)
};

struct ClientError {
  ClientErrc kind;
  std::string message;
};

// A wait on a silent upstream can be interrupted, without harm to the exchange, to do
// something else on the same loop (a stream's heartbeat to its client): when `at` comes
// while the wait goes on, `on_quiet` is awaited, then the wait resumes. `on_quiet` moves
// `at` on (or the wait would call it again at once); returning false ends the wait with a
// `cancelled` error.
struct Quiet {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
  std::function<boost::asio::awaitable<bool>()> on_quiet;
};

// An exchange whose response head has arrived; the body is read piece by piece.
class ClientResponse {
 public:
  virtual ~ClientResponse() = default;  // returns the connection to the pool if reusable
  virtual int status() const = 0;
  virtual std::string_view header(std::string_view name) const = 0;
  // Next piece of the (de-chunked) body; an empty view with no error means the end.
  // The view is valid until the next call. `quiet`, if given, is served while it waits.
  using Piece = std::variant<std::string_view, ClientError>;
  virtual boost::asio::awaitable<Piece> read_some(std::chrono::milliseconds timeout, Quiet* quiet = nullptr) = 0;
  // The whole body, bounded by `limit` bytes.
  virtual boost::asio::awaitable<std::variant<std::string, ClientError>> read_all(
      std::size_t limit, std::chrono::milliseconds timeout) = 0;
  // Closes the connection now; it will not be reused. (A connection goes back to the pool
  // only when its response was read to the end, framed cleanly, with no byte after it.)
  virtual void abort() = 0;
};

// Lets another party stop an exchange in flight (e.g. when the client leaves): abort()
// closes the connection the exchange is using, so its pending operation fails at once.
// Single-threaded, like the client.
class AbortHandle {
 public:
  void abort() {
    aborted_ = true;
    if (close_) close_();
  }
  bool aborted() const noexcept { return aborted_; }
  void bind(std::function<void()> close) { close_ = std::move(close); }
  void unbind() { close_ = nullptr; }

 private:
  std::function<void()> close_;
  bool aborted_ = false;
};

struct ClientStats {
  std::uint64_t connects = 0;
  std::uint64_t reused = 0;
  std::uint64_t stale_retries = 0;
  std::uint64_t interim_responses = 0;  // 1xx heads skipped (RFC 9110 section 15.2)
  std::uint64_t not_reused = 0;         // finished but left out of the pool (bytes after the answer)
};

class Client {
 public:
  virtual ~Client() = default;
  static std::unique_ptr<Client> create(boost::asio::any_io_executor ex, int max_idle_per_host);
  // Connects (or reuses a pooled connection), sends the request and waits for the
  // response head. `head_timeout` bounds the wait for the head after the request is sent.
  using Result = std::variant<std::unique_ptr<ClientResponse>, ClientError>;
  // `abort`, if given, can stop the exchange while it waits (see AbortHandle); the result
  // is then a `cancelled` error. `quiet`, if given, is served while the head is awaited.
  // Interim (1xx) responses are read and skipped: the result is the final head.
  virtual boost::asio::awaitable<Result> send(const Target& target, const ClientRequest& req,
                                              std::chrono::milliseconds connect_timeout,
                                              std::chrono::milliseconds head_timeout,
                                              AbortHandle* abort = nullptr, Quiet* quiet = nullptr) = 0;
  virtual const ClientStats& stats() const = 0;
};

}  // namespace sluice::http
