#include "store/redis.hpp"

#include "common/text.hpp"

#include "store/redis_cluster.hpp"
#include "store/resp.hpp"

#include <openssl/evp.h>

#include <array>
#include <atomic>
#include <cctype>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <mutex>

namespace sluice::store {

namespace net = boost::asio;
using net::awaitable;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using error_code = boost::system::error_code;
constexpr auto nothrow = net::as_tuple(net::use_awaitable);

// ---------------------------------------------------------------------------------------
// Script

namespace {

void append_decimal(std::string& out, std::size_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(end - buf));
}

}  // namespace

// *<n>\r\n then $<len>\r\n<bytes>\r\n per argument (RESP2, binary-safe).
void append_resp_command(std::string& out, const std::vector<std::string>& argv) {
  std::size_t need = 16;
  for (const auto& a : argv) need += a.size() + 16;
  out.reserve(out.size() + need);
  out += '*';
  append_decimal(out, argv.size());
  out += "\r\n";
  for (const auto& a : argv) {
    out += '$';
    append_decimal(out, a.size());
    out += "\r\n";
    out += a;
    out += "\r\n";
  }
}

RedisScript::RedisScript(std::string src) : source(std::move(src)) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(source.data(), source.size(), md, &len, EVP_sha1(), nullptr);
  append_hex(sha1, std::string_view(reinterpret_cast<const char*>(md), len));
}

namespace {

struct Pending {
  net::any_completion_handler<void(RedisResult)> handler;
  Clock::time_point deadline;
  ms timeout;
  bool counted;  // a caller's command (the handshake's are not counted)
};

std::string ms_text(ms d) { return std::to_string(d.count()) + "ms"; }

}  // namespace

// ---------------------------------------------------------------------------------------
// Connection state. Everything but the atomics and error_shared is touched only on `ex`.
//
// `gen` identifies the current TCP connection: it changes whenever one is torn down, and
// every handler of a connection carries the gen it was started with and does nothing if it
// no longer matches — so a late completion of a dead connection never touches the next.

struct RedisConnection::State : std::enable_shared_from_this<State> {
  State(net::any_io_executor e, RedisEndpoint endpoint, RedisOptions o)
      : ex(std::move(e)), ep(std::move(endpoint)), opt(o), sock(ex), resolver(ex), connect_timer(ex),
        watchdog(ex), retry_timer(ex) {}

  net::any_io_executor ex;
  RedisEndpoint ep;
  RedisOptions opt;
  tcp::socket sock;
  tcp::resolver resolver;
  net::steady_timer connect_timer, watchdog, retry_timer;
  std::unique_ptr<detail::RespReader> reader;
  std::deque<Pending> pending;   // sent or queued, in send order = reply order
  std::string wbuf;              // formatted commands not yet handed to a write
  std::string outbuf;            // the write in flight
  std::array<char, 16 * 1024> rbuf;

  std::uint64_t gen = 0;
  std::uint64_t attempt = 0;     // connect attempts, for the connect timer
  bool started = false, stopped = false;
  bool connecting = false, timed_out = false;
  bool connected = false;        // TCP up (handshake may still be running)
  bool ready = false;            // handshake done: callers' commands are accepted
  bool was_up = false;
  bool writing = false, flush_posted = false, watchdog_armed = false;
  std::string down_reason;       // executor-side copy of last_error
  std::string master_at;         // Sentinel: the master's host:port as last named

  std::atomic<bool> is_up{false};
  std::atomic<std::uint64_t> n_reconnects{0}, n_commands{0}, n_failures{0}, n_writes{0};
  mutable std::mutex error_mu;
  std::string error_shared;

  void set_error(std::string e) {
    down_reason = e;
    std::lock_guard lk(error_mu);
    error_shared = std::move(e);
  }

