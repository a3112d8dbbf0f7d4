#include "http/server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <deque>
#include <iostream>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/text.hpp"
#include "common/thread_name.hpp"
#include "http/beast.hpp"
#include "http/conn_stream.hpp"
#include "http/request_checks.hpp"
#include "http/tls_context.hpp"
#include "http/write_now.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using net::awaitable;
using net::use_awaitable;
using tcp = net::ip::tcp;
constexpr auto nothrow = net::as_tuple(use_awaitable);

std::string_view Request::path() const {
  auto t = target();
  auto q = t.find('?');
  return q == std::string_view::npos ? t : t.substr(0, q);
}

namespace {

class RequestImpl final : public Request {
 public:
  RequestImpl(const bhttp::request<bhttp::string_body>& m, std::string_view peer) : m_(m), peer_(peer) {}
  std::string_view peer() const override { return peer_; }
  std::string_view method() const override {
    auto v = m_.method_string();
    return {v.data(), v.size()};
  }
  std::string_view target() const override {
    auto v = m_.target();
    return {v.data(), v.size()};
  }
  std::string_view body() const override { return m_.body(); }
  std::string_view header(std::string_view name) const override {
    auto it = m_.find(name);
    if (it == m_.end()) return {};
    auto v = it->value();
    return {v.data(), v.size()};
  }
  std::string header_list(std::string_view name) const override {
    std::string out;
    for (auto [it, end] = m_.equal_range(name); it != end; ++it) {
      if (!out.empty()) out += ", ";
      out.append(it->value().data(), it->value().size());
    }
    return out;
  }

 private:
  const bhttp::request<bhttp::string_body>& m_;
  std::string_view peer_;
};

struct Worker;

// One client connection; lives inside its session coroutine's frame.
struct Session {
  Worker& worker;
  detail::ConnStream stream;
  std::shared_ptr<TlsContext> tls;  // the context of its handshake (TLS listeners)
  beast::flat_buffer buffer;
  bool idle = true;  // waiting for the next request (may be closed at shutdown)
  // Links in the worker's list of sessions waiting for a request's first byte (oldest
  // first), the ones closed first when the connection cap is reached.
  Session* idle_prev = nullptr;
  Session* idle_next = nullptr;
  bool in_idle_list = false;
  // No request read yet: a connection accepted just before (or while) the listeners
  // close is given a moment to send its request instead of being closed as idle.
  bool fresh = true;
  tcp::endpoint peer_ep;  // the remote end, as accept() gave it (no getpeername)
  std::string peer;  // its address, formatted at the first request

  Session(Worker& w, tcp::socket s, const tcp::endpoint& ep = {}) : worker(w), stream(std::move(s)), peer_ep(ep) {}
};

struct ServerImpl;
class ExchangeImpl;

// State of an Exchange::watch_client(), shared with its pending peek (which may complete
// after the exchange is gone, and then only sees `active == false`) and with the worker's
// list of watches not armed yet.
struct ClientWatch {
  net::cancellation_signal stop;
  std::function<void()> on_gone;
  ExchangeImpl* exchange = nullptr;  // valid while `active`
  bool active = true;
  bool armed = false;
  char peek = 0;
};

// How long a watch waits before its peek is armed (then at most twice this). Arming costs
// a receive that fails (no data yet) on every request; a request answered sooner never
// arms one, and a client leaving is noticed this much later at most, long before a model
// would have generated anything worth saving.
constexpr auto kWatchDelay = std::chrono::milliseconds(5);

struct Worker {
  ServerImpl& server;
  int index;
  net::io_context ioc{1};
  std::unique_ptr<tcp::acceptor> acceptor;
  Handler handler;
  std::unordered_set<Session*> sessions;
  bool draining = false;
  std::thread thread;
  // Sessions waiting for a request, oldest first (an intrusive list: no allocation).
  Session* idle_oldest = nullptr;
  Session* idle_newest = nullptr;
  // Read by other workers to find one with an idle session to close.
  std::atomic<int> idle_count{0};
  int refusing = 0;     // refused connections still being answered and closed
  int reserve_fd = -1;  // a spare descriptor, given up to accept (and close) when out of them
  // Client watches not armed yet, oldest first, and whether sweep_watches() is running.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<ClientWatch>>> unarmed_watches;
  bool sweeping_watches = false;

  Worker(ServerImpl& s, int i) : server(s), index(i) {}
  ~Worker() {
    if (reserve_fd >= 0) ::close(reserve_fd);
  }

