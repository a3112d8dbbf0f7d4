// This process's layer: entries by hash, the least recently used dropped first beyond
// max_bytes, each until its own expiry. Thread-safe (the workers share it).
#include <list>
#include <mutex>
#include <unordered_map>

#include "cache/memory.hpp"
#include "llm/chat.hpp"

namespace sluice::cache {

std::optional<Entry> Cache::Memory::get(std::string_view hash) {
  std::lock_guard lock(mu_);
  auto it = index_.find(std::string(hash));
  if (it == index_.end()) return std::nullopt;
  if (Clock::now() >= it->second->expires) {
    drop(it->second);
    return std::nullopt;
  }
  order_.splice(order_.end(), order_, it->second);  // most recently used last
  return it->second->entry;
}

void Cache::Memory::put(const Key& key, Entry e, std::chrono::milliseconds ttl) {
  const std::size_t bytes = e.bytes() + key.route.size() + key.hash.size();
  if (bytes > max_bytes_ || ttl.count() <= 0) return;
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key.hash); it != index_.end()) drop(it->second);
  // Every 64th put also drops what expired (entries expire in no particular order).
  if (++puts_ % 64 == 0) {
    const auto now = Clock::now();
    for (auto it = order_.begin(); it != order_.end();) {
      auto next = std::next(it);
      if (it->expires <= now) drop(it);
      it = next;
    }
  }
  while (!order_.empty() && used_ + bytes > max_bytes_) drop(order_.begin());
  order_.push_back(Node{key, std::move(e), Clock::now() + ttl, bytes});
  index_.emplace(key.hash, std::prev(order_.end()));
  used_ += bytes;
}

std::uint64_t Cache::Memory::drop(std::string_view route, std::string_view hash) {
  std::lock_guard lock(mu_);
  if (!hash.empty()) {
    auto it = index_.find(std::string(hash));
    if (it == index_.end() || (!route.empty() && it->second->key.route != route)) return 0;
    drop(it->second);
    return 1;
  }
  std::uint64_t n = 0;
  for (auto it = order_.begin(); it != order_.end();) {
    auto next = std::next(it);
    if (route.empty() || it->key.route == route) {
      drop(it);
      ++n;
    }
    it = next;
  }
  return n;
}

std::vector<Listed> Cache::Memory::list(std::string_view route, std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<Listed> out;
  const auto now = Clock::now();
  for (auto it = order_.rbegin(); it != order_.rend() && out.size() < limit; ++it) {  // most recent first
    if (!route.empty() && it->key.route != route) continue;
    if (it->expires <= now) continue;
    out.push_back(Listed{.key = it->key,
                         .bytes = it->entry.completion.size(),
                         .stored_ms = it->entry.stored_ms,
                         .ttl_ms = std::chrono::duration_cast<std::chrono::milliseconds>(it->expires - now).count(),
                         .tokens = llm::saturating_add(std::max<std::int64_t>(it->entry.prompt_tokens, 0),
                                                       std::max<std::int64_t>(it->entry.completion_tokens, 0))});
  }
  return out;
}

std::size_t Cache::Memory::size() const {
  std::lock_guard lock(mu_);
  return index_.size();
}

std::size_t Cache::Memory::bytes() const {
  std::lock_guard lock(mu_);
  return used_;
}

void Cache::Memory::drop(Iter it) {
  used_ -= it->bytes;
  index_.erase(it->key.hash);
  order_.erase(it);
}

}  // namespace sluice::cache
