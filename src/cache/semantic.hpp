#pragma once
// The response cache's semantic stage (docs/cache.md, "Semantic stage"): a request the
// exact key misses may be answered with the kept answer of a request that says the same
// in other words. Two stages, cheapest first:
//   1. SimHash: the 64-bit SimHash of the prompt's words; a kept prompt within a few bits
//      is the same question (case, punctuation, a word more or less). No model call.
//   2. Embeddings: the prompt's embedding (a configured embedding route) against the kept
//      prompts' with a nearest-neighbour search (hnswlib's HNSW graph, inner product over
//      unit vectors: the cosine); a neighbour at or above the route's threshold is a hit.
// Matches are looked for only among requests alike in everything but their messages' text
// (a partition: the tenant scope, the route, its backends, every parameter, the roles of
// the messages), so a paraphrase never gets an answer made for other parameters. The index
// holds the exact key of each kept answer: a match is served through the exact cache, and
// one whose answer expired there is forgotten.
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

// The prompt as the semantic stage compares it: each message's text as "role: text"
// lines. Empty when the request is not one for it: a part that is not text (images,
// audio, files), or (unless `tools`) tools, tool calls or tool results.
std::string semantic_text(const llm::ChatRequest& req, bool tools);

// The partition of a request (64 hex digits): its exact key without the messages' text.
std::string partition_of(const config::Route& route, const llm::ChatRequest& req, std::string_view scope);

// The embedding route's call: path and body for `provider` (OpenAI-compatible or Ollama),
// and the one vector its answer holds, scaled to unit length (nullopt for anything else:
// no vector, several, a value that is not finite, all zeros).
std::string embedding_target(config::Provider provider, std::string_view path_prefix);
std::string embedding_body(std::string_view model, std::string_view text);
std::optional<std::vector<float>> read_embedding(std::string_view body);

// A kept answer as the index knows it: where (route, partition), its exact key's hash,
// the prompt's SimHash and embedding (empty when there was none).
struct Remembered {
  std::string route, partition, hash;
  std::uint64_t simhash = 0;
  std::vector<float> vector;
};
// Its form in the fleet's stream (Redis): route, partition, hash, SimHash (16 hex
// digits), the vector's float32 little-endian bytes.
std::vector<std::string> encode_fields(const Remembered& r);
std::optional<Remembered> decode_fields(std::span<const std::string> field_values);  // f1 v1 f2 v2...

struct Match {
  std::string hash;         // the exact key of the kept answer
  double similarity = 0;    // cosine; for a SimHash match 1 - bits/64
  bool by_simhash = false;
};

// The process's index, shared by the workers (one mutex: lookups are a few µs).
class SemanticIndex {
 public:
  SemanticIndex(std::size_t max_entries, std::size_t max_partitions);
  ~SemanticIndex();

  std::optional<Match> by_simhash(const std::string& route, const std::string& partition, std::uint64_t h,
                                  int max_distance);
  std::optional<Match> nearest(const std::string& route, const std::string& partition, std::span<const float> v,
                               double threshold);
  // Adds (or refreshes) an entry; false when it was known already with its vector, or its
  // vector's length is not the partition's.
  bool add(const Remembered& r);
  // Forgets the entry of `hash` (its answer is gone): in `partition`, or in every
  // partition of `route` when `partition` is empty.
  void forget(const std::string& route, const std::string& partition, const std::string& hash);
  // Drops a route's partitions (every partition when `route` is empty).
  std::size_t drop(const std::string& route);

  std::size_t entries() const;
  std::size_t partitions() const;

  struct Partition;

 private:
  Partition* find(const std::string& route, const std::string& partition);
  mutable std::mutex mu_;
  std::size_t max_entries_, max_partitions_;
  std::uint64_t tick_ = 0;
  std::size_t entries_ = 0;
  std::unordered_map<std::string, std::unique_ptr<Partition>> parts_;  // by route + '\n' + partition
};

}  // namespace sluice::cache