  void idle_push(Session* s) {
    s->idle_prev = idle_newest;
    s->idle_next = nullptr;
    if (idle_newest) idle_newest->idle_next = s;
    else idle_oldest = s;
    idle_newest = s;
    s->in_idle_list = true;
    idle_count.fetch_add(1, std::memory_order_relaxed);
  }
  void idle_remove(Session* s) {
    if (!s->in_idle_list) return;
    if (s->idle_prev) s->idle_prev->idle_next = s->idle_next;
    else idle_oldest = s->idle_next;
    if (s->idle_next) s->idle_next->idle_prev = s->idle_prev;
    else idle_newest = s->idle_prev;
    s->idle_prev = s->idle_next = nullptr;
    s->in_idle_list = false;
    idle_count.fetch_sub(1, std::memory_order_relaxed);
  }
  // Closes the session that has waited longest for a request (its pending read sees EOF,
  // and the session ends). On this worker's thread only.
  bool evict_oldest_idle();
};

struct ServerImpl final : Server {
  ServerOptions opts;
  std::vector<std::unique_ptr<Worker>> workers;
  std::uint16_t bound_port = 0;
  std::once_flag shutdown_once;
  std::atomic<bool> hard_stopped{false};
  std::atomic<bool> closing_keep_alive{false};  // begin_drain(): every response says Connection: close
  // One count for all workers: SO_REUSEPORT spreads connections by a hash of their
  // addresses, not by load, so a per-worker share of the cap would refuse on one worker
  // while another has room; and the file descriptors it protects are the process's. It
  // costs one atomic add when a connection opens and one when it closes, none per request.
  std::atomic<std::int64_t> open_connections{0};
  std::atomic<std::uint64_t> refused_connections{0};
  std::atomic<std::uint64_t> evicted_connections{0};
  std::atomic<std::uint64_t> tls_failures{0};
  mutable std::mutex tls_mu;
  std::shared_ptr<TlsContext> tls_ctx;  // null: plain HTTP

  bool forced_stop() const override { return hard_stopped.load(); }
  ConnectionStats connection_stats() const override {
    return {open_connections.load(std::memory_order_relaxed), refused_connections.load(std::memory_order_relaxed),
            evicted_connections.load(std::memory_order_relaxed), tls_failures.load(std::memory_order_relaxed)};
  }
  void set_tls(std::shared_ptr<TlsContext> t) override {
    if (!t) return;
    std::lock_guard lock(tls_mu);
    if (tls_ctx) tls_ctx = std::move(t);
  }
  std::shared_ptr<TlsContext> tls() const override {
    std::lock_guard lock(tls_mu);
    return tls_ctx;
  }

  std::uint16_t port() const override { return bound_port; }
  void begin_drain() override { closing_keep_alive.store(true, std::memory_order_relaxed); }
  void shutdown(std::chrono::milliseconds grace) override;
  void join() override {
    for (auto& w : workers) {
      if (w->thread.joinable()) w->thread.join();
    }
  }
  ~ServerImpl() override {
    for (auto& w : workers) w->ioc.stop();
    join();
  }
};

void defer_watch(Worker& w, const std::shared_ptr<ClientWatch>& watch);

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(Session& s, const RequestImpl& req, bool keep_alive, bool http10, bool head_only)
      : write_timeout_(s.worker.server.opts.write_timeout),
        s_(s),
        req_(req),
        keep_alive_(keep_alive),
        http10_(http10),
        head_only_(head_only) {}

  const Request& request() const override { return req_; }
  net::any_io_executor executor() const override { return s_.stream.get_executor(); }
  bool started() const override { return started_; }
  bool finished() const { return finished_; }
  bool failed() const { return failed_; }
  bool keep_alive() const { return keep_alive_; }

