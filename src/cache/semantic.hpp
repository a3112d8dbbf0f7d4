#pragma once
// The response cache's semantic stage (docs/cache.md, "Semantic stage"): a request the
// exact key misses may be answered with the kept answer of a request that says the same
// in other words. Two stages, cheapest first:
//   1. SimHash: the 64-bit SimHash of the prompt's words. By default (distance 0) only a
//      kept prompt of the same words is the same question (case, punctuation and spacing
//      aside; checked by a hash of the words, not the SimHash alone); a route may accept
//      near-duplicates within a few bits, also bounded by its threshold. No model call.
//   2. Embeddings: the prompt's embedding (a configured embedding route) against the kept
//      prompts' with a nearest-neighbour search (hnswlib's HNSW graph, inner product over
//      unit vectors: the cosine); a neighbour at or above the route's threshold is a hit.
// Matches are looked for only among requests alike in everything but their messages' text
// (a partition: the tenant scope, the route, its backends, every parameter, the roles of
// the messages), so a paraphrase never gets an answer made for other parameters. The index
// holds the exact key of each kept answer: a match is served through the exact cache, and
// one whose answer expired there is forgotten.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::config {
struct Route;
enum class Provider;
}  // namespace sluice::config
namespace sluice::llm {
struct ChatRequest;
}

namespace sluice::cache {

// SimHash (Charikar) over the text's words and word pairs, lower-cased, punctuation
// ignored; long runs without spaces (Chinese, Japanese) as overlapping 2-character
// shingles.
std::uint64_t simhash(std::string_view text);
int hamming(std::uint64_t a, std::uint64_t b) noexcept;
// A hash of the text's words as SimHash reads them (lower-cased, punctuation ignored): two
// texts with the same words in the same order have the same.
std::uint64_t words_hash(std::string_view text);

// The prompt as the semantic stage compares it: each message's text as "role: text"
// lines ("role(name): text" with a name; with `tools`, each tool call as
// "role call: function(arguments)" and a tool result as "tool(call id): text"). Empty when
// the request is not one for it: a part that is not text (images, audio, files), or
// (unless `tools`) tools, tool calls or tool results.
std::string semantic_text(const llm::ChatRequest& req, bool tools);

// The partition of a request (64 hex digits): its exact key without the messages' text
// (their roles and speakers' names stay).
std::string partition_of(const config::Route& route, const llm::ChatRequest& req, std::string_view scope);

// The embedding route's call: path and body for `provider` (OpenAI-compatible or Ollama),
// and the one vector its answer holds, scaled to unit length (nullopt for anything else:
// no vector, several, a value that is not finite, all zeros).
std::string embedding_target(config::Provider provider, std::string_view path_prefix);
std::string embedding_body(std::string_view model, std::string_view text);
std::optional<std::vector<float>> read_embedding(std::string_view body);

// A kept answer as the index knows it: where (route, partition; `scope`: the tenant, or ""
// on a shared route: what partitions are counted by), its exact key's hash, the prompt's
// SimHash, words hash and embedding (empty when there was none).
struct Remembered {
  std::string route, partition, scope, hash;
  std::uint64_t simhash = 0, words = 0;
  std::vector<float> vector;
};
// Its form in the fleet's stream (Redis): route, partition, scope, hash, SimHash and words
// hash (16 hex digits each), the vector's float32 little-endian bytes (at most
// kMaxDimensions).
inline constexpr std::size_t kMaxDimensions = 16384;
std::vector<std::string> encode_fields(const Remembered& r);
std::optional<Remembered> decode_fields(std::span<const std::string> field_values);  // f1 v1 f2 v2...

struct Match {
  std::string hash;         // the exact key of the kept answer
  double similarity = 0;    // cosine; for a SimHash match 1 - bits/64
  bool by_simhash = false;
};

// The process's index, shared by the workers. Each partition has its own lock, so a
// lookup waits at most for one insertion into its own partition; insertions (an HNSW
// graph update costs up to milliseconds) are made by a thread of the index's own
// (add_later), never on a worker.
class SemanticIndex {
 public:
  // Bounds: entries per partition (then the oldest is replaced), partitions, and the
  // bytes of them all (vectors and graph, estimated). Beyond the partitions or the bytes,
  // the least recently used partition of the scope (tenant) holding the most goes: one
  // tenant's many partitions never push out another's few.
  SemanticIndex(std::size_t max_entries, std::size_t max_partitions, std::size_t max_bytes = SIZE_MAX);
  ~SemanticIndex();

  // By SimHash: max_distance 0 = the same words (words hash); more = within that many
  // bits and at 1 - bits/64 >= threshold. -1: the stage is off.
  std::optional<Match> by_simhash(const std::string& route, const std::string& partition, std::uint64_t h,
                                  std::uint64_t words, int max_distance, double threshold);
  std::optional<Match> nearest(const std::string& route, const std::string& partition, std::span<const float> v,
                               double threshold);
  // Adds (or refreshes) an entry now; false when it was known already with its vector.
  // A vector of another length than the partition's starts the partition's graph afresh
  // (the embedding model changed).
  bool add(const Remembered& r);
  // The same, on the index's thread: returns at once (an entry is dropped, and counted,
  // when kMaxQueued wait already).
  void add_later(Remembered r);
  static constexpr std::size_t kMaxQueued = 10000;
  // Waits until the entries queued so far are in (tests, benchmarks).
  void settle();
  // Forgets the entry of `hash` (its answer is gone): in `partition`, or in every
  // partition of `route` when `partition` is empty (of every route when both are).
  void forget(const std::string& route, const std::string& partition, const std::string& hash);
  // Drops a route's partitions (every partition when `route` is empty).
  std::size_t drop(const std::string& route);

  std::size_t entries() const;
  std::size_t partitions() const;
  std::size_t bytes() const;
  std::uint64_t dropped() const;  // entries not added: the queue was full
  std::size_t queued() const;     // entries waiting for the index's thread

  struct Partition;
  struct Worker;

 private:
  std::shared_ptr<Partition> find(const std::string& route, const std::string& partition);
  void evict_locked();  // mu_ held
  mutable std::mutex mu_;
  std::size_t max_entries_, max_partitions_, max_bytes_;
  std::uint64_t tick_ = 0;
  std::atomic<std::int64_t> entries_{0}, bytes_{0};
  std::unordered_map<std::string, std::shared_ptr<Partition>> parts_;  // by route + '\n' + partition
  std::unique_ptr<Worker> worker_;
};

}  // namespace sluice::cache
