#pragma once
// Internal to src/cache: this process's layer of the cache (memory.cpp).
#include <chrono>
#include <list>
#include <mutex>
#include <unordered_map>

#include "cache/cache.hpp"

namespace sluice::cache {

struct Cache::Memory {
  explicit Memory(std::size_t max_bytes) : max_bytes_(max_bytes) {}
  std::optional<Entry> get(std::string_view hash);
  void put(const Key& key, Entry e, std::chrono::milliseconds ttl);
  // One entry (hash set; of `route` when set too), a route's, or all (both empty).
  std::uint64_t drop(std::string_view route, std::string_view hash);
  std::vector<Listed> list(std::string_view route, std::size_t limit) const;
  std::size_t size() const;
  std::size_t bytes() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Node {
    Key key;
    Entry entry;
    Clock::time_point expires;
    std::size_t bytes;
  };
  using Iter = std::list<Node>::iterator;
  void drop(Iter it);

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Node> order_;  // least recently used first
  std::unordered_map<std::string, Iter> index_;
  std::size_t used_ = 0;
  std::uint64_t puts_ = 0;
};

}  // namespace sluice::cache
