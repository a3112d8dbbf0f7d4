#include "http/server.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/text.hpp"
#include "common/thread_name.hpp"
#include "http/beast.hpp"
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
  explicit RequestImpl(const bhttp::request<bhttp::string_body>& m) : m_(m) {}
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

 private:
  const bhttp::request<bhttp::string_body>& m_;
};

struct Worker;

// One client connection; lives inside its session coroutine's frame.
struct Session {
  Worker& worker;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bool idle = true;  // waiting for the next request (may be closed at shutdown)

  Session(Worker& w, tcp::socket s) : worker(w), stream(std::move(s)) {}
};

struct ServerImpl;

struct Worker {
  ServerImpl& server;
  int index;
  net::io_context ioc{1};
  std::unique_ptr<tcp::acceptor> acceptor;
  Handler handler;
  std::unordered_set<Session*> sessions;
  bool draining = false;
  std::thread thread;

  Worker(ServerImpl& s, int i) : server(s), index(i) {}
};

struct ServerImpl final : Server {
  ServerOptions opts;
  std::vector<std::unique_ptr<Worker>> workers;
  std::uint16_t bound_port = 0;
  std::once_flag shutdown_once;
  std::atomic<bool> hard_stopped{false};

  bool forced_stop() const override { return hard_stopped.load(); }

