#pragma once
// In-flight coalescing (docs/cache.md, "Coalescing"): identical requests (the same cache
// key) arriving while the first is still being generated share its one upstream
// generation. The first is the leader: it generates as usual and publishes what it makes
// (its chat.completion.chunk frames as they come, then the whole chat.completion, or its
// failure). The others follow: each reads the frames from the start, then as they come,
// or the whole answer at the end. The leader keeps generating after its own client left
// while a follower still reads; the last reader leaving ends it. In this process only
// (every worker thread): the fleet shares answers through the cache, not generations.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/reason.hpp"

namespace sluice::cache {

class Flight;

// What a follower reads.
struct FlightPart {
  std::string frames;      // chat.completion.chunk frames since the last read (a streamed leader)
  bool ended = false;      // nothing more comes
  bool ok = false;         // (ended) the answer completed well: Flight::completion() holds it
  Reason reason = Reason::ok;  // (ended, !ok) why it failed
  std::string message;
};

class Flight : public std::enable_shared_from_this<Flight> {
 public:
  explicit Flight(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  // Leader side (on the leader's thread; the state is shared under a lock).
  void publish(std::string_view frames);  // beyond max_bytes: the followers' reads fail
  void finish(std::string completion, std::int64_t prompt_tokens, std::int64_t completion_tokens);
  void fail(Reason reason, std::string message);
  bool others_reading() const;            // a follower still reads

  // Follower side. `offset`: what it read so far of the frames. Each returns after `tick`
  // at the latest, with nothing new (a follower writes its heartbeat then, or sees that
  // its client left).
  boost::asio::awaitable<FlightPart> next(std::size_t& offset, std::chrono::milliseconds tick);
  // Whether anything came yet (frames, or the end); nullopt: nothing within `tick`.
  boost::asio::awaitable<std::optional<bool>> wait_output(std::chrono::milliseconds tick);
  void join();
  void leave();
  const std::string& completion() const { return completion_; }  // after an ended, ok read
  std::int64_t prompt_tokens() const { return prompt_tokens_; }
  std::int64_t completion_tokens() const { return completion_tokens_; }

 private:
  struct Waiter;
  boost::asio::awaitable<void> wait(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds tick);
  void wake_locked();

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::string frames_;
  bool ended_ = false, ok_ = false, overflow_ = false;
  Reason reason_ = Reason::ok;
  std::string message_;
  std::string completion_;
  std::int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  int readers_ = 0;
  std::vector<std::shared_ptr<Waiter>> waiters_;
};

// The flights of this process, by key hash.
class Flights {
 public:
  explicit Flights(std::size_t max_bytes) : max_bytes_(max_bytes) {}
  // The flight of `hash`: an existing one to follow (leader = false, joined), or a new one
  // this request leads (leader = true).
  std::shared_ptr<Flight> lead_or_follow(const std::string& hash, bool& leader);
  // The leader is done with it: no one joins it any more.
  void land(const std::string& hash, const Flight* f);
  std::size_t size() const;
  std::uint64_t coalesced() const;

 private:
  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Flight>> by_hash_;
  std::uint64_t coalesced_ = 0;
};

}  // namespace sluice::cache
