#pragma once
// The response cache (docs/cache.md): answers kept by the key of the request that asked
// for them, and served again to the same request. The key is a hash of the normalised
// request (route, messages, every field that changes the answer), scoped to the tenant
// unless the route shares its entries. Kept in this process's memory, or in Redis for the
// whole fleet with this process's memory in front. The request filter that uses it is
// filters/cache.cpp.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/flight.hpp"
#include "cache/semantic.hpp"

namespace sluice::config {
struct Config;
struct Route;
}
namespace sluice::llm {
struct ChatRequest;
}

namespace sluice::cache {

// One kept answer: the chat.completion (the form every client API is made from).
struct Entry {
  std::string completion;
  std::int64_t prompt_tokens = 0, completion_tokens = 0;  // what generating it cost
  std::int64_t stored_ms = 0;                             // unix ms
  std::size_t bytes() const noexcept { return completion.size() + 96; }
};

// Where an entry is: its route (alias) and hash (64 hex digits, over the tenant scope, the
// route and the normalised request).
struct Key {
  std::string route;
  std::string hash;
};

// The key of `req` on the route named `route`, served by `served` (its backends, as the
// overload below writes them); `scope`: the tenant, or "" for a route that shares entries.
Key key_of(const llm::ChatRequest& req, std::string_view route, std::string_view scope, std::string_view served = {});
Key key_of(const config::Route& route, const llm::ChatRequest& req, std::string_view scope);
// Whether `h` is a key's hash (64 lower-case hex digits).
bool valid_hash(std::string_view h);
// Whether the request asks for one answer only: temperature 0 (top-level or Ollama
// options) or a seed.
bool deterministic(const llm::ChatRequest& req);

// An entry for inspection (GET /admin/cache).
struct Listed {
  Key key;
  std::size_t bytes = 0;
  std::int64_t stored_ms = 0;
  std::int64_t ttl_ms = -1;  // left
  std::int64_t tokens = 0;   // prompt + completion
};

// Counters of the whole process (metrics, /infra).
struct Counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, stores{0}, bypassed{0}, store_errors{0};
  std::atomic<std::uint64_t> bytes_served{0}, tokens_saved{0};
  std::atomic<std::uint64_t> coalesced{0}, coalesced_tokens{0};  // followers; the tokens they did not generate
  // The semantic stage: hits by SimHash and by embedding (also counted in hits), the
  // embedding calls made and those that failed, matches whose answer was gone.
  std::atomic<std::uint64_t> simhash_hits{0}, embedding_hits{0}, embeddings{0}, embedding_errors{0}, stale_matches{0};
};

// One worker's view (used on that worker's thread only).
class WorkerCache {
 public:
  virtual ~WorkerCache() = default;
  // A whole answer (llm::keepable: what is put is checked by the caller, what Redis
  // returns is checked here).
  virtual boost::asio::awaitable<std::optional<Entry>> get(Key key) = 0;
  // Kept in the background: the request does not wait for it.
  virtual void put(Key key, Entry e, std::chrono::milliseconds ttl) = 0;
  // Operators (/admin/cache): the entries, at most `limit` (of `route` when not empty).
  virtual boost::asio::awaitable<std::vector<Listed>> list(std::string route, std::size_t limit) = 0;
  // Drops one entry (hash set), a route's (route set) or all; the count dropped, or
  // nullopt when the shared store is unreachable (then only this instance's were).
  // (Also forgets them in the semantic index.)
  virtual boost::asio::awaitable<std::optional<std::uint64_t>> drop(std::string route, std::string hash) = 0;
  // The semantic stage: the index (the process's), and an entry kept (added here, and
  // sent to the fleet's other instances with store redis).
  virtual SemanticIndex& semantic() = 0;
  virtual void remember(Remembered r) = 0;
};

class Cache {
 public:
  explicit Cache(const config::Config& cfg);
  ~Cache();
  std::unique_ptr<WorkerCache> for_worker(boost::asio::any_io_executor ex);
  Counters& counters() { return counters_; }
  Flights& flights() { return *flights_; }
  // /infra: {"store":..., "entries_here":N, "bytes_here":N, "hits":..., [,"redis_up":bool]}.
  std::string status_json() const;
  // Prometheus text (sluice_cache_*).
  void render_metrics(std::string& out) const;

  struct Memory;  // (memory.cpp)
  struct Shared;  // (cache.cpp)

 private:
  Counters counters_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<Flights> flights_;
};

}  // namespace sluice::cache