  std::uint16_t port() const override { return bound_port; }
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

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(Session& s, const RequestImpl& req, bool keep_alive, bool http10)
      : s_(s), req_(req), keep_alive_(keep_alive), http10_(http10) {}

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
    std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(r.body)};
    auto ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
    finished_ = !ec;
    failed_ = !!ec;
    co_return !ec;
  }

  awaitable<bool> begin_stream(int status, std::string_view content_type, const HeaderList& headers) override {
    if (started_) co_return false;
    started_ = true;
    std::string head = format_head(status, content_type, headers, -1);
    std::array<net::const_buffer, 1> bufs{net::buffer(head)};
    auto ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
    failed_ = !!ec;
    co_return !ec;
  }

  awaitable<bool> write_chunk(std::string_view data) override {
    if (failed_ || data.empty()) co_return !failed_;
    char size_line[24];
    const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
    std::array<net::const_buffer, 3> bufs{net::buffer(size_line, static_cast<std::size_t>(len)),
                                          net::buffer(data.data(), data.size()), net::buffer("\r\n", 2)};
    auto ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
    failed_ = !!ec;
    co_return !ec;
  }

  awaitable<bool> end_stream() override {
    if (failed_) co_return false;
    std::array<net::const_buffer, 1> bufs{net::buffer("0\r\n\r\n", 5)};
    auto ec = co_await detail::write_all(s_.stream, bufs, write_timeout_);
    failed_ = !!ec;
    finished_ = !ec;
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
      auto [ec, n] = co_await s_.stream.socket().async_read_some(s_.buffer.prepare(4096), nothrow);
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

  // State of a watch_client(), shared with its pending wait: the wait may complete after
  // the exchange is gone, and then only sees `active == false`.
  struct Watch {
    net::cancellation_signal stop;
    std::function<void()> on_gone;
    bool active = true;
    char peek = 0;
  };

  void arm_watch(const std::shared_ptr<Watch>& w) {
    // A peek (MSG_PEEK) receive: it never consumes request bytes, and unlike a readiness
    // wait it needs no epoll_ctl call to be armed.
    s_.stream.socket().async_receive(
        net::buffer(&w->peek, 1), net::socket_base::message_peek,
        net::bind_cancellation_slot(w->stop.slot(), [this, w](const boost::system::error_code& ec, std::size_t n) {
          if (!w->active || ec == net::error::operation_aborted) return;
          if (!ec && n > 0) {
            // The client sent more (a pipelined request, or a byte before leaving): move
            // what is there into the session's buffer, where the next request is read
            // from, and watch on. Nothing else reads the socket while the watch is on.
            if (take_pipelined()) arm_watch(w);
            return;
          }
          // EOF or an error: the client is gone.
          w->active = false;
          client_gone_ = true;
          failed_ = true;
          auto cb = std::move(w->on_gone);
          if (cb) cb();
        }));
  }

  // Reads what the client already sent into the session buffer, without blocking. False
  // when the client sent more than kMaxPipelined while its request runs (it is not
  // watched further: its next request waits in the socket). An error or EOF is left for
  // the next peek to report.
  bool take_pipelined() {
    for (;;) {
      if (s_.buffer.size() >= kMaxPipelined) return false;
      boost::system::error_code ec;
      auto& sock = s_.stream.socket();
      if (!sock.non_blocking()) sock.non_blocking(true, ec);
      const std::size_t n = sock.read_some(s_.buffer.prepare(kMaxPipelined - s_.buffer.size()), ec);
      s_.buffer.commit(n);
      if (ec == net::error::would_block || ec == net::error::try_again) return true;
      if (ec) return true;
      if (n == 0) return true;
    }
  }

  void watch_client(std::function<void()> on_gone) override {
    unwatch_client();
    watch_ = std::make_shared<Watch>();
    watch_->on_gone = std::move(on_gone);
    arm_watch(watch_);
  }

  void unwatch_client() override {
    if (!watch_) return;
    watch_->active = false;
    watch_->stop.emit(net::cancellation_type::terminal);
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
  std::chrono::steady_clock::duration write_timeout_ = std::chrono::seconds(30);
  static constexpr std::size_t kMaxPipelined = 64 * 1024;

  // Status line and headers; content_length < 0 means chunked.
  std::string format_head(int status, std::string_view content_type, const HeaderList& headers,
                          std::int64_t content_length);

  Session& s_;
  const RequestImpl& req_;
  bool keep_alive_;
  bool http10_;
  std::shared_ptr<Watch> watch_;
  bool started_ = false;
  bool finished_ = false;
  bool failed_ = false;
  bool client_gone_ = false;
};

std::string ExchangeImpl::format_head(int status, std::string_view content_type, const HeaderList& headers,
                                      std::int64_t content_length) {
  const auto& opts = s_.worker.server.opts;
  if (s_.worker.draining) keep_alive_ = false;
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
  if (content_length >= 0) {
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

awaitable<void> write_local(Session& s, int status, std::string_view message) {
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
  co_await bhttp::async_write(s.stream, res, nothrow);
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
    auto [rec, n] = co_await s.stream.async_read_some(net::buffer(sink), nothrow);
    if (rec || n == 0) break;
    total += n;
  }
}

awaitable<void> run_session(Worker& w, tcp::socket sock) {
  Session s{w, std::move(sock)};
  w.sessions.insert(&s);
  struct Unregister {
    Worker& w;
    Session* s;
    ~Unregister() { w.sessions.erase(s); }
  } unregister{w, &s};
  const auto& opts = w.server.opts;
  s.stream.socket().set_option(tcp::no_delay(true));

  try {
    for (;;) {
      s.idle = true;
      if (w.draining) break;
      if (s.buffer.size() == 0) {
        // Idle keep-alive wait for the first byte of the next request.
        s.stream.expires_after(opts.keep_alive);
        auto [ec, n] = co_await s.stream.async_read_some(s.buffer.prepare(4096), nothrow);
        if (ec || n == 0) break;
        s.buffer.commit(n);
      }
      s.idle = false;
      bhttp::request_parser<bhttp::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
      parser.body_limit(opts.max_body_bytes);
      s.stream.expires_after(opts.read_timeout);
      auto [ec, n] = co_await bhttp::async_read(s.stream, s.buffer, parser, nothrow);
      if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) break;
      if (ec) {
        int status = 400;
        std::string message;
        if (ec == bhttp::error::header_limit) {
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
        co_await write_local(s, status, message);
        if (ec != beast::error::timeout) co_await linger(s);
        break;
      }
      s.stream.expires_never();
      const auto& msg = parser.get();
      RequestImpl req{msg};
      ExchangeImpl ex{s, req, msg.keep_alive(), msg.version() == 10};
      bool threw = false;
      try {
        co_await w.handler(ex);
      } catch (const std::exception& e) {
        std::cerr << "sluice: handler error: " << e.what() << "\n";
        threw = true;
      }
      if (threw) {
        if (!ex.started()) co_await write_local(s, 500, "internal error");
        break;
      }
      if (!ex.started()) {
        co_await write_local(s, 500, "handler produced no response");
        break;
      }
      if (!ex.finished() || ex.failed() || !ex.keep_alive()) break;
    }
  } catch (const std::exception& e) {
    std::cerr << "sluice: session error: " << e.what() << "\n";
  }
  beast::error_code ignored;
  s.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  s.stream.close();
}

awaitable<void> accept_loop(Worker& w) {
  for (;;) {
    auto [ec, sock] = co_await w.acceptor->async_accept(nothrow);
    if (ec) {
      if (ec == net::error::operation_aborted || !w.acceptor->is_open()) co_return;
      if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space) {
        // Out of file descriptors: back off instead of spinning.
        net::steady_timer t{w.ioc, std::chrono::milliseconds(50)};
        co_await t.async_wait(nothrow);
      }
      continue;
    }
    net::co_spawn(w.ioc, run_session(w, std::move(sock)), net::detached);
  }
}

std::unique_ptr<tcp::acceptor> make_acceptor(net::io_context& ioc, const tcp::endpoint& ep) {
  auto a = std::make_unique<tcp::acceptor>(ioc);
  a->open(ep.protocol());
  // Not inherited by child processes (a listener kept open by a child outlives us).
  ::fcntl(a->native_handle(), F_SETFD, FD_CLOEXEC);
  a->set_option(net::socket_base::reuse_address(true));
  int one = 1;
  if (::setsockopt(a->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    throw std::system_error(errno, std::generic_category(), "SO_REUSEPORT");
  }
  a->bind(ep);
  a->listen(net::socket_base::max_listen_connections);
  return a;
}

// Drains one worker: no new connections; idle keep-alive connections are closed at once;
// requests in flight get `grace`, then their connections are shut down (which also ends
// their upstream work: the handlers watch the client socket). The loop stops when no
// session is left, so every coroutine ends normally and nothing is torn down mid-flight.
awaitable<void> drain(Worker& w, std::chrono::milliseconds grace) {
  w.draining = true;
  beast::error_code ec;
  w.acceptor->close(ec);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  net::steady_timer t{w.ioc};
  while (!w.sessions.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline + std::chrono::seconds(2)) {
      // A handler ignored its closed connection: stop the loop regardless.
      w.server.hard_stopped.store(true);
      break;
    }
    for (Session* s : w.sessions) {
      // shutdown() (not cancel()) so pending reads see EOF: handlers watching for the
      // client leaving treat it as gone and stop their upstream work.
      if (s->idle || now >= deadline) s->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    }
    t.expires_after(std::chrono::milliseconds(20));
    co_await t.async_wait(nothrow);
  }
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
  int n = impl->opts.workers > 0 ? impl->opts.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  tcp::endpoint ep{net::ip::make_address(impl->opts.host), impl->opts.port};
  for (int i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>(*impl, i);
    w->acceptor = make_acceptor(w->ioc, ep);
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
