#pragma once
// The requests in flight, for GET /admin/requests and their cancel (docs/admin.md, "Live
// requests"). This instance's are read from each worker on its own thread, never under a
// lock on the request path. The fleet's: each instance registers what it has in flight in
// Redis (admin.live_registry), the articles' session metadata: every live_interval a
// snapshot under `<key_prefix>:live:<instance>` that expires after three intervals (an
// instance that died drops out by itself), and its name in the sorted set
// `<key_prefix>:live:instances`. A cancel for a request on another instance is a list entry
// `<key_prefix>:live:cancel:<instance>` that instance reads five times a second.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/redis_url.hpp"

namespace sluice::gateway {

struct LiveInfo {
  std::string id;          // the gateway's, unique in the fleet: what a cancel names (16 hex digits)
  std::string request_id;  // X-Request-Id (the client may set it: not unique)
  std::string instance, key, tenant, model, path;
  bool stream = false;
  std::int64_t start_ms = 0;  // Unix ms
};

// What a cancel did: nothing (no request with that id, LiveInfo::id), marked it (it ends when it would
// next reach a backend or read from one), or ended its upstream exchange at once.
enum class Cancelled : std::uint8_t { none, marked, ended };

// A worker's requests: the request handler's side. Called on the worker's own thread.
class LiveSource {
 public:
  virtual ~LiveSource() = default;
  virtual void live(std::vector<LiveInfo>& out) const = 0;
  virtual Cancelled cancel(std::string_view id) = 0;
};

class LiveRequests {
 public:
  struct Fleet {
    std::string instance;  // this one's name
    std::chrono::milliseconds interval{1000};
    std::optional<RedisEndpoint> redis;  // none: this instance only
    std::string key_prefix = "sluice";
  };
  explicit LiveRequests(Fleet fleet);  // with Redis, starts the registry's thread
  ~LiveRequests();                     // stop()s
  LiveRequests(const LiveRequests&) = delete;
  LiveRequests& operator=(const LiveRequests&) = delete;

  // A worker's handler (held weakly: a worker that stopped drops out).
  void add(boost::asio::any_io_executor ex, std::weak_ptr<LiveSource> source);
  // Ends the registry's thread (before the workers stop: it posts to them).
  void stop();

  // This instance's requests, read from each worker on its thread (a worker that does not
  // answer within a second, because it stopped, is left out).
  boost::asio::awaitable<std::vector<LiveInfo>> here();
  // Cancels one here (the most any worker did).
  boost::asio::awaitable<Cancelled> cancel_here(std::string id);

  struct Listing {
    std::vector<LiveInfo> requests;        // the fleet's (this instance's read now)
    std::vector<std::string> instances;    // those whose snapshot was read
    bool fleet = false;                    // the registry is on (Redis configured)
    std::string error;                     // Redis could not be read: this instance's only
  };
  boost::asio::awaitable<Listing> list();
  // Asks `instance` (another one) to cancel `id`: "" when sent, else why not.
  boost::asio::awaitable<std::string> cancel_on(std::string instance, std::string id);

  bool fleet() const noexcept { return fleet_.redis.has_value(); }
  const std::string& instance() const noexcept { return fleet_.instance; }
  bool redis_up() const;
  std::uint64_t published() const;  // snapshots written
  std::uint64_t cancels_received() const;

  // The JSON of one request (the listing's and the registry's).
  static void append_json(std::string& out, const LiveInfo& r);

 private:
  struct Registry;  // the Redis side: its thread, io_context and connection
  Fleet fleet_;
  std::mutex mu_;
  struct Worker {
    boost::asio::any_io_executor ex;
    std::weak_ptr<LiveSource> source;
  };
  std::vector<Worker> workers_;
  std::vector<Worker> workers();  // a copy, the stopped ones dropped
  void post_cancel(const std::string& id);  // to every worker, waiting for none
  std::vector<std::pair<boost::asio::any_io_executor, std::weak_ptr<LiveSource>>> targets();
  boost::asio::awaitable<std::vector<LiveInfo>> here_within(std::chrono::milliseconds limit);
  std::unique_ptr<Registry> registry_;
};

}  // namespace sluice::gateway
