#include "http/client.hpp"

#include <sys/socket.h>

#include <array>
#include <limits>
#include <map>
#include <unordered_map>
#include <vector>

#include "http/beast.hpp"
#include "http/write_now.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using net::awaitable;
using tcp = net::ip::tcp;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

namespace {

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

using Clock = std::chrono::steady_clock;

// The deadline of a read on an upstream connection. Unlike the tcp_stream's own expiry
// (which closes the socket), it cancels the pending read only, so a wait can be broken off
// for a stream's heartbeat and resumed; a read that only reached its deadline closes the
// connection itself. Shared with the timer's handler, which may run after the read ended.
struct Waker {
  explicit Waker(const net::any_io_executor& ex) : timer(ex) {}
  net::steady_timer timer;
  net::cancellation_signal signal;
  std::uint64_t armed = 0;  // which wait the handler belongs to: a late one must not cancel the next read
  bool fired = false;
};

struct Conn {
  std::string pool_key;
  std::unique_ptr<PlainStream> plain;
  std::unique_ptr<TlsStream> tls;
  beast::flat_buffer buffer;
  Clock::time_point idle_since{};
  std::shared_ptr<Waker> waker;

  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*tls); }

  // One parser operation (`op(token)`, the token bound to the waker's cancellation) until
  // it completes or `deadline` passes; `quiet`, if given, is served on the way. Returns the
  // operation's error, or beast::error::timeout.
  template <class Op>
  awaitable<beast::error_code> timed(Clock::time_point deadline, Quiet* quiet, Op op) {
    if (!waker) waker = std::make_shared<Waker>(lowest().get_executor());
    for (;;) {
      const bool for_quiet = quiet && quiet->on_quiet && quiet->at < deadline;
      waker->fired = false;
      waker->timer.expires_at(for_quiet ? quiet->at : deadline);
      waker->timer.async_wait([w = waker, armed = ++waker->armed](const boost::system::error_code& ec) {
        if (ec || armed != w->armed) return;
        w->fired = true;
        w->signal.emit(net::cancellation_type::terminal);
      });
      auto [ec, n] = co_await op(net::bind_cancellation_slot(waker->signal.slot(), nothrow));
      const bool fired = waker->fired;
      waker->timer.cancel();
      // A timer that fired in the same turn as the operation completed has its handler
      // queued still: it must not emit into the slot, whose handler (the finished
      // operation's, which Asio leaves there) refers to this connection's socket, gone by
      // then if the connection was dropped.
      ++waker->armed;
      waker->signal.slot().clear();
      if (!fired || ec != net::error::operation_aborted) co_return ec;
      // The read was only interrupted: it consumed nothing (the parser and buffer hold
      // what they held), so it can go on.
      if (!for_quiet || Clock::now() >= deadline) co_return beast::error::timeout;
      if (!co_await quiet->on_quiet()) co_return net::error::operation_aborted;
    }
  }

  // An idle pooled connection the server has closed reads EOF without blocking; one with
  // bytes waiting is out of step with its server.
  bool looks_alive() {
    char c;
    auto fd = lowest().socket().native_handle();
    ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    return false;
  }
};

