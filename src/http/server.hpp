#pragma once
// HTTP/1.1 server: one event loop per worker thread, each with its own SO_REUSEPORT
// listener. Beast stays inside server.cpp; handlers see only this interface.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/tls.hpp"

namespace sluice::http {

// Header lists. In a response, an entry with an empty name is a block of header lines
// written as is ("Name: value" lines joined with "\r\n", no trailing CRLF): several
// headers formatted into one string (the x-ratelimit-* set) cost one allocation. (Upstream
// requests, http::ClientRequest, take named entries only.)
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// A parsed request. Views stay valid until the handler returns.
class Request {
 public:
  virtual ~Request() = default;
  virtual std::string_view method() const = 0;
  virtual std::string_view target() const = 0;   // path + query
  virtual std::string_view body() const = 0;
  // Case-insensitive; empty when absent.
  virtual std::string_view header(std::string_view name) const = 0;
  // Every field line of `name`, joined with ", " (a list-valued header sent on several
  // lines, RFC 9110 5.3); the one line's value when there is one.
  virtual std::string header_list(std::string_view name) const { return std::string(header(name)); }
  std::string_view path() const;                  // target without the query
  // The connection's remote address ("10.0.0.1", "::1"; IPv4-mapped IPv6 as IPv4).
  virtual std::string_view peer() const { return {}; }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  HeaderList headers;
  std::string body;
};

// One request/response exchange on a client connection.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;
  virtual boost::asio::any_io_executor executor() const = 0;

  // A complete reply. Returns false when the client is gone.
  virtual boost::asio::awaitable<bool> reply(Response r) = 0;

  // A streamed reply (chunked transfer encoding). Begin once, then chunks. The head goes
  // out with the first chunk (or the end), in one write: begin_stream writes nothing, and
  // a client that left is seen by the write after it.
  virtual boost::asio::awaitable<bool> begin_stream(int status, std::string_view content_type,
                                                    const HeaderList& headers) = 0;
  virtual boost::asio::awaitable<bool> write_chunk(std::string_view data) = 0;
  virtual boost::asio::awaitable<bool> end_stream() = 0;

  // Completes when the client closes the connection (or it fails); supports
  // cancellation, so it can race the work it guards: `co_await (work() || gone())`.
  // Bytes that arrive meanwhile (a pipelined request) are kept for the next read.
  virtual boost::asio::awaitable<void> wait_client_gone() = 0;
  // True once wait_client_gone() or the watch below saw the client leave.
  virtual bool client_gone() const = 0;

  // A cheaper watch for a stretch of work that is not a coroutine race: calls `on_gone`
  // (once, on this loop) if the client closes the connection before unwatch_client().
  // It is armed a few milliseconds later (a request answered sooner costs no system call
  // for it), then peeks; bytes the client sends meanwhile (a pipelined request) are moved
  // into the connection's buffer for the next request, and the watch goes on (up to 64 KiB
  // of them). Call unwatch_client() before replying.
  virtual void watch_client(std::function<void()> on_gone) = 0;
  virtual void unwatch_client() = 0;

  // Bounds each later write that the socket does not take at once (default
  // ServerOptions::write_timeout): a client that takes nothing of a reply for this long is
  // dropped.
  virtual void set_write_timeout(std::chrono::milliseconds t) = 0;

  // Drops the connection at once, whatever was sent so far (the peer sees EOF/reset);
  // nothing more is written on it.
  virtual void abort() = 0;

  // True once a reply or a stream was begun (a stream's head goes out with its first
  // write): from then on nothing may be retried.
  virtual bool started() const = 0;
};

using Handler = std::function<boost::asio::awaitable<void>(Exchange&)>;

// Answer for requests the server rejects before a handler runs (413, 431, 400).
// Returns the response body for a status and a short message.
using LocalReplyFormatter = std::function<Response(int status, std::string_view message)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;        // 0 = pick a free port (all workers share it)
  int workers = 1;
  std::size_t max_header_bytes = 16 << 10;
  std::size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds read_timeout{30000};   // headers + body of one request
  std::chrono::milliseconds keep_alive{75000};     // idle between requests
  std::chrono::milliseconds write_timeout{30000};  // a write the client takes nothing of (Exchange::set_write_timeout)
  // A new connection that has not sent its first byte within this is closed (silently):
  // sockets that never speak cannot hold connection slots for a whole keep-alive period.
  std::chrono::milliseconds first_byte_timeout{10000};
  // Client connections open at once, counted over all workers (0 = no cap). At the cap a
  // new connection closes the oldest idle one (waiting for a request); when none is idle
  // it is answered 503 with `Connection: close`.
  std::size_t max_connections = 0;
  std::string server_name = "sluice";
  HeaderList extra_headers;      // added to every response (e.g. x-sluice-instance)
  LocalReplyFormatter local_reply;  // optional
  // Set: the listener speaks HTTPS only (make_tls_context). Limits and timeouts are the
  // same: the handshake counts as the first request's read (first_byte_timeout for its
  // first byte, read_timeout for the rest), and a connection is counted from its accept.
  std::shared_ptr<TlsContext> tls;
  // Share the port with a process already listening on it (SO_REUSEPORT: an in-place
  // upgrade). Without it, a port already served is refused at start.
  bool takeover = false;
  // Optional: at shutdown, run on each worker's loop once its last connection is gone and
  // before the loop stops (e.g. to flush what the worker queued for other systems). It
  // must bound its own time.
  std::function<boost::asio::awaitable<void>(int worker)> on_drained;
};

// Called once per worker; the handler it returns runs only on that worker's thread, so
// it may hold per-thread state (upstream pools, counters) without locks.
using HandlerFactory = std::function<Handler(int worker, boost::asio::any_io_executor ex)>;

class Server {
 public:
  virtual ~Server() = default;
  // Binds the listeners (throws std::system_error on failure) and starts the threads.
  static std::unique_ptr<Server> start(ServerOptions options, HandlerFactory factory);
  virtual std::uint16_t port() const = 0;
  // Thread-safe. The first phase of a shutdown: the listeners still accept and serve, but
  // every response from now on says `Connection: close`, so keep-alive clients reconnect
  // (through their load balancer, to another instance) instead of staying on this one.
  virtual void begin_drain() = 0;
  // Thread-safe. Stops accepting (connections already queued on the listeners are taken
  // and served first), closes idle connections, lets in-flight requests run for at most
  // `grace`, then stops the loops.
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
  // Blocks until every worker thread has exited.
  virtual void join() = 0;
  // True if shutdown had to stop a loop with requests still running (their coroutines
  // were abandoned; the process should exit without running destructors).
  virtual bool forced_stop() const = 0;
  // Thread-safe. For a TLS listener: connections accepted from now on use `tls` (a renewed
  // certificate); open ones keep the context they were accepted with. Ignored by a plain
  // listener (TLS is chosen at start).
  virtual void set_tls(std::shared_ptr<TlsContext> tls) = 0;
  // The context in force (null for a plain listener).
  virtual std::shared_ptr<TlsContext> tls() const = 0;

  // Client connections: open now, and since start the ones refused at the cap (or for
  // want of a file descriptor) and the idle ones closed to make room. Thread-safe.
  struct ConnectionStats {
    std::int64_t open = 0;
    std::uint64_t refused = 0;
    std::uint64_t evicted = 0;
    std::uint64_t tls_handshake_failures = 0;  // failed, timed out, or not TLS at all (answered 400)
  };
  virtual ConnectionStats connection_stats() const = 0;
};

}  // namespace sluice::http
