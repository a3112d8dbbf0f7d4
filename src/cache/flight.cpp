#include "cache/flight.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::cache {

namespace net = boost::asio;

// A follower waiting for more: woken by a cancel of its timer, posted to its own thread.
struct Flight::Waiter {
  net::any_io_executor ex;
  std::shared_ptr<net::steady_timer> timer;
};

void Flight::wake_locked() {
  for (auto& w : waiters_) net::post(w->ex, [t = w->timer] { t->cancel(); });
  waiters_.clear();
}

net::awaitable<void> Flight::wait(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds tick) {
  auto ex = co_await net::this_coro::executor;
  auto w = std::make_shared<Waiter>(Waiter{ex, std::make_shared<net::steady_timer>(ex)});
  w->timer->expires_after(tick);
  waiters_.push_back(w);
  lock.unlock();
  // The wake is posted to this thread: it runs once this coroutine is suspended here.
  boost::system::error_code ec;
  co_await w->timer->async_wait(net::redirect_error(net::use_awaitable, ec));
  lock.lock();
  std::erase(waiters_, w);  // (after a tick: no wake came)
}

void Flight::publish(std::string_view frames) {
  std::lock_guard lock(mu_);
  if (ended_ || overflow_ || frames.empty()) return;
  if (frames_.size() + frames.size() > max_bytes_) {
    overflow_ = true;  // the followers' reads fail; the leader goes on for its own client
  } else {
    frames_ += frames;
  }
  wake_locked();
}

void Flight::finish(std::string completion, std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  std::lock_guard lock(mu_);
  if (ended_) return;
  ended_ = ok_ = true;
  completion_ = std::move(completion);
  prompt_tokens_ = prompt_tokens;
  completion_tokens_ = completion_tokens;
  wake_locked();
}

void Flight::fail(Reason reason, std::string message) {
  std::lock_guard lock(mu_);
  if (ended_) return;
  ended_ = true;
  reason_ = reason;
  message_ = std::move(message);
  wake_locked();
}

bool Flight::others_reading() const {
  std::lock_guard lock(mu_);
  return readers_ > 0;
}

void Flight::join() {
  std::lock_guard lock(mu_);
  ++readers_;
}

void Flight::leave() {
  std::lock_guard lock(mu_);
  --readers_;
}

net::awaitable<std::optional<bool>> Flight::wait_output(std::chrono::milliseconds tick) {
  std::unique_lock lock(mu_);
  if (!ended_ && !overflow_ && frames_.empty()) co_await wait(lock, tick);
  if (!ended_ && !overflow_ && frames_.empty()) co_return std::nullopt;
  co_return !overflow_ && (!frames_.empty() || (ended_ && ok_));
}

net::awaitable<FlightPart> Flight::next(std::size_t& offset, std::chrono::milliseconds tick) {
  std::unique_lock lock(mu_);
  if (!ended_ && !overflow_ && offset >= frames_.size()) co_await wait(lock, tick);
  FlightPart p;
  if (overflow_) {
    p.ended = true;
    p.reason = Reason::upstream_stream_failed;
    p.message = "the shared answer grew beyond limits.max_upstream_response_bytes";
    co_return p;
  }
  p.frames = frames_.substr(offset);
  offset = frames_.size();
  if (ended_) {
    p.ended = true;
    p.ok = ok_;
    p.reason = reason_;
    p.message = message_;
  }
  co_return p;
}

std::shared_ptr<Flight> Flights::lead_or_follow(const std::string& hash, bool& leader) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = by_hash_.try_emplace(hash);
  if (!fresh) {
    leader = false;
    it->second->join();
    ++coalesced_;
    return it->second;
  }
  leader = true;
  it->second = std::make_shared<Flight>(max_bytes_);
  return it->second;
}

void Flights::land(const std::string& hash, const Flight* f) {
  std::lock_guard lock(mu_);
  if (auto it = by_hash_.find(hash); it != by_hash_.end() && it->second.get() == f) by_hash_.erase(it);
}

std::size_t Flights::size() const {
  std::lock_guard lock(mu_);
  return by_hash_.size();
}

std::uint64_t Flights::coalesced() const {
  std::lock_guard lock(mu_);
  return coalesced_;
}

}  // namespace sluice::cache