// Errors that say this process is out of something, not that the peer failed.
bool local_resource_error(const beast::error_code& ec) {
  return ec == net::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
         ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

ClientError make_error(const beast::error_code& ec, ClientErrc fallback, std::string_view what) {
  ClientErrc kind = fallback;
  if (local_resource_error(ec)) kind = ClientErrc::local_resources;
  else if (ec == beast::error::timeout) kind = ClientErrc::timeout;
  else if (ec == bhttp::error::body_limit || ec == bhttp::error::header_limit) kind = ClientErrc::too_large;
  else if (ec.category() == make_error_code(bhttp::error::end_of_stream).category() &&
           ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
    kind = ClientErrc::protocol;
  return ClientError{kind, std::string(what) + ": " + ec.message()};
}

class ClientImpl;

class ResponseImpl final : public ClientResponse {
 public:
  ResponseImpl(ClientImpl& owner, std::unique_ptr<Conn> c,
               std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>> p)
      : owner_(owner), conn_(std::move(c)), parser_(std::move(p)) {}
  ~ResponseImpl() override;

  int status() const override { return parser_->get().result_int(); }
  std::string_view header(std::string_view name) const override {
    const auto& m = parser_->get();
    auto it = m.find(name);
    if (it == m.end()) return {};
    auto v = it->value();
    return {v.data(), v.size()};
  }

  awaitable<Piece> read_some(std::chrono::milliseconds timeout, Quiet* quiet) override {
    return read_into(buf_, sizeof buf_, Clock::now() + timeout, quiet);
  }

  // Reads straight into the string it returns (no piece copied through buf_), growing it
  // as the body comes.
  awaitable<std::variant<std::string, ClientError>> read_all(std::size_t limit,
                                                             std::chrono::milliseconds timeout) override {
    // One byte past the limit is room enough to see the body exceed it.
    const std::size_t most = limit < std::numeric_limits<std::size_t>::max() ? limit + 1 : limit;
    std::string out;
    out.resize(std::min<std::size_t>(most, 1024));  // (zero-filled: kept small, doubled as needed)
    std::size_t used = 0;
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (Clock::now() >= deadline) {
        failed_ = true;
        co_return ClientError{ClientErrc::timeout, "reading upstream body: timed out"};
      }
      if (used == out.size()) out.resize(std::min(most, out.size() * 2));
      auto piece = co_await read_into(out.data() + used, out.size() - used, deadline, nullptr);
      if (auto* err = std::get_if<ClientError>(&piece)) co_return std::move(*err);
      const std::size_t got = std::get<std::string_view>(piece).size();
      if (got == 0) {
        out.resize(used);
        co_return out;
      }
      used += got;
      if (used > limit) {
        failed_ = true;
        co_return ClientError{ClientErrc::too_large, "upstream body exceeds " + std::to_string(limit) + " bytes"};
      }
    }
  }

  // Safe while a read is pending in another coroutine: the socket is closed (the read
  // completes with an error) but the stream object lives until this response does.
  void abort() override {
    failed_ = true;
    aborted_ = true;
    if (conn_) {
      beast::error_code ec;
      conn_->lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
      conn_->lowest().close();
    }
  }

 private:
  ClientImpl& owner_;
  std::unique_ptr<Conn> conn_;
  std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>> parser_;
  // The next piece of the body, read into [data, data + cap): a view of it (empty at the
  // end of the body) or the error.
  awaitable<Piece> read_into(char* data, std::size_t cap, Clock::time_point deadline, Quiet* quiet) {
    if (!conn_) co_return ClientError{ClientErrc::io, "connection closed"};
    if (failed_) {
      co_return ClientError{aborted_ ? ClientErrc::cancelled : ClientErrc::io,
                            aborted_ ? "exchange aborted" : "exchange failed"};
    }
    if (parser_->is_done()) co_return std::string_view{};
    for (;;) {
      auto& body = parser_->get().body();
      body.data = data;
      body.size = cap;
      Conn& c = *conn_;
      beast::error_code ec = co_await c.timed(deadline, quiet, [&c, this](auto token) {
        return c.plain ? bhttp::async_read_some(*c.plain, c.buffer, *parser_, token)
                       : bhttp::async_read_some(*c.tls, c.buffer, *parser_, token);
      });
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        failed_ = true;
        // Cancelled only when someone aborted the exchange (the client left, the drain):
        // an operation that failed on its own is the upstream's failure.
        if (aborted_ || (quiet && ec == net::error::operation_aborted)) {
          co_return ClientError{ClientErrc::cancelled, "reading upstream body: aborted"};
        }
        co_return make_error(ec, ClientErrc::io, "reading upstream body");
      }
      const std::size_t got = cap - parser_->get().body().size;
      if (got > 0) co_return std::string_view(data, got);
      if (parser_->is_done()) co_return std::string_view{};
    }
  }

  bool failed_ = false;
  bool aborted_ = false;  // abort() was called
  // A stream's pieces are read into this (SSE events are far smaller; a longer piece
  // comes in several reads). Kept small: one per open stream, held while it waits.
  char buf_[1024];
};