  // Completions are posted, never run inline: the caller's coroutine must not resume in
  // the middle of the read loop (it could issue commands or stop() re-entrantly).
  void complete(Pending& p, RedisResult r) {
    if (p.counted && !r.ok()) n_failures.fetch_add(1, std::memory_order_relaxed);
    // post() runs it through the handler's own executor (the caller's coroutine's).
    net::post(ex, net::append(std::move(p.handler), std::move(r)));
  }

  void fail_all(const std::string& reason) {
    auto q = std::move(pending);
    pending.clear();
    for (auto& p : q) complete(p, RedisResult{std::nullopt, reason});
  }

  void close_socket() {
    error_code ig;
    sock.shutdown(tcp::socket::shutdown_both, ig);
    sock.close(ig);
  }

  // Tears the current connection down (if `g` is still it): replies can no longer be
  // matched to commands, so every pending command fails. The run loop reconnects.
  void break_connection(std::uint64_t g, const std::string& reason) {
    if (g != gen || !connected || stopped) return;
    ++gen;
    connected = ready = false;
    is_up.store(false);
    set_error(reason);
    close_socket();
    watchdog.cancel();
    writing = flush_posted = watchdog_armed = false;
    wbuf.clear();
    fail_all(reason);
  }

  void stop() {
    if (stopped) return;
    stopped = true;
    ++gen;
    connected = ready = connecting = false;
    is_up.store(false);
    if (started) set_error("stopped");
    close_socket();
    resolver.cancel();
    connect_timer.cancel();
    watchdog.cancel();
    retry_timer.cancel();
    writing = flush_posted = watchdog_armed = false;
    wbuf.clear();
    fail_all("stopped");
  }

  // Why a command cannot be queued now; empty when it can.
  std::string refusal(const std::vector<std::string>& argv, bool internal) const {
    if (stopped) return "stopped";
    if (!connected || (!internal && !ready)) {
      const char* why = !started ? "not started" : down_reason.empty() ? "connecting" : nullptr;
      return "not connected: " + (why ? std::string(why) : down_reason);
    }
    if (argv.empty()) return "empty command";  // Redis ignores "*0": no reply would come
    if (pending.size() >= opt.max_pending) return "pipeline full";
    return {};
  }

  void enqueue(const std::vector<std::string>& argv, ms timeout, bool counted,
               net::any_completion_handler<void(RedisResult)> h) {
    // RESP framing written straight into the write buffer: hiredis' printf-based
    // redisFormatCommandArgv was the client's largest cost (about 13% of its CPU).
    append_resp_command(wbuf, argv);
    Pending p{std::move(h), Clock::now() + timeout, timeout, counted};
    pending.push_back(std::move(p));
    arm_watchdog();
    schedule_flush();
  }

  // Batching: the first command of a loop turn posts a flush, so every command issued
  // before it runs goes out in the same write; while a write is in flight, new commands
  // accumulate in wbuf and leave together when it completes.
  void schedule_flush() {
    if (writing || flush_posted) return;
    flush_posted = true;
    net::post(ex, [self = shared_from_this(), g = gen] {
      if (g != self->gen) return;
      self->flush_posted = false;
      self->flush();
    });
  }

  void flush() {
    if (writing || wbuf.empty() || !connected) return;
    writing = true;
    outbuf.clear();
    std::swap(outbuf, wbuf);  // wbuf keeps the old capacity for the next batch
    n_writes.fetch_add(1, std::memory_order_relaxed);
    net::async_write(sock, net::buffer(outbuf), [self = shared_from_this(), g = gen](error_code ec, std::size_t) {
      if (g != self->gen) return;
      self->writing = false;
      if (ec) return self->break_connection(g, "connection lost: " + ec.message());
      self->flush();
    });
  }

  // One timer per connection, armed for the oldest pending command's deadline. Replies
  // come in order, so if the oldest is late the connection is stuck (or Redis is).
  // Re-armed lazily: a reply does not touch the timer; when it fires it moves on to the
  // then-oldest command.
  void arm_watchdog() {
    if (watchdog_armed || pending.empty()) return;
    watchdog_armed = true;
    watchdog.expires_at(pending.front().deadline);
    watchdog.async_wait([self = shared_from_this(), g = gen](error_code ec) {
      if (g != self->gen) return;
      self->watchdog_armed = false;
      if (ec || self->pending.empty()) return;
      const auto& oldest = self->pending.front();
      if (oldest.deadline <= Clock::now()) {
        return self->break_connection(g, "timeout after " + ms_text(oldest.timeout));
      }
      self->arm_watchdog();
    });
  }
};

