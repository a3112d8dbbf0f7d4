#pragma once
// Redis pub/sub for the fleet's runtime state (key_store.notify: redis): an instance that
// changed the database publishes on `<redis.key_prefix>:control`; every instance listens
// on it and reads the database at once instead of at its next poll. Plain blocking
// sockets on the control store's own thread (and, to publish, on the query thread that
// made the change): nothing here touches the workers. Polling stays the fallback: while
// Redis is down, changes arrive within key_store.poll as without it.
#include <chrono>
#include <string>

#include "common/redis_url.hpp"

namespace sluice::gateway {

class ControlNotify {
 public:
  ControlNotify(RedisEndpoint ep, std::string channel);
  ~ControlNotify();
  ControlNotify(const ControlNotify&) = delete;
  ControlNotify& operator=(const ControlNotify&) = delete;

  // Waits up to `timeout` for a notice (subscribing first if not subscribed). Returns
  // true when one arrived, false on the timeout, on stop() or while Redis cannot be
  // reached (then it waits out the timeout before the next try).
  bool wait(std::chrono::milliseconds timeout);
  // Ends a wait() in progress, and every later one at once.
  void stop();
  // Publishes a notice (a short connection of its own; errors are ignored: the others
  // poll). Any thread.
  void publish() const;

  bool subscribed() const noexcept { return sub_ >= 0; }

 private:
  bool subscribe();
  void drop();

  RedisEndpoint ep_;
  std::string channel_;
  int sub_ = -1;   // the subscribed connection (the waiting thread's)
  int wake_ = -1;  // eventfd: stop()
};

}  // namespace sluice::gateway