std::string format_head(const Target& t, const ClientRequest& req) {
  std::string h;
  h.reserve(192 + req.target.size());
  h += req.method;
  h += ' ';
  h += req.target;
  h += " HTTP/1.1\r\nHost: ";
  const bool v6 = t.host.find(':') != std::string::npos;
  if (v6) h += '[';
  h += t.host;
  if (v6) h += ']';
  if (t.port != (t.tls ? 443 : 80)) {
    h += ':';
    h += std::to_string(t.port);
  }
  h += "\r\nUser-Agent: sluice\r\nContent-Length: ";
  h += std::to_string(req.body.size());
  if (!req.content_type.empty()) {
    h += "\r\nContent-Type: ";
    h += req.content_type;
  }
  for (const auto& [k, v] : req.headers) {
    h += "\r\n";
    h += k;
    h += ": ";
    h += v;
  }
  h += "\r\n\r\n";
  return h;
}

constexpr auto kResolveTtl = std::chrono::seconds(30);

class ClientImpl final : public Client {
 public:
  ClientImpl(net::any_io_executor ex, int max_idle) : ex_(std::move(ex)), max_idle_(max_idle), resolver_(ex_) {}

  const ClientStats& stats() const override { return stats_; }

  void give_back(std::unique_ptr<Conn> c) {
    if (c->buffer.size() != 0) {
      // Bytes after the end of the answer: the server sent more than it framed. The next
      // request on this connection would read them as its answer.
      ++stats_.not_reused;
      return;
    }
    auto& idle = idle_[c->pool_key];
    if (static_cast<int>(idle.size()) >= max_idle_) return;  // closes it
    c->lowest().expires_never();
    c->idle_since = std::chrono::steady_clock::now();
    idle.push_back(std::move(c));
  }

  awaitable<Result> send(const Target& t, const ClientRequest& req, std::chrono::milliseconds connect_timeout,
                         std::chrono::milliseconds head_timeout, AbortHandle* abort, Quiet* quiet) override {
    // Connections made under different TLS trust settings are never shared.
    std::string key = t.tls ? "s:" + t.host + ":" + std::to_string(t.port) + (t.verify ? ":v:" : ":n:") + t.ca_file
                            : "p:" + t.host + ":" + std::to_string(t.port);
    // A pooled connection may have been closed by the server since; such a failure
    // before any response byte is retried once on a fresh connection.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::unique_ptr<Conn> conn;
      bool reused = false;
      if (attempt == 0) conn = take_idle(key);
      if (conn) {
        reused = true;
        ++stats_.reused;
      } else {
        auto r = co_await connect(t, key, connect_timeout);
        if (auto* e = std::get_if<ClientError>(&r)) co_return std::move(*e);
        conn = std::move(std::get<std::unique_ptr<Conn>>(r));
        ++stats_.connects;
      }
      if (abort) {
        if (abort->aborted()) co_return ClientError{ClientErrc::cancelled, "aborted"};
        Conn* c = conn.get();
        abort->bind([c] {
          beast::error_code ignored;
          c->lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
          c->lowest().close();
        });
      }
      struct Unbind {
        AbortHandle* a;
        ~Unbind() {
          if (a) a->unbind();
        }
      } unbind{abort};
      // The head is formatted directly and written with the body in one gathered write.
      std::string head = format_head(t, req);
      std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(req.body)};

