#pragma once
// Stored responses of the Responses API: what `store` keeps and `previous_response_id`
// continues, by tenant. A response of one tenant is never seen by another. In this
// process's memory, or in Redis (responses.store: redis) or the history's database
// (responses.store: database) so that every instance of a fleet sees them, with this
// process's memory as the fallback while that is down.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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
  // This request's own input among `items` (GET .../input_items): from, how many.
  std::size_t input_from = 0, input_count = 0;
  // Not (yet) in Redis: stored while Redis was down, its SET still in flight, or refused.
  // This instance's memory answers for it until Redis confirms it.
  bool local_only = false;
  std::size_t bytes() const noexcept { return response.size() + items.size() + 128; }
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

// A database behind the store (responses.store: database; the gateway gives it the
// history's). Blocking calls, made on the store's own thread, one at a time.
class Durable {
 public:
  virtual ~Durable() = default;
  // The tenant's unexpired response; nullopt when the database failed.
  virtual std::optional<std::optional<StoredResponse>> get(std::string_view tenant, std::string_view id) = 0;
  // Kept for `ttl`; false when the database failed.
  virtual bool put(std::string_view tenant, std::string_view id, const StoredResponse& r, std::chrono::milliseconds ttl) = 0;
  // Whether it was there; nullopt when the database failed.
  virtual std::optional<bool> erase(std::string_view tenant, std::string_view id) = 0;
  virtual bool up() const = 0;
};

// The process's store, as configured (responses.store), and its workers' views.
class Store {
 public:
  // `durable`: the database, with responses.store: database.
  explicit Store(const config::Config& cfg, std::unique_ptr<Durable> durable = nullptr);
  ~Store();
  std::unique_ptr<WorkerStore> for_worker(boost::asio::any_io_executor ex);
  // For /infra: {"backend":"memory"|"redis"|"database","held_here":N[,"redis_up"|"database_up":bool]}.
  std::string status_json() const;
  MemoryStore& memory() { return memory_; }

  struct RedisState;     // (store.cpp)
  struct DatabaseState;  // (database.cpp)

 private:
  MemoryStore memory_;
  std::shared_ptr<RedisState> redis_;        // with responses.store: redis
  std::shared_ptr<DatabaseState> database_;  // with responses.store: database
};

// A worker's view of a database store (database.cpp).
std::unique_ptr<WorkerStore> database_worker(std::shared_ptr<Store::DatabaseState> st, MemoryStore& memory);
std::shared_ptr<Store::DatabaseState> database_state(std::unique_ptr<Durable> durable, std::chrono::milliseconds ttl);
bool database_up(const Store::DatabaseState& st);
void join_database(Store::DatabaseState& st);

}  // namespace sluice::conversations
