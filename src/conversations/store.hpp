#pragma once
// Stored responses of the Responses API: what `store` keeps and `previous_response_id`
// continues, by tenant. A response of one tenant is never seen by another. In this
// process's memory, or in Redis (responses.store: redis) so that every instance of a
// fleet sees them, with this process's memory as the fallback while Redis is down.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::config {
struct Config;
}

namespace sluice::conversations {

struct StoredResponse {
  std::string response;     // the Response object (JSON), as GET /v1/responses/{id} answers it
  // The conversation as Responses items (JSON array): the inputs so far (item references
  // resolved) and this answer's output items. Continued as chat messages or, to a backend
  // that serves the Responses API itself, as they are.
  std::string items;
  std::string input_items;  // this request's input items (JSON array), for .../input_items
  // Not (yet) in Redis: stored while Redis was down, its SET still in flight, or refused.
  // This instance's memory answers for it until Redis confirms it.
  bool local_only = false;
  std::size_t bytes() const noexcept { return response.size() + items.size() + input_items.size() + 128; }
};

// One worker's view of the store (used on that worker's thread only).
class WorkerStore {
 public:
  virtual ~WorkerStore() = default;
  virtual boost::asio::awaitable<std::optional<StoredResponse>> get(std::string tenant, std::string id) = 0;
  // Stored in the background: the request does not wait for it.
  virtual void put(std::string tenant, std::string id, StoredResponse r) = 0;
  // nullopt: it could not be erased everywhere (Redis is down); nothing was erased.
  virtual boost::asio::awaitable<std::optional<bool>> erase(std::string tenant, std::string id) = 0;
};

// In this process, shared by the workers: each for `ttl`, the least recently stored
// dropped first beyond `max_bytes` (0: nothing is kept). Thread-safe.
class MemoryStore {
 public:
  MemoryStore(std::chrono::milliseconds ttl, std::size_t max_bytes);
  ~MemoryStore();
  std::optional<StoredResponse> get(std::string_view tenant, std::string_view id);
  void put(std::string_view tenant, std::string_view id, StoredResponse r);
  bool erase(std::string_view tenant, std::string_view id);
  // Redis has it now: this instance's copy stops answering for it when Redis does not.
  void confirm(std::string_view tenant, std::string_view id);
  std::size_t size() const;  // responses held

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process's store, as configured (responses.store), and its workers' views.
class Store {
 public:
  explicit Store(const config::Config& cfg);
  ~Store();
  std::unique_ptr<WorkerStore> for_worker(boost::asio::any_io_executor ex);
  // For /infra: {"backend":"memory"|"redis","held":N[,"redis_up":bool]}.
  std::string status_json() const;
  MemoryStore& memory() { return memory_; }

  struct RedisState;  // (store.cpp)

 private:
  MemoryStore memory_;
  std::shared_ptr<RedisState> redis_;  // null with responses.store: memory
};

}  // namespace sluice::conversations
