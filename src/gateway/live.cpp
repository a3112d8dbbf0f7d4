// The requests in flight, here and across the fleet (live.hpp).
#include "gateway/live.hpp"

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <thread>

#include "common/clock.hpp"
#include "common/text.hpp"
#include "common/thread_name.hpp"
#include "store/redis.hpp"

namespace sluice::gateway {

namespace net = boost::asio;
using net::awaitable;
using Ms = std::chrono::milliseconds;

namespace {

constexpr Ms kCancelPoll{200};    // how often an instance reads the cancels sent to it
constexpr Ms kAskLimit{1000};     // the longest wait for the workers' answers
constexpr Ms kCancelTtl{10'000};  // a cancel list no instance reads (it died) goes away

std::string str(const boost::json::object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

// Runs `fn(source)` on each worker's own thread (a post: nothing waits on a worker that
// stopped) and waits for the answers on the caller's executor, at most `limit`. The caller's
// executor runs one thread, so the last answer's wake-up cannot come before the wait.
template <class T, class Fn>
awaitable<std::vector<T>> ask_workers(std::vector<std::pair<net::any_io_executor, std::weak_ptr<LiveSource>>> ws, Fn fn,
                                      Ms limit) {
  // The answers, shared with the posted closures; the timer stays in this frame, and a
  // closure that answers after the frame is gone (a forced stop) finds no timer to wake.
  struct Ask {
    std::mutex mu;
    std::vector<T> got;
    std::size_t left = 0;
    net::steady_timer* timer = nullptr;  // under mu
  };
  net::steady_timer timer(co_await net::this_coro::executor, limit);
  auto a = std::make_shared<Ask>();
  a->left = ws.size();
  a->timer = &timer;
  struct Forget {
    Ask& a;
    ~Forget() {
      std::lock_guard lk(a.mu);
      a.timer = nullptr;
    }
  } forget{*a};
  for (auto& [ex, source] : ws) {
    net::post(ex, [a, src = source, fn] {
      T v{};
      if (auto s = src.lock()) v = fn(*s);
      std::lock_guard lk(a->mu);
      a->got.push_back(std::move(v));
      if (--a->left == 0 && a->timer) {
        net::post(a->timer->get_executor(), [a] {
          std::lock_guard lk(a->mu);
          if (a->timer) a->timer->cancel();
        });
      }
    });
  }
  if (!ws.empty()) {
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
  }
  std::lock_guard lk(a->mu);
  std::vector<T> out = std::move(a->got);
  co_return out;
}

}  // namespace

void LiveRequests::append_json(std::string& out, const LiveInfo& r) {
  out += R"({"id":)";
  append_json_string(out, r.id);
  append_json_member(out, "request_id", r.request_id);
  append_json_member(out, "instance", r.instance);
  append_json_member(out, "key", r.key);
  append_json_member(out, "tenant", r.tenant);
  append_json_member(out, "model", r.model);
  append_json_member(out, "path", r.path);
  out += r.stream ? R"(,"stream":true)" : R"(,"stream":false)";
  out += R"(,"start_ms":)" + std::to_string(r.start_ms) + "}";
}

// The Redis side: a thread of its own with one connection. Every kCancelPoll it reads the
// cancels sent to this instance; every interval it asks the workers what they have in
// flight (a post each, answers awaited for half an interval at most) and writes it.
struct LiveRequests::Registry {
  LiveRequests& owner;
  net::io_context io;
  store::RedisConnection conn;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> published{0}, cancels{0};
  const std::string key, instances_key, cancel_key;

  Registry(LiveRequests& o, const RedisEndpoint& ep)
      : owner(o),
        conn(io.get_executor(), ep, options(o.fleet_)),
        key(o.fleet_.key_prefix + ":live:" + o.fleet_.instance),
        instances_key(o.fleet_.key_prefix + ":live:instances"),
        cancel_key(o.fleet_.key_prefix + ":live:cancel:" + o.fleet_.instance) {
    conn.start();
    net::co_spawn(io, loop(), net::detached);
    thread = std::thread([this] {
      name_this_thread("sluice-live");
      io.run();
    });
  }

  static store::RedisOptions options(const Fleet& f) {
    store::RedisOptions opt;
    opt.command_timeout = std::max(Ms{250}, f.interval / 2);
    return opt;
  }

  void stop() {
    if (stopping.exchange(true)) return;
    io.stop();
    if (thread.joinable()) thread.join();
  }

  awaitable<void> loop() {
    net::steady_timer timer(io);
    auto next = std::chrono::steady_clock::now();
    for (;;) {
      timer.expires_after(kCancelPoll);
      boost::system::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (stopping.load()) co_return;
      if (!conn.up()) continue;
      auto got = co_await conn.command("LPOP", cancel_key, "100");
      if (got.ok() && got.reply->type == store::RedisReply::Type::array) {
        for (const auto& e : got.reply->elements) {
          cancels.fetch_add(1);
          owner.post_cancel(e.str);
        }
      }
      if (std::chrono::steady_clock::now() < next) continue;
      next = std::chrono::steady_clock::now() + owner.fleet_.interval;
      std::vector<LiveInfo> requests = co_await owner.here_within(owner.fleet_.interval / 2);
      const std::int64_t now = unix_ms_now();
      std::string snapshot = R"({"instance":)";
      append_json_string(snapshot, owner.fleet_.instance);
      snapshot += R"(,"at":)" + std::to_string(now) + R"(,"requests":[)";
      for (std::size_t i = 0; i < requests.size(); ++i) {
        if (i) snapshot += ',';
        requests[i].instance = owner.fleet_.instance;
        LiveRequests::append_json(snapshot, requests[i]);
      }
      snapshot += "]}";
      const std::string ttl = std::to_string(3 * owner.fleet_.interval.count());
      auto set = co_await conn.command("SET", key, snapshot, "PX", ttl);
      const std::string score = std::to_string(now);
      co_await conn.command("ZADD", instances_key, score, owner.fleet_.instance);
      const std::string gone = "(" + std::to_string(now - 60'000);  // names not heard of for a minute
      co_await conn.command("ZREMRANGEBYSCORE", instances_key, "-inf", gone);
      if (set.ok() && !set.reply->is_error()) published.fetch_add(1);
    }
  }

  // The other instances' snapshots (run on this thread).
  awaitable<Listing> read() {
    Listing out;
    out.fleet = true;
    const std::string since = std::to_string(unix_ms_now() - 3 * owner.fleet_.interval.count());
    auto names = co_await conn.command("ZRANGEBYSCORE", instances_key, since, "+inf");
    if (!names.ok() || names.reply->type != store::RedisReply::Type::array) {
      out.error = names.ok() ? names.reply->str : names.error;
      co_return out;
    }
    std::vector<std::string> argv{"MGET"};
    for (const auto& n : names.reply->elements) {
      if (n.str != owner.fleet_.instance) argv.push_back(owner.fleet_.key_prefix + ":live:" + n.str);
    }
    if (argv.size() == 1) co_return out;
    auto snaps = co_await conn.command(std::move(argv));
    if (!snaps.ok() || snaps.reply->type != store::RedisReply::Type::array) {
      out.error = snaps.ok() ? snaps.reply->str : snaps.error;
      co_return out;
    }
    for (const auto& s : snaps.reply->elements) {
      if (s.type != store::RedisReply::Type::string) continue;  // expired since
      boost::system::error_code ec;
      auto v = boost::json::parse(s.str, ec);
      if (ec || !v.is_object()) continue;
      const auto& o = v.get_object();
      out.instances.push_back(str(o, "instance"));
      const auto* rs = o.if_contains("requests");
      if (!rs || !rs->is_array()) continue;
      for (const auto& e : rs->get_array()) {
        if (!e.is_object()) continue;
        const auto& r = e.get_object();
        LiveInfo info{str(r, "id"),    str(r, "request_id"), str(r, "instance"), str(r, "key"),
                      str(r, "tenant"), str(r, "model"),     str(r, "path")};
        const auto* st = r.if_contains("stream");
        info.stream = st && st->is_bool() && st->get_bool();
        const auto* at = r.if_contains("start_ms");
        info.start_ms = at && at->is_int64() ? at->get_int64() : 0;
        out.requests.push_back(std::move(info));
      }
    }
    co_return out;
  }

  awaitable<std::string> send_cancel(std::string instance, std::string id) {
    const std::string list = owner.fleet_.key_prefix + ":live:cancel:" + instance;
    auto r = co_await conn.command("RPUSH", list, id);
    if (!r.ok()) co_return r.error;
    if (r.reply->is_error()) co_return r.reply->str;
    const std::string ttl = std::to_string(kCancelTtl.count());
    co_await conn.command("PEXPIRE", list, ttl);
    co_return std::string();
  }
};

LiveRequests::LiveRequests(Fleet fleet) : fleet_(std::move(fleet)) {
  if (fleet_.redis) registry_ = std::make_unique<Registry>(*this, *fleet_.redis);
}

LiveRequests::~LiveRequests() { stop(); }

void LiveRequests::stop() {
  if (registry_) registry_->stop();
}

void LiveRequests::add(net::any_io_executor ex, std::weak_ptr<LiveSource> source) {
  std::lock_guard lk(mu_);
  workers_.push_back({std::move(ex), std::move(source)});
}

std::vector<LiveRequests::Worker> LiveRequests::workers() {
  std::lock_guard lk(mu_);
  std::erase_if(workers_, [](const Worker& w) { return w.source.expired(); });
  return workers_;
}

void LiveRequests::post_cancel(const std::string& id) {
  for (auto& w : workers()) {
    net::post(w.ex, [src = w.source, id] {
      if (auto s = src.lock()) s->cancel(id);
    });
  }
}

std::vector<std::pair<net::any_io_executor, std::weak_ptr<LiveSource>>> LiveRequests::targets() {
  std::vector<std::pair<net::any_io_executor, std::weak_ptr<LiveSource>>> out;
  for (auto& w : workers()) out.emplace_back(w.ex, w.source);
  return out;
}

awaitable<std::vector<LiveInfo>> LiveRequests::here_within(Ms limit) {
  auto read = [](const LiveSource& s) {
    std::vector<LiveInfo> mine;
    s.live(mine);
    return mine;
  };
  auto per_worker = co_await ask_workers<std::vector<LiveInfo>>(targets(), read, limit);
  std::vector<LiveInfo> out;
  for (auto& mine : per_worker) {
    for (auto& r : mine) {
      r.instance = fleet_.instance;
      out.push_back(std::move(r));
    }
  }
  co_return out;
}

awaitable<std::vector<LiveInfo>> LiveRequests::here() {
  std::vector<LiveInfo> out = co_await here_within(kAskLimit);
  co_return out;
}

awaitable<Cancelled> LiveRequests::cancel_here(std::string id) {
  auto cancel = [id](LiveSource& s) { return s.cancel(id); };
  auto per_worker = co_await ask_workers<Cancelled>(targets(), cancel, kAskLimit);
  Cancelled most = Cancelled::none;
  for (auto c : per_worker) most = std::max(most, c);
  co_return most;
}

awaitable<LiveRequests::Listing> LiveRequests::list() {
  Listing out;
  if (registry_ && !registry_->stopping.load()) {
    auto read = [r = registry_.get()]() -> awaitable<Listing> {
      Listing l = co_await r->read();
      co_return l;
    };
    Listing got = co_await net::co_spawn(registry_->io, read, net::use_awaitable);
    out = std::move(got);
  }
  std::vector<LiveInfo> mine = co_await here();
  out.instances.insert(out.instances.begin(), fleet_.instance);
  out.requests.insert(out.requests.begin(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  co_return out;
}

awaitable<std::string> LiveRequests::cancel_on(std::string instance, std::string id) {
  if (!registry_ || registry_->stopping.load()) co_return "the live registry is off (admin.live_registry)";
  auto send = [r = registry_.get(), &instance, &id]() -> awaitable<std::string> {
    std::string err = co_await r->send_cancel(instance, id);
    co_return err;
  };
  std::string err = co_await net::co_spawn(registry_->io, send, net::use_awaitable);
  co_return err;
}

bool LiveRequests::redis_up() const { return registry_ && registry_->conn.up(); }
std::uint64_t LiveRequests::published() const { return registry_ ? registry_->published.load() : 0; }
std::uint64_t LiveRequests::cancels_received() const { return registry_ ? registry_->cancels.load() : 0; }

}  // namespace sluice::gateway
