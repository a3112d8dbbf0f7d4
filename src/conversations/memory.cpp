#include "conversations/store.hpp"

#include <list>
#include <mutex>
#include <unordered_map>

namespace sluice::conversations {

namespace {

class Memory {
 public:
  Memory(std::chrono::milliseconds ttl, std::size_t max_bytes) : ttl_(ttl), max_bytes_(max_bytes) {}

  std::optional<StoredResponse> get(std::string_view tenant, std::string_view id) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key(tenant, id));
    if (it == index_.end()) return std::nullopt;
    if (Clock::now() >= it->second->expires) {
      drop(it->second);
      return std::nullopt;
    }
    return it->second->value;
  }

  void put(std::string_view tenant, std::string_view id, StoredResponse r) {
    const std::size_t bytes = r.bytes();
    if (bytes > max_bytes_) return;
    std::lock_guard lock(mu_);
    std::string k = key(tenant, id);
    if (auto it = index_.find(k); it != index_.end()) drop(it->second);
    const auto now = Clock::now();
    // The oldest first: expired ones, then as many as the new one needs.
    while (!order_.empty() && (order_.front().expires <= now || used_ + bytes > max_bytes_)) drop(order_.begin());
    order_.push_back(Entry{k, std::move(r), now + ttl_, bytes});
    index_.emplace(std::move(k), std::prev(order_.end()));
    used_ += bytes;
  }

  void confirm(std::string_view tenant, std::string_view id) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key(tenant, id)); it != index_.end()) it->second->value.local_only = false;
  }

  bool erase(std::string_view tenant, std::string_view id) {
    std::lock_guard lock(mu_);
    auto it = index_.find(key(tenant, id));
    if (it == index_.end()) return false;
    drop(it->second);
    return true;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return index_.size();
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string key;
    StoredResponse value;
    Clock::time_point expires;
    std::size_t bytes;
  };
  using Iter = std::list<Entry>::iterator;

  static std::string key(std::string_view tenant, std::string_view id) {
    std::string k(tenant);
    k += '\n';  // (no tenant name holds a newline)
    k += id;
    return k;
  }

  void drop(Iter it) {
    used_ -= it->bytes;
    index_.erase(it->key);
    order_.erase(it);
  }

  const std::chrono::milliseconds ttl_;
  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // by the time stored (equal TTLs: also by expiry)
  std::unordered_map<std::string, Iter> index_;
  std::size_t used_ = 0;
};

}  // namespace

struct MemoryStore::Impl {
  Impl(std::chrono::milliseconds ttl, std::size_t max_bytes) : m(ttl, max_bytes) {}
  Memory m;
};

MemoryStore::MemoryStore(std::chrono::milliseconds ttl, std::size_t max_bytes)
    : impl_(std::make_unique<Impl>(ttl, max_bytes)) {}
MemoryStore::~MemoryStore() = default;
std::optional<StoredResponse> MemoryStore::get(std::string_view tenant, std::string_view id) {
  return impl_->m.get(tenant, id);
}
void MemoryStore::put(std::string_view tenant, std::string_view id, StoredResponse r) {
  impl_->m.put(tenant, id, std::move(r));
}
bool MemoryStore::erase(std::string_view tenant, std::string_view id) { return impl_->m.erase(tenant, id); }
void MemoryStore::confirm(std::string_view tenant, std::string_view id) { impl_->m.confirm(tenant, id); }
std::size_t MemoryStore::size() const { return impl_->m.size(); }

}  // namespace sluice::conversations