  // Heads are formatted directly (one string, then one gathered write with the body):
  // Beast's generic serializer cost a measurable share of the CPU per request.
  awaitable<bool> reply(Response r) override {
    if (started_) co_return false;
    started_ = true;
    std::string head = format_head(r.status, r.content_type, r.headers, static_cast<std::int64_t>(r.body.size()));
    // A HEAD gets the head a GET would have (its Content-Length too), without the body.
    std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(r.body.data(), head_only_ ? 0 : r.body.size())};
    auto ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
    finished_ = !ec;
    failed_ = !!ec;
    co_return !ec;
  }

  // The head is kept until the first chunk (or the end) and written with it: one write,
  // one system call, instead of two.
  awaitable<bool> begin_stream(int status, std::string_view content_type, const HeaderList& headers) override {
    if (started_) co_return false;
    started_ = true;
    head_ = format_head(status, content_type, headers, -1);
    co_return true;
  }

  awaitable<bool> write_chunk(std::string_view data) override {
    if (failed_) co_return false;
    if (data.empty() || head_only_) co_return co_await write_head_and(std::array<net::const_buffer, 0>{});
    if (http10_) {
      // HTTP/1.0 has no chunked coding: the body is the raw data, ended by closing.
      co_return co_await write_head_and(std::array<net::const_buffer, 1>{net::buffer(data.data(), data.size())});
    }
    char size_line[24];
    const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
    co_return co_await write_head_and(std::array<net::const_buffer, 3>{
        net::buffer(size_line, static_cast<std::size_t>(len)), net::buffer(data.data(), data.size()),
        net::buffer("\r\n", 2)});
  }

  awaitable<bool> end_stream() override {
    if (failed_) co_return false;
    if (http10_ || head_only_) {
      // Nothing more to write: a HEAD has no body; an HTTP/1.0 body ends when the
      // connection closes (format_head turned keep-alive off, so the session closes it now).
      finished_ = co_await write_head_and(std::array<net::const_buffer, 0>{});
      co_return finished_;
    }
    finished_ = co_await write_head_and(std::array<net::const_buffer, 1>{net::buffer("0\r\n\r\n", 5)});
    co_return finished_;
  }

  // A stream's head not written yet (begin_stream keeps it for the first write).
  bool head_pending() const { return !head_.empty(); }

  // Writes `rest`, after the head when it has not gone yet. (No empty buffer is passed:
  // over TLS, Beast's flat_stream writes 0 bytes of a sequence that starts with one and
  // whose next buffer is over 16 KiB, and async_write takes that for done.)
  template <std::size_t N>
  awaitable<bool> write_head_and(const std::array<net::const_buffer, N>& rest) {
    boost::system::error_code ec;
    if (!head_.empty()) {
      std::array<net::const_buffer, N + 1> bufs;
      bufs[0] = net::buffer(head_);
      std::copy(rest.begin(), rest.end(), bufs.begin() + 1);
      ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
      std::string().swap(head_);  // (its memory too: a stream may last minutes)
    } else if constexpr (N > 0) {
      ec = co_await detail::write_all(s_.stream, rest, write_timeout_);
    }
    failed_ = !!ec;
    co_return !ec;
  }

  awaitable<void> wait_client_gone() override {
    // The race this waits in may be decided between two reads (the other side finished
    // without suspending): return then, instead of letting the next co_await throw.
    co_await net::this_coro::throw_if_cancelled(false);
    const auto cs = co_await net::this_coro::cancellation_state;
    // Reads into the session buffer so a pipelined request is not lost. No timeout:
    // this read only watches for the peer closing.
    for (;;) {
      if (cs.cancelled() != net::cancellation_type::none) co_return;
      if (s_.buffer.size() > kMaxPipelined) {
        // The client keeps sending while we answer; stop reading and just wait.
        net::steady_timer t{s_.stream.get_executor(), net::steady_timer::time_point::max()};
        co_await t.async_wait(nothrow);
        co_return;
      }
      // (Over TLS through the TLS stream: what arrives is records to decrypt. The stream's
      // read timer may still hold a write's timeout: this read has none.)
      if (s_.stream.tls()) s_.stream.expires_never();
      reading_ = true;  // (into s_.buffer: arm_watch must not free it meanwhile)
      auto [ec, n] = s_.stream.tls() ? co_await s_.stream.tls()->async_read_some(s_.buffer.prepare(4096), nothrow)
                                     : co_await s_.stream.socket().async_read_some(s_.buffer.prepare(4096), nothrow);
      reading_ = false;
      if (ec == net::error::operation_aborted) {
        // Cancelled by the caller's race; nothing was consumed.
        co_return;
      }
      if (ec || n == 0) {
        client_gone_ = true;
        failed_ = true;
        co_return;
      }
      s_.buffer.commit(n);
    }
  }

  bool client_gone() const override { return client_gone_; }

  void arm_watch(const std::shared_ptr<ClientWatch>& w) {
    // A peek (MSG_PEEK) receive: it never consumes request bytes, and unlike a readiness
    // wait it needs no epoll_ctl call to be armed (only its first attempt, which fails
    // while the client sends nothing).
    w->armed = true;
    // An exchange still running now is a long one (a stream, a generation): the buffer the
    // request was read into is returned while it runs (up to 64 KiB per connection, 4 KiB
    // for a typical request); the next request's read takes a new one.
    if (s_.buffer.size() == 0 && !reading_) s_.buffer.shrink_to_fit();
    s_.stream.socket().async_receive(
        net::buffer(&w->peek, 1), net::socket_base::message_peek,
        net::bind_cancellation_slot(w->stop.slot(), [this, w](const boost::system::error_code& ec, std::size_t n) {
          if (!w->active || ec == net::error::operation_aborted) return;
          Taken taken = Taken::gone;
          if (!ec && n > 0) {
            // The client sent more (a pipelined request, or a byte before leaving): move
            // what is there into the session's buffer, where the next request is read
            // from, and watch on. Nothing else reads the socket while the watch is on.
            taken = take_pipelined();
            if (taken == Taken::more) arm_watch(w);
            if (taken != Taken::gone) return;
          }
          // EOF or an error: the client is gone.
          w->active = false;
          client_gone_ = true;
          failed_ = true;
          auto cb = std::move(w->on_gone);
          if (cb) cb();
        }));
  }

  // Reads what the client already sent into the session buffer, without blocking: `more`
  // to watch on; `full` when the client sent more than kMaxPipelined while its request
  // runs (it is not watched further: its next request waits in the socket). On a plain
  // connection an error or EOF is left for the next peek to report; over TLS the bytes are
  // records, read through the TLS stream (a partial record stays inside it), and an error
  // there (the client's close_notify, a bad record) is `gone`. (That read may make OpenSSL
  // answer with an alert, e.g. to a TLS 1.2 renegotiation attempt, written at once: were a
  // reply's write pending then, that misbehaving client's own stream would be garbled.)
  enum class Taken { more, full, gone };
  Taken take_pipelined() {
    auto& sock = s_.stream.socket();
    auto* tls = s_.stream.tls();
    for (;;) {
      if (s_.buffer.size() >= kMaxPipelined) return Taken::full;
      boost::system::error_code ec;
      if (!sock.non_blocking()) sock.non_blocking(true, ec);
      const auto space = s_.buffer.prepare(kMaxPipelined - s_.buffer.size());
      const std::size_t n = tls ? tls->read_some(space, ec) : sock.read_some(space, ec);
      s_.buffer.commit(n);
      if (ec == net::error::would_block || ec == net::error::try_again) return Taken::more;
      if (ec) return tls ? Taken::gone : Taken::more;
      if (n == 0) return Taken::more;
    }
  }

  void watch_client(std::function<void()> on_gone) override {
    unwatch_client();
    watch_ = std::make_shared<ClientWatch>();
    watch_->on_gone = std::move(on_gone);
    watch_->exchange = this;
    defer_watch(s_.worker, watch_);
  }

  void unwatch_client() override {
    if (!watch_) return;
    watch_->active = false;
    if (watch_->armed) watch_->stop.emit(net::cancellation_type::terminal);
    watch_.reset();
  }

  ~ExchangeImpl() override { unwatch_client(); }

  void set_write_timeout(std::chrono::milliseconds t) override { write_timeout_ = t; }

  void abort() override {
    started_ = true;  // the session must not write a reply of its own
    failed_ = true;
    beast::error_code ec;
    s_.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

 private:
  std::chrono::steady_clock::duration write_timeout_;
  static constexpr std::size_t kMaxPipelined = 64 * 1024;

  // Status line and headers; content_length < 0 means chunked.
  std::string format_head(int status, std::string_view content_type, const HeaderList& headers,
                          std::int64_t content_length);

  Session& s_;
  const RequestImpl& req_;
  bool keep_alive_;
  bool http10_;
  bool head_only_;
  std::shared_ptr<ClientWatch> watch_;
  bool started_ = false;
  bool finished_ = false;
  bool failed_ = false;
  bool client_gone_ = false;
  bool reading_ = false;  // wait_client_gone() has a read into s_.buffer pending
  std::string head_;      // a stream's head, until its first write takes it
};