namespace {

using StatePtr = std::shared_ptr<RedisConnection::State>;

// The coroutine frames hold `s`, so the state outlives the RedisConnection if need be.
// `asking`: ASKING first (its reply dropped), in the same write: the command that follows
// it on the connection is this one.
awaitable<RedisResult> submit(StatePtr s, const std::vector<std::string>& argv, bool internal, bool asking = false) {
  if (!internal) s->n_commands.fetch_add(1, std::memory_order_relaxed);
  std::string refused = s->refusal(argv, internal);
  if (!refused.empty()) {
    if (!internal) s->n_failures.fetch_add(1, std::memory_order_relaxed);
    co_return RedisResult{std::nullopt, std::move(refused)};
  }
  const ms timeout = internal ? s->opt.connect_timeout : s->opt.command_timeout;
  auto init = [st = s.get(), &argv, timeout, internal, asking](auto handler) {
    if (asking) {
      static const std::vector<std::string> kAsking{"ASKING"};
      st->enqueue(kAsking, timeout, false, [](RedisResult) {});
    }
    st->enqueue(argv, timeout, !internal, std::move(handler));
  };
  co_return co_await net::async_initiate<decltype(net::use_awaitable), void(RedisResult)>(init, net::use_awaitable);
}

// Resolves (names only) and connects the socket to host:port. The error, if any ("stopped"
// or anything when the connect timer fired: the caller says which).
awaitable<std::string> connect_host(const StatePtr& s, const std::string& host, std::uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  std::vector<tcp::endpoint> endpoints;
  error_code aec;
  const auto addr = net::ip::make_address(host, aec);
  if (!aec) {
    endpoints.emplace_back(addr, port);  // IP literal: no lookup
  } else {
    auto [rec, results] = co_await s->resolver.async_resolve(host, std::to_string(port), nothrow);
    if (s->stopped) co_return "stopped";
    if (s->timed_out) co_return "timeout";
    if (rec) co_return "resolving " + host + ": " + rec.message();
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  std::string err = "no address for " + host;
  for (const auto& e : endpoints) {
    s->close_socket();
    auto [cec] = co_await s->sock.async_connect(e, nothrow);  // opens the socket
    if (s->stopped) co_return "stopped";
    if (s->timed_out) co_return "timeout";
    if (!cec) {
      error_code ig;
      s->sock.set_option(tcp::no_delay(true), ig);
      s->sock.set_option(net::socket_base::keep_alive(true), ig);
      co_return std::string{};
    }
    err = "connecting to " + where + ": " + cec.message();
  }
  s->close_socket();
  co_return err;
}

// On a socket connected to a sentinel: SENTINEL get-master-addr-by-name, into `master`.
awaitable<std::string> ask_master(const StatePtr& s, RedisHost& master) {
  std::string cmd;
  append_resp_command(cmd, {"SENTINEL", "get-master-addr-by-name", s->ep.master});
  auto [wec, wn] = co_await net::async_write(s->sock, net::buffer(cmd), nothrow);
  if (s->stopped || s->timed_out) co_return "stopped";
  if (wec) co_return "writing: " + wec.message();
  detail::RespReader reader;
  std::unique_ptr<RedisReply> reply;
  while (!reply) {
    auto [ec, got] = co_await s->sock.async_read_some(net::buffer(s->rbuf), nothrow);
    if (s->stopped || s->timed_out) co_return "stopped";
    if (ec) co_return "reading: " + (ec == net::error::eof ? std::string("closed by the server") : ec.message());
    if (!reader.feed(s->rbuf.data(), got) || !reader.next(reply)) co_return "protocol error: " + reader.error();
  }
  if (reply->is_error()) co_return "answered " + reply->str;
  if (reply->type == RedisReply::Type::nil) co_return "does not know a master named '" + s->ep.master + "'";
  if (reply->type != RedisReply::Type::array || reply->elements.size() != 2 ||
      reply->elements[0].type != RedisReply::Type::string || reply->elements[1].type != RedisReply::Type::string) {
    co_return "unexpected answer to SENTINEL get-master-addr-by-name";
  }
  std::uint16_t port = 0;
  const std::string& p = reply->elements[1].str;
  auto [end, pec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (pec != std::errc() || end != p.data() + p.size() || port == 0 || reply->elements[0].str.empty()) {
    co_return "bad master address '" + reply->elements[0].str + ":" + p + "'";
  }
  master = RedisHost{reply->elements[0].str, port};
  co_return std::string{};
}

// Connects within connect_timeout — through the sentinels when configured. The error, if any.
awaitable<std::string> open_socket(StatePtr s) {
  const auto id = ++s->attempt;
  s->connecting = true;
  s->timed_out = false;
  s->connect_timer.expires_after(s->opt.connect_timeout);
  s->connect_timer.async_wait([s, id](error_code ec) {
    if (ec || id != s->attempt || !s->connecting) return;
    s->timed_out = true;
    s->resolver.cancel();
    s->close_socket();
  });
  struct Done {  // whichever way this returns
    RedisConnection::State& s;
    ~Done() {
      s.connecting = false;
      s.connect_timer.cancel();
    }
  } done{*s};

  const auto& ep = s->ep;
  const std::string where = ep.sentinels.empty() ? ep.host + ":" + std::to_string(ep.port) : describe(ep);
  const std::string timeout_text = "connect timeout after " + ms_text(s->opt.connect_timeout) + " (" + where + ")";
  if (ep.sentinels.empty()) {
    std::string err = co_await connect_host(s, ep.host, ep.port);
    co_return s->timed_out && !s->stopped ? timeout_text : err;
  }
  // Sentinel: the master's address first, from the first sentinel that names it (each
  // attempt starts from the next sentinel in the list, so that one that hangs does not eat
  // every attempt's connect timeout).
  RedisHost master;
  std::string why;
  const std::size_t n = ep.sentinels.size();
  for (std::size_t i = 0; i < n && master.host.empty(); ++i) {
    const RedisHost& sentinel = ep.sentinels[(id + i) % n];
    std::string err = co_await connect_host(s, sentinel.host, sentinel.port);
    if (err.empty()) err = co_await ask_master(s, master);
    s->close_socket();
    if (s->stopped) co_return "stopped";
    if (s->timed_out) {
      co_return timeout_text + " asking sentinel " + sentinel.host + ":" + std::to_string(sentinel.port) +
          (why.empty() ? "" : "; " + why);
    }
    if (!err.empty()) why += (why.empty() ? "" : "; ") + sentinel.host + ":" + std::to_string(sentinel.port) + ": " + err;
  }
  if (master.host.empty()) co_return "no sentinel named the master '" + ep.master + "': " + why;
  s->master_at = master.host + ":" + std::to_string(master.port);
  std::string err = co_await connect_host(s, master.host, master.port);
  if (s->timed_out && !s->stopped) co_return timeout_text;
  co_return err.empty() ? err : "master " + ep.master + " at " + s->master_at + ": " + err;
}

// AUTH, SELECT, PING through the pipeline (the read loop is already running); on success
// the connection is up. On failure the connection is torn down with the reason.
awaitable<void> handshake(StatePtr s, std::uint64_t g) {
  try {
    std::vector<std::vector<std::string>> steps;
    if (!s->ep.password.empty()) {
      std::vector<std::string> auth{"AUTH"};
      if (!s->ep.username.empty()) auth.push_back(s->ep.username);
      auth.push_back(s->ep.password);
      steps.push_back(std::move(auth));
    }
    if (s->ep.db != 0) steps.push_back({"SELECT", std::to_string(s->ep.db)});
    steps.push_back({"PING"});
    // Sentinel: what it named must be the master still (a failover may be under way).
    if (!s->ep.sentinels.empty()) steps.push_back({"ROLE"});
    for (const auto& argv : steps) {
      RedisResult r = co_await submit(s, argv, true);
      if (g != s->gen) co_return;  // torn down meanwhile; the reason is recorded
      if (!r.ok()) {
        s->break_connection(g, r.error);
        co_return;
      }
      // ROLE is an @admin command: a user without it (NOPERM) is taken at the sentinel's
      // word, READONLY on its first write being the fallback check.
      const bool role_refused = argv[0] == "ROLE" && r.reply->is_error() &&
                                (r.reply->str.starts_with("NOPERM") || r.reply->str.starts_with("ERR unknown command"));
      if (r.reply->is_error() && !role_refused) {
        s->break_connection(g, argv[0] + " failed: " + r.reply->str);
        co_return;
      }
      if (argv[0] == "ROLE" && !role_refused) {
        const auto& e = r.reply->elements;
        const std::string role = r.reply->type == RedisReply::Type::array && !e.empty() ? e[0].str : "?";
        if (role != "master") {
          s->break_connection(g, s->master_at + ", named master '" + s->ep.master + "' by a sentinel, is a " +
                                     (role == "slave" ? std::string("replica") : role) + " (a failover under way?)");
          co_return;
        }
      }
    }
    s->ready = true;
    s->is_up.store(true);
    if (s->was_up) s->n_reconnects.fetch_add(1, std::memory_order_relaxed);
    s->was_up = true;
  } catch (const std::exception& e) {
    s->break_connection(g, std::string("handshake: ") + e.what());
  }
}

// Feeds replies to the pending commands, in order, until the connection `g` ends.
awaitable<void> read_loop(StatePtr s, std::uint64_t g) {
  for (;;) {
    auto [ec, n] = co_await s->sock.async_read_some(net::buffer(s->rbuf), nothrow);
    if (g != s->gen) co_return;
    if (ec) {
      std::string why = ec == net::error::eof ? "closed by the server" : ec.message();
      s->break_connection(g, "connection lost: " + why);
      co_return;
    }
    if (!s->reader->feed(s->rbuf.data(), n)) {
      s->break_connection(g, "protocol error: " + s->reader->error());
      co_return;
    }
    for (;;) {
      std::unique_ptr<RedisReply> reply;
      if (!s->reader->next(reply)) {
        s->break_connection(g, "protocol error: " + s->reader->error());
        co_return;
      }
      if (!reply) break;
      if (s->pending.empty()) {
        s->break_connection(g, "protocol error: a reply without a command");
        co_return;
      }
      Pending p = std::move(s->pending.front());
      s->pending.pop_front();
      // A master turned replica (a failover, or an operator's REPLICAOF) refuses writes:
      // this connection is to the wrong server now. Reconnecting asks the sentinels again.
      // (Redis 6 wraps a script's error: "ERR Error running script ...: -READONLY ...".)
      const bool demoted = reply->is_error() && (reply->str.starts_with("READONLY") || reply->str.find("-READONLY") != std::string::npos);
      s->complete(p, RedisResult{std::move(*reply), {}});
      if (demoted) {
        s->break_connection(g, "the server is a read-only replica now (READONLY)");
        co_return;
      }
    }
  }
}

// Connect, serve, and on loss wait reconnect_interval and connect again, until stop().
awaitable<void> run(StatePtr s) {
  while (!s->stopped) {
    try {
      std::string err = co_await open_socket(s);
      if (s->stopped) break;
      if (err.empty()) {
        s->reader = std::make_unique<detail::RespReader>();
        s->connected = true;
        const auto g = s->gen;
        net::co_spawn(s->ex, handshake(s, g), net::detached);
        co_await read_loop(s, g);  // returns once the connection is torn down
      } else {
        s->set_error(std::move(err));
      }
    } catch (const std::exception& e) {  // e.g. out of memory: count it as a lost connection
      const std::string why = std::string("internal error: ") + e.what();
      if (s->connected) s->break_connection(s->gen, why);
      else s->set_error(why);
    }
    if (s->stopped) break;
    s->retry_timer.expires_after(s->opt.reconnect_interval);
    co_await s->retry_timer.async_wait(nothrow);
  }
}

awaitable<RedisResult> eval_on(StatePtr s, const RedisScript& script, std::vector<std::string> keys,
                               std::vector<std::string> args, bool asking);

}  // namespace

// ---------------------------------------------------------------------------------------

RedisConnection::RedisConnection(net::any_io_executor ex, RedisEndpoint ep, RedisOptions opt) {
  if (!ep.cluster.empty()) cluster_ = make_cluster(std::move(ex), std::move(ep), opt);
  else state_ = std::make_shared<State>(std::move(ex), std::move(ep), opt);
}

RedisConnection::~RedisConnection() { stop(); }

void RedisConnection::start() {
  if (cluster_) return cluster_start(cluster_);
  if (state_->started || state_->stopped) return;
  state_->started = true;
  net::co_spawn(state_->ex, run(state_), net::detached);
}

void RedisConnection::stop() {
  if (cluster_) return cluster_stop(*cluster_);
  state_->stop();
}

awaitable<RedisResult> RedisConnection::command(std::vector<std::string> argv, bool asking) {
  // (`this` is not used after the first suspension; the frame holds what it needs.)
  if (cluster_) co_return co_await cluster_command(cluster_, std::move(argv));
  StatePtr s = state_;
  co_return co_await submit(std::move(s), argv, false, asking);
}

awaitable<RedisResult> RedisConnection::eval(const RedisScript& script, std::vector<std::string> keys,
                                             std::vector<std::string> args, bool asking) {
  if (cluster_) return cluster_eval(cluster_, script, std::move(keys), std::move(args));
  return eval_on(state_, script, std::move(keys), std::move(args), asking);
}

namespace {

awaitable<RedisResult> eval_on(StatePtr s, const RedisScript& script, std::vector<std::string> keys,
                               std::vector<std::string> args, bool asking) {
  std::vector<std::string> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back("EVALSHA");
  argv.push_back(script.sha1);
  argv.push_back(std::to_string(keys.size()));
  for (auto& k : keys) argv.push_back(std::move(k));
  for (auto& a : args) argv.push_back(std::move(a));
  RedisResult r = co_await submit(s, argv, false, asking);
  if (r.ok() && r.reply->is_error() && r.reply->str.starts_with("NOSCRIPT")) {
    argv[0] = "EVAL";
    argv[1] = script.source;
    r = co_await submit(s, argv, false, asking);
  }
  co_return r;
}

}  // namespace

bool RedisConnection::up() const { return cluster_ ? cluster_up(*cluster_) : state_->is_up.load(); }
std::string RedisConnection::last_error() const {
  if (cluster_) return cluster_last_error(*cluster_);
  std::lock_guard lk(state_->error_mu);
  return state_->error_shared;
}
std::uint64_t RedisConnection::reconnects() const {
  return cluster_ ? cluster_stat(*cluster_, &RedisConnection::reconnects) : state_->n_reconnects.load(std::memory_order_relaxed);
}
std::uint64_t RedisConnection::commands() const {
  return cluster_ ? cluster_commands(*cluster_) : state_->n_commands.load(std::memory_order_relaxed);
}
std::uint64_t RedisConnection::failures() const {
  return cluster_ ? cluster_failures(*cluster_) : state_->n_failures.load(std::memory_order_relaxed);
}
std::uint64_t RedisConnection::writes() const {
  return cluster_ ? cluster_stat(*cluster_, &RedisConnection::writes) : state_->n_writes.load(std::memory_order_relaxed);
}

}  // namespace sluice::store
