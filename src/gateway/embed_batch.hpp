#pragma once
// Embeddings micro-batching (docs/api.md, "Embeddings micro-batching"): on a route with
// `embedding_batch`, embeddings requests bound for one backend that arrive within the
// window (and can share a call: llm::embedding_batch_key) are sent upstream as one call of
// all their inputs, up to max_inputs, and each gets its own vectors and its share of the
// usage back. The first request of a batch waits at most the window; a full batch leaves
// at once. Per worker (requests of one worker thread only): no locks.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "http/client.hpp"

namespace sluice::config {
struct EmbeddingBatch;
}
namespace sluice::llm {
struct ChatRequest;
}

namespace sluice::gateway {

struct BackendRuntime;

// The process's counters (/metrics).
struct BatchCounters {
  std::atomic<std::uint64_t> calls{0};     // upstream calls made for batched requests
  std::atomic<std::uint64_t> requests{0};  // requests they served
  std::atomic<std::uint64_t> inputs{0};    // inputs they carried
  void render(std::string& out) const;
};

// What one request got: a transport error, or the upstream's status and body (its own
// share of the answer for a 2xx; the whole error answer otherwise).
struct BatchReply {
  std::optional<http::ClientError> error;
  int status = 0;
  std::string body;
  std::string retry_after;
  // The call failed for a reason one request may have caused (a 4xx other than 429, an
  // answer too large or that could not be split): the request goes alone, unbatched, so
  // that only the one at fault fails.
  bool alone = false;
  // Not the batch's first request: the call's outcome is the first's to count (backend
  // health, breakers), once.
  bool follower = false;
};

class EmbedBatcher {
 public:
  EmbedBatcher(boost::asio::any_io_executor ex, http::Client& client, BatchCounters& counters);
  ~EmbedBatcher();
  // `headers`: the upstream call's (credentials, trace) as the first request of the batch
  // sends them. `deadline`: this request's; the call gets the earliest of the batch's.
  boost::asio::awaitable<BatchReply> submit(const BackendRuntime& be, const config::EmbeddingBatch& cfg,
                                            const llm::ChatRequest& req, http::HeaderList headers,
                                            std::chrono::steady_clock::time_point deadline,
                                            std::chrono::milliseconds connect_timeout, std::size_t max_bytes);

  struct State;

 private:
  std::shared_ptr<State> st_;
};

}  // namespace sluice::gateway