// Arms the watches that have waited kWatchDelay, at most once per kWatchDelay (a timer per
// worker, not per request); ends when none is left.
awaitable<void> sweep_watches(Worker& w) {
  net::steady_timer timer{w.ioc};
  while (!w.unarmed_watches.empty()) {
    const auto due = w.unarmed_watches.front().first + kWatchDelay;
    timer.expires_at(std::max(due, std::chrono::steady_clock::now() + kWatchDelay / 2));
    co_await timer.async_wait(nothrow);
    const auto now = std::chrono::steady_clock::now();
    while (!w.unarmed_watches.empty() && w.unarmed_watches.front().first + kWatchDelay <= now) {
      auto watch = w.unarmed_watches.front().second.lock();
      w.unarmed_watches.pop_front();
      if (watch && watch->active && !watch->armed) watch->exchange->arm_watch(watch);
    }
  }
  w.sweeping_watches = false;
}

void defer_watch(Worker& w, const std::shared_ptr<ClientWatch>& watch) {
  w.unarmed_watches.emplace_back(std::chrono::steady_clock::now(), watch);
  if (w.sweeping_watches) return;
  w.sweeping_watches = true;
  net::co_spawn(w.ioc, sweep_watches(w), net::detached);
}

std::string ExchangeImpl::format_head(int status, std::string_view content_type, const HeaderList& headers,
                                      std::int64_t content_length) {
  const auto& opts = s_.worker.server.opts;
  if (s_.worker.draining || s_.worker.server.closing_keep_alive.load(std::memory_order_relaxed)) keep_alive_ = false;
  std::string h;
  std::size_t size = 160 + opts.server_name.size() + content_type.size();
  for (const auto& [k, v] : opts.extra_headers) size += k.size() + v.size() + 4;
  for (const auto& [k, v] : headers) size += k.size() + v.size() + 4;
  h.reserve(size);  // one allocation, however many headers
  h += http10_ ? "HTTP/1.0 " : "HTTP/1.1 ";
  h += std::to_string(status);
  h += ' ';
  auto phrase = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  h.append(phrase.data(), phrase.size());
  h += "\r\nServer: ";
  h += opts.server_name;
  if (!content_type.empty()) {
    h += "\r\nContent-Type: ";
    h += content_type;
  }
  for (const auto& [k, v] : opts.extra_headers) {
    h += "\r\n";
    h += k;
    h += ": ";
    h += v;
  }
  for (const auto& [k, v] : headers) {
    h += "\r\n";
    if (!k.empty()) {
      h += k;
      h += ": ";
    }
    h += v;  // an empty name: v is lines already formatted (see HeaderList)
  }
  if (status == 304 || status == 204 || status < 200) {
    // No body, and no Content-Length (a 304's would have to be the 200's length).
  } else if (content_length >= 0) {
    h += "\r\nContent-Length: ";
    h += std::to_string(content_length);
  } else if (http10_) {
    keep_alive_ = false;  // no chunked encoding in HTTP/1.0: the end of the body is EOF
  } else {
    h += "\r\nTransfer-Encoding: chunked";
  }
  if (!keep_alive_) {
    h += "\r\nConnection: close";
  } else if (http10_) {
    h += "\r\nConnection: keep-alive";
  }
  h += "\r\n\r\n";
  return h;
}