      auto parser = make_parser();
      beast::error_code ec;
      conn->lowest().expires_after(head_timeout + connect_timeout);
      if (conn->plain) {
        ec = co_await detail::write_all(*conn->plain, bufs, head_timeout + connect_timeout);
      } else {
        std::tie(ec, std::ignore) = co_await net::async_write(*conn->tls, bufs, nothrow);
      }
      if (!ec) {
        conn->lowest().expires_never();  // the reads below have deadlines of their own
        const auto head_deadline = Clock::now() + head_timeout;
        ec = co_await read_head(*conn, *parser, head_deadline, quiet);
        // Interim responses (100 Continue, 103 Early Hints...) come before the real one
        // and are skipped: taking one for the answer would leave the answer unread on a
        // connection that goes back to the pool, for the next request to read.
        while (!ec && parser->get().result_int() >= 100 && parser->get().result_int() < 200) {
          if (parser->get().result_int() == 101) {
            ec = bhttp::error::bad_status;  // never asked for: not HTTP any more
            break;
          }
          ++stats_.interim_responses;
          parser = make_parser();
          ec = co_await read_head(*conn, *parser, head_deadline, quiet);
        }
      }
      // Cancelled only when the caller ended the wait (its AbortHandle, or its Quiet said
      // stop); an operation that failed on its own is the upstream's failure.
      if (ec && ((abort && abort->aborted()) || (quiet && ec == net::error::operation_aborted))) {
        co_return ClientError{ClientErrc::cancelled, "aborted"};
      }
      if (ec) {
        const bool stale = reused && conn->buffer.size() == 0 &&
                           (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
                            ec == net::error::connection_reset || ec == net::error::broken_pipe);
        if (stale) {
          ++stats_.stale_retries;
          continue;
        }
        co_return make_error(ec, ClientErrc::io, "upstream exchange");
      }
      co_return std::unique_ptr<ClientResponse>(
          std::make_unique<ResponseImpl>(*this, std::move(conn), std::move(parser)));
    }
    co_return ClientError{ClientErrc::io, "upstream closed the connection twice"};
  }

 private:
  using Parser = bhttp::response_parser<bhttp::buffer_body>;

  static std::unique_ptr<Parser> make_parser() {
    auto p = std::make_unique<Parser>();
    p->header_limit(64 * 1024);
    // The body is bounded by the caller (read_all limit, the stream's event size), not here.
    p->body_limit(std::numeric_limits<std::uint64_t>::max());
    return p;
  }

  static awaitable<beast::error_code> read_head(Conn& c, Parser& p, Clock::time_point deadline, Quiet* quiet) {
    return c.timed(deadline, quiet, [&c, &p](auto token) {
      return c.plain ? bhttp::async_read_header(*c.plain, c.buffer, p, token)
                     : bhttp::async_read_header(*c.tls, c.buffer, p, token);
    });
  }

  std::unique_ptr<Conn> take_idle(const std::string& key) {
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    auto& v = it->second;
    while (!v.empty()) {
      auto c = std::move(v.back());
      v.pop_back();
      // Every reuse is checked (one non-blocking peek): a connection the server closed is
      // dropped, and so is one on which bytes arrived while it was idle — never asked
      // for, they would be read as the next request's answer. A request that still meets
      // a closed connection is retried once on a fresh one (see send()).
      if (c->buffer.size() == 0 && c->looks_alive()) return c;
    }
    return nullptr;
  }

  ssl::context& tls_context(const Target& t) {
    std::string key = (t.verify ? "v:" : "n:") + t.ca_file;
    auto it = tls_.find(key);
    if (it != tls_.end()) return *it->second;
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    if (t.verify) {
      ctx->set_default_verify_paths();
      if (!t.ca_file.empty()) ctx->load_verify_file(t.ca_file);
      ctx->set_verify_mode(ssl::verify_peer);
    } else {
      ctx->set_verify_mode(ssl::verify_none);
    }
    auto& ref = *ctx;
    tls_.emplace(key, std::move(ctx));
    return ref;
  }

  // Addresses of a host: an IP literal needs no lookup; names are resolved (on Asio's
  // resolver thread) and cached for kResolveTtl, so a burst of new connections does not
  // queue behind one lookup each.
  awaitable<std::variant<std::vector<tcp::endpoint>, ClientError>> resolve(const Target& t) {
    boost::system::error_code aec;
    auto addr = net::ip::make_address(t.host, aec);
    if (!aec) co_return std::vector<tcp::endpoint>{tcp::endpoint(addr, t.port)};
    const std::string key = t.host + ":" + std::to_string(t.port);
    const auto now = std::chrono::steady_clock::now();
    if (auto it = resolved_.find(key); it != resolved_.end() && it->second.expires > now) {
      co_return it->second.endpoints;
    }
    auto [rec, results] = co_await resolver_.async_resolve(t.host, std::to_string(t.port), nothrow);
    if (rec) co_return make_error(rec, ClientErrc::connect_failed, "resolving " + t.host);
    std::vector<tcp::endpoint> eps;
    for (const auto& r : results) eps.push_back(r.endpoint());
    resolved_[key] = Resolved{eps, now + kResolveTtl};
    co_return eps;
  }

  awaitable<std::variant<std::unique_ptr<Conn>, ClientError>> connect(const Target& t, const std::string& key,
                                                                     std::chrono::milliseconds timeout) {
    auto conn = std::make_unique<Conn>();
    conn->pool_key = key;
    auto resolved = co_await resolve(t);
    if (auto* err = std::get_if<ClientError>(&resolved)) co_return std::move(*err);
    const auto& endpoints = std::get<std::vector<tcp::endpoint>>(resolved);
    if (t.tls) {
      ssl::context* ctx;
      try {
        ctx = &tls_context(t);
      } catch (const std::exception& e) {
        co_return ClientError{ClientErrc::connect_failed, std::string("TLS setup: ") + e.what()};
      }
      conn->tls = std::make_unique<TlsStream>(ex_, *ctx);
    } else {
      conn->plain = std::make_unique<PlainStream>(ex_);
    }
    auto& low = conn->lowest();
    low.expires_after(timeout);
    // Each address in turn, the socket opened here: when this process is out of
    // descriptors, opening it fails with EMFILE, which the range connect would report as
    // a cancelled operation (then read as the client leaving).
    beast::error_code cec = net::error::host_not_found;
    for (const auto& ep : endpoints) {
      beast::error_code oec;
      if (low.socket().is_open()) low.socket().close(oec);
      low.socket().open(ep.protocol(), oec);
      // Non-blocking before the connect: Asio then skips its own ioctl, and the direct
      // writes find it set (one ioctl per connection instead of two).
      if (!oec) low.socket().non_blocking(true, oec);
      if (oec) {
        cec = oec;
        if (local_resource_error(oec)) break;
        continue;
      }
      std::tie(cec) = co_await low.async_connect(ep, nothrow);
      if (!cec || cec == beast::error::timeout) break;
    }
    if (cec) {
      resolved_.erase(t.host + ":" + std::to_string(t.port));  // resolve again next time
      co_return make_error(cec, ClientErrc::connect_failed, "connecting to " + t.host + ":" + std::to_string(t.port));
    }
    low.socket().set_option(tcp::no_delay(true));
    if (conn->tls) {
      if (!SSL_set_tlsext_host_name(conn->tls->native_handle(), t.host.c_str())) {
        co_return ClientError{ClientErrc::connect_failed, "TLS: cannot set SNI"};
      }
      if (t.verify) conn->tls->set_verify_callback(ssl::host_name_verification(t.host));
      auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client, nothrow);
      if (hec) co_return make_error(hec, ClientErrc::connect_failed, "TLS handshake with " + t.host);
    }
    co_return std::move(conn);
  }

  net::any_io_executor ex_;
  int max_idle_;
  tcp::resolver resolver_;
  struct Resolved {
    std::vector<tcp::endpoint> endpoints;
    std::chrono::steady_clock::time_point expires;
  };
  std::unordered_map<std::string, Resolved> resolved_;
  ClientStats stats_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<Conn>>> idle_;
  std::map<std::string, std::unique_ptr<ssl::context>> tls_;
};

ResponseImpl::~ResponseImpl() {
  if (conn_ && !failed_ && parser_->is_done() && parser_->keep_alive()) {
    owner_.give_back(std::move(conn_));
  } else {
    abort();
  }
}

}  // namespace

std::unique_ptr<Client> Client::create(net::any_io_executor ex, int max_idle_per_host) {
  return std::make_unique<ClientImpl>(std::move(ex), max_idle_per_host);
}

}  // namespace sluice::http