Response default_local_reply(int status, std::string_view message) {
  Response r;
  r.status = status;
  r.body = R"({"error":{"message":)";
  append_json_string(r.body, message);
  r.body += R"(,"type":"invalid_request_error","code":null,"param":null}})";
  return r;
}

awaitable<void> write_local(Session& s, int status, std::string_view message, bool head_only = false) {
  const auto& opts = s.worker.server.opts;
  Response r = opts.local_reply ? opts.local_reply(status, message) : default_local_reply(status, message);
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), 11};
  res.set(bhttp::field::server, opts.server_name);
  res.set(bhttp::field::content_type, r.content_type);
  for (const auto& [k, v] : opts.extra_headers) res.set(k, v);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(false);
  res.body() = std::move(r.body);
  res.prepare_payload();
  s.stream.expires_after(std::chrono::seconds(5));
  if (head_only) {
    bhttp::response_serializer<bhttp::string_body> sr{res};
    co_await bhttp::async_write_header(s.stream, sr, nothrow);
  } else {
    co_await bhttp::async_write(s.stream, res, nothrow);
  }
}

// After answering an error without reading the whole request (e.g. 413 on the declared
// length), closing at once would reset the connection while the client is still sending,
// and it could lose our answer. Stop sending, then discard what still arrives, bounded.
awaitable<void> linger(Session& s) {
  beast::error_code ec;
  s.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  s.stream.expires_after(std::chrono::seconds(2));
  static thread_local char sink[16384];
  std::size_t total = 0;
  while (total < (8u << 20)) {
    auto [rec, n] = co_await s.stream.tcp().async_read_some(net::buffer(sink), nothrow);  // (TLS records unread)
    if (rec || n == 0) break;
    total += n;
  }
}

// "10.0.0.1", "::1" (an IPv4-mapped IPv6 address as IPv4) of the endpoint accept() gave,
// else of the socket's peer; "" when the socket has none.
std::string peer_address(const tcp::socket& sock, tcp::endpoint ep) {
  if (ep.port() == 0) {  // not given (a connection's remote port is never 0)
    beast::error_code ec;
    ep = sock.remote_endpoint(ec);
    if (ec) return {};
  }
  auto a = ep.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  return a.to_string();
}

// A TLS listener's connection: its first bytes (within the first-byte timeout, as idle),
// then the handshake (within read_timeout). A client speaking plain HTTP to it gets a
// plain 400 saying so. False when the connection is to be closed.
awaitable<bool> accept_tls(Session& s, const std::shared_ptr<TlsContext>& ctx) {
  Worker& w = s.worker;
  const auto& opts = w.server.opts;
  s.stream.expires_after(std::min(opts.first_byte_timeout, opts.keep_alive));
  w.idle_push(&s);
  auto [ec, n] = co_await s.stream.tcp().async_read_some(s.buffer.prepare(4096), nothrow);
  w.idle_remove(&s);
  if (ec || n == 0) co_return false;
  s.buffer.commit(n);
  s.idle = false;
  s.fresh = false;
  // A TLS connection opens with a handshake record (content type 22).
  if (static_cast<const unsigned char*>(s.buffer.data().data())[0] != 0x16) {
    w.server.tls_failures.fetch_add(1, std::memory_order_relaxed);
    co_await write_local(s, 400, "this port speaks HTTPS only: the request was sent as plain HTTP");
    co_await linger(s);
    co_return false;
  }
  s.tls = ctx;
  s.stream.start_tls(ctx->ctx);
  s.stream.expires_after(opts.read_timeout);
  auto [hec, used] = co_await s.stream.tls()->async_handshake(net::ssl::stream_base::server, s.buffer.data(), nothrow);
  s.buffer.consume(used);
  if (hec) {
    // (A TLS 1.3 client that leaves right after its Finished makes the write of the
    // session tickets fail: its handshake did complete, and is not counted as failed.)
    if (!::SSL_is_init_finished(s.stream.tls()->native_handle())) {
      w.server.tls_failures.fetch_add(1, std::memory_order_relaxed);
    }
    co_return false;
  }
  s.fresh = true;  // (the first request is still to come)
  co_return true;
}

awaitable<void> run_session(Worker& w, tcp::socket sock, tcp::endpoint peer) {
  Session s{w, std::move(sock), peer};
  w.sessions.insert(&s);
  struct Unregister {
    Worker& w;
    Session* s;
    ~Unregister() {
      w.idle_remove(s);
      w.sessions.erase(s);
      w.server.open_connections.fetch_sub(1, std::memory_order_relaxed);
    }
  } unregister{w, &s};
  const auto& opts = w.server.opts;
  beast::error_code opt_ec;
  s.stream.socket().set_option(tcp::no_delay(true), opt_ec);
  // Non-blocking before the first operation: Asio then skips its own ioctl, and the
  // direct writes (write_now) find it set: one ioctl per connection instead of two.
  s.stream.socket().non_blocking(true, opt_ec);

  bool serve = true;  // false: the TLS handshake failed
  bool peer_closed = false;  // the client closed between requests (its EOF was read)
  try {
    bool first = true;
    if (auto ctx = w.server.tls()) serve = co_await accept_tls(s, ctx);
    for (; serve;) {
      s.idle = true;
      if (w.draining && !first) break;
      if (s.buffer.size() == 0) {
        // Waiting for the first byte of the next request: idle, so closed first at the
        // connection cap. A connection that has never sent anything gets a shorter wait.
        s.stream.expires_after(first ? std::min(opts.first_byte_timeout, opts.keep_alive) : opts.keep_alive);
        w.idle_push(&s);
        auto [ec, n] = co_await s.stream.async_read_some(s.buffer.prepare(4096), nothrow);
        w.idle_remove(&s);
        if (ec || n == 0) {
          peer_closed = ec == net::error::eof;
          break;
        }
        s.buffer.commit(n);
      }
      first = false;
      s.fresh = false;
      s.idle = false;
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
      parser.body_limit(opts.max_body_bytes);
      s.stream.expires_after(opts.read_timeout);
      // The head first: its framing, Host and Expect are checked before any body is read.
      auto [ec, n] = co_await bhttp::async_read_header(s.stream, s.buffer, parser, nothrow);
      bool head_only = false;
      std::string refused;
      if (!ec) {
        const auto& m = parser.get();
        head_only = m.method() == bhttp::verb::head;
        refused = detail::refused_head(m);
        if (refused.empty() && !parser.is_done()) {
          // RFC 9110 §10.1.1: the client waits for "100 Continue" before it sends the body
          // (unless some of it is here already). A body over the limit by its
          // Content-Length got 413 while reading the head, before this.
          if (s.buffer.size() == 0 && m.version() >= 11 && beast::iequals(m[bhttp::field::expect], "100-continue")) {
            static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            std::array<net::const_buffer, 1> bufs{net::buffer(kContinue.data(), kContinue.size())};
            if (auto wec = co_await detail::write_all(s.stream, bufs, std::chrono::seconds(30))) break;
            s.stream.expires_after(opts.read_timeout);
          }
          // The body: what is already buffered is parsed in place (no extra hop through
          // the loop), the rest read.
          parser.eager(true);
          while (!ec && !parser.is_done() && s.buffer.size() > 0) {
            const auto used = parser.put(s.buffer.data(), ec);
            s.buffer.consume(used);
            if (ec == bhttp::error::need_more) {
              ec = {};
              break;
            }
            if (used == 0) break;
          }
          if (!ec && !parser.is_done()) std::tie(ec, n) = co_await bhttp::async_read(s.stream, s.buffer, parser, nothrow);
        }
      }
      if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) break;
      if (ec || !refused.empty()) {
        int status = 400;
        std::string message;
        if (!refused.empty()) {
          message = std::move(refused);
        } else if (ec == bhttp::error::header_limit) {
          status = 431;
          message = "request headers exceed the limit";
        } else if (ec == bhttp::error::body_limit) {
          status = 413;
          message = "request body exceeds the limit of " + std::to_string(opts.max_body_bytes) + " bytes";
        } else if (ec == beast::error::timeout) {
          status = 408;
          message = "timed out reading the request";
        } else {
          message = "malformed HTTP request: " + ec.message();
        }
        co_await write_local(s, status, message, head_only);
        if (ec != beast::error::timeout) co_await linger(s);
        break;
      }
      s.stream.expires_never();
      const auto& msg = parser.get();
      if (s.peer.empty()) s.peer = peer_address(s.stream.socket(), s.peer_ep);
      RequestImpl req{msg, s.peer};
      ExchangeImpl ex{s, req, msg.keep_alive(), msg.version() == 10, head_only};
      bool threw = false;
      try {
        co_await w.handler(ex);
      } catch (const std::exception& e) {
        std::cerr << "sluice: handler error: " << e.what() << "\n";
        threw = true;
      }
      // (A stream begun whose head has not gone yet has sent nothing: it can still be a 500.)
      if (threw) {
        if (!ex.started() || ex.head_pending()) co_await write_local(s, 500, "internal error", head_only);
        break;
      }
      if (!ex.started() || ex.head_pending()) {
        // The handler gave up because the client left: nobody to answer.
        if (!ex.client_gone()) co_await write_local(s, 500, "handler produced no response", head_only);
        break;
      }
      if (!ex.finished() || ex.failed() || !ex.keep_alive()) break;
    }
  } catch (const std::exception& e) {
    std::cerr << "sluice: session error: " << e.what() << "\n";
  }
  beast::error_code ignored;
  if (serve && s.stream.tls()) {
    // The TLS close_notify, without waiting for the client's: it is written at once (or
    // not at all: the socket is non-blocking), and the wait for the reply ends in
    // would_block.
    if (!s.stream.socket().non_blocking()) s.stream.socket().non_blocking(true, ignored);
    s.stream.tls()->shutdown(ignored);
  }
  // (A client that closed first needs no shutdown before the close: the close sends the
  // FIN just as well.)
  if (!peer_closed) s.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  s.stream.close();
}

bool Worker::evict_oldest_idle() {
  Session* s = idle_oldest;
  if (!s) return false;
  idle_remove(s);
  beast::error_code ec;
  s->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  server.evicted_connections.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// At the connection cap: room is made by closing an idle session, on this worker if it
// has one, else on another (posted to its loop; meanwhile the count is one over the cap).
bool make_room(Worker& w) {
  if (w.evict_oldest_idle()) return true;
  for (auto& other : w.server.workers) {
    Worker* o = other.get();
    if (o == &w || o->idle_count.load(std::memory_order_relaxed) == 0) continue;
    net::post(o->ioc, [o] { o->evict_oldest_idle(); });
    return true;
  }
  return false;
}

constexpr int kMaxRefusing = 64;  // per worker; beyond it, refused connections close at once

// A connection over the cap: a short 503, then closed (after a bounded linger, so the
// client reads the answer rather than a reset).
awaitable<void> refuse(Worker& w, tcp::socket sock) {
  ++w.refusing;
  struct Done {
    Worker& w;
    ~Done() { --w.refusing; }
  } done{w};
  Session s{w, std::move(sock)};
  co_await write_local(s, 503, "too many connections: the gateway is at its connection limit; retry later");
  co_await linger(s);
  s.stream.close();
}

// Out of file descriptors: give up the spare one, accept a pending connection with it and
// close that at once (its client sees the refusal instead of waiting in the backlog), then
// take the spare again. Returns false when nothing could be accepted (then back off).
bool shed_one(Worker& w) {
  if (w.reserve_fd >= 0) {
    ::close(w.reserve_fd);
    w.reserve_fd = -1;
  }
  const int fd = ::accept4(w.acceptor->native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) {
    static constexpr std::string_view kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    [[maybe_unused]] auto sent = ::send(fd, kBusy.data(), kBusy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(fd);
    w.server.refused_connections.fetch_add(1, std::memory_order_relaxed);
  }
  w.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0 && w.reserve_fd >= 0;
}

// A connection just accepted: served, or refused when the connection cap is reached and no
// idle connection can make room.
void admit(Worker& w, tcp::socket sock, const tcp::endpoint& peer) {
  auto& server = w.server;
  const auto cap = static_cast<std::int64_t>(server.opts.max_connections);
  const auto open = server.open_connections.fetch_add(1, std::memory_order_relaxed) + 1;
  if (cap > 0 && open > cap && !make_room(w)) {
    server.open_connections.fetch_sub(1, std::memory_order_relaxed);
    server.refused_connections.fetch_add(1, std::memory_order_relaxed);
    if (w.refusing < kMaxRefusing) {
      net::co_spawn(w.ioc, refuse(w, std::move(sock)), net::detached);
    } else {
      beast::error_code ignored;
      sock.close(ignored);
    }
    return;
  }
  net::co_spawn(w.ioc, run_session(w, std::move(sock), peer), net::detached);
}

awaitable<void> accept_loop(Worker& w) {
  tcp::endpoint peer;  // filled by accept() itself: no getpeername per connection
  for (;;) {
    auto [ec, sock] = co_await w.acceptor->async_accept(peer, nothrow);
    if (ec) {
      if (ec == net::error::operation_aborted || !w.acceptor->is_open()) co_return;
      const int e = ec.value();
      if (ec.category() == boost::system::system_category() &&
          (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM)) {
        // Out of file descriptors (or memory): shed pending connections; when even that
        // fails, back off instead of spinning.
        if (!shed_one(w)) {
          net::steady_timer t{w.ioc, std::chrono::milliseconds(50)};
          co_await t.async_wait(nothrow);
        }
      }
      continue;
    }
    admit(w, std::move(sock), peer);
  }
}

// At shutdown, before a listener closes: the connections the kernel has already queued on
// it would be reset by the close, so they are accepted and served (their responses say
// `Connection: close`). A connection arriving between the last accept and the close is
// still reset, unless another listener shares the port and the kernel migrates the queue
// to it (net.ipv4.tcp_migrate_req = 1; docs/deploy.md).
void take_pending(Worker& w) {
  const int fd = w.acceptor->native_handle();
  for (int taken = 0; taken < 4096; ++taken) {
    const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;  // EAGAIN: the queue is empty (or out of descriptors: nothing more to do)
    beast::error_code ec;
    tcp::socket sock{w.ioc};
    sock.assign(w.acceptor->local_endpoint(ec).protocol(), c, ec);
    if (ec) {
      ::close(c);
      continue;
    }
    admit(w, std::move(sock), {});
  }
}

// Every listener sets SO_REUSEPORT (one per worker), so a second process binding the same
// port would silently share its traffic: a stale gateway could go on enforcing an older
// config, and per-instance limits would count half the requests each. A plain bind (no
// SO_REUSEPORT) fails when anything listens there: the port is refused unless sharing it
// was asked for (ServerOptions::takeover).
void ensure_port_free(const tcp::endpoint& ep) {
  net::io_context probe_ctx;
  tcp::acceptor probe(probe_ctx);
  boost::system::error_code ec;
  probe.open(ep.protocol(), ec);
  if (!ec) probe.set_option(net::socket_base::reuse_address(true), ec);  // TIME_WAIT is no owner
  if (!ec) probe.bind(ep, ec);
  if (ec == net::error::address_in_use) {
    throw std::runtime_error(ep.address().to_string() + ":" + std::to_string(ep.port()) +
                             " is already served by another process (another gateway?); it is not shared "
                             "unless asked: `sluice serve --takeover` shares it on purpose (an in-place upgrade)");
  }
  // Other errors (no such address...) are the real bind's to report.
}

std::unique_ptr<tcp::acceptor> make_acceptor(net::io_context& ioc, const tcp::endpoint& ep) {
  auto a = std::make_unique<tcp::acceptor>(ioc);
  a->open(ep.protocol());
  // Not inherited by child processes (a listener kept open by a child outlives us).
  ::fcntl(a->native_handle(), F_SETFD, FD_CLOEXEC);
  // Non-blocking for the direct accepts (take_pending, shed_one). Asio's epoll backend sets
  // this itself at the first accept; its io_uring backend never does, and an accept4 on a
  // blocking listener with an empty queue would hang the worker. io_uring's own accepts
  // wait for a connection whatever the flag.
  ::fcntl(a->native_handle(), F_SETFL, ::fcntl(a->native_handle(), F_GETFL) | O_NONBLOCK);
  a->set_option(net::socket_base::reuse_address(true));
  int one = 1;
  if (::setsockopt(a->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    throw std::system_error(errno, std::generic_category(), "SO_REUSEPORT");
  }
  a->bind(ep);
  a->listen(net::socket_base::max_listen_connections);
  return a;
}

// Waits until `w` has no session left: idle ones are shut down at once (fresh ones from
// `fresh_until`), busy ones at `deadline`; false when a handler ignored its closed
// connection for 2 s past the deadline.
awaitable<bool> sessions_gone(Worker& w, std::chrono::steady_clock::time_point deadline,
                              std::chrono::steady_clock::time_point fresh_until) {
  beast::error_code ec;
  net::steady_timer t{w.ioc};
  while (!w.sessions.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline + std::chrono::seconds(2)) co_return false;
    for (Session* s : w.sessions) {
      // shutdown() (not cancel()) so pending reads see EOF: handlers watching for the
      // client leaving treat it as gone and stop their upstream work.
      if ((s->idle && (!s->fresh || now >= fresh_until)) || now >= deadline) {
        s->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
      }
    }
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(nothrow);
  }
  co_return true;
}

// Drains one worker: no new connections; idle keep-alive connections are closed at once;
// requests in flight get `grace`, then their connections are shut down (which also ends
// their upstream work: the handlers watch the client socket). The loop stops when no
// session is left, so every coroutine ends normally and nothing is torn down mid-flight.
awaitable<void> drain(Worker& w, std::chrono::milliseconds grace) {
  w.draining = true;
  take_pending(w);
  beast::error_code ec;
  w.acceptor->close(ec);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + grace;
  // A connection that has sent nothing yet is closed as idle only after this: one accepted
  // just now is most likely sending its request.
  const auto fresh_until = start + std::min(grace, std::chrono::milliseconds(1000));
  bool clean = co_await sessions_gone(w, deadline, fresh_until);
  if (w.server.opts.on_drained) co_await w.server.opts.on_drained(w.index);
  // An accept the reactor completed just before the close may have started a session
  // meanwhile: it is served too.
  if (clean) clean = co_await sessions_gone(w, deadline, fresh_until);
  if (!clean) w.server.hard_stopped.store(true);  // abandoned coroutines: exit without destructors
  w.ioc.stop();
}

void ServerImpl::shutdown(std::chrono::milliseconds grace) {
  std::call_once(shutdown_once, [&] {
    for (auto& wp : workers) {
      Worker* w = wp.get();
      net::co_spawn(w->ioc, drain(*w, grace), net::detached);
    }
  });
}

}  // namespace

std::unique_ptr<Server> Server::start(ServerOptions options, HandlerFactory factory) {
  auto impl = std::make_unique<ServerImpl>();
  impl->opts = std::move(options);
  impl->tls_ctx = impl->opts.tls;
  int n = impl->opts.workers > 0 ? impl->opts.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  tcp::endpoint ep{net::ip::make_address(impl->opts.host), impl->opts.port};
  if (ep.port() != 0 && !impl->opts.takeover) ensure_port_free(ep);
  for (int i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>(*impl, i);
    w->acceptor = make_acceptor(w->ioc, ep);
    w->reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (i == 0) {
      // Port 0: the first listener picks the port; the others join it.
      ep.port(w->acceptor->local_endpoint().port());
      impl->bound_port = ep.port();
    }
    w->handler = factory(i, w->ioc.get_executor());
    impl->workers.push_back(std::move(w));
  }
  for (auto& wp : impl->workers) {
    Worker* w = wp.get();
    net::co_spawn(w->ioc, accept_loop(*w), net::detached);
    w->thread = std::thread([w] {
      name_this_thread(("sluice-w" + std::to_string(w->index)).c_str());
      try {
        w->ioc.run();
      } catch (const std::exception& e) {
        std::cerr << "sluice: worker " << w->index << " stopped: " << e.what() << "\n";
      }
    });
  }
  return impl;
}

}  // namespace sluice::http
