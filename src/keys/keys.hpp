#pragma once
// The API keys in force: an immutable set, looked up by a keyed hash (HMAC-SHA256 with
// a server secret) of the secret a client presents, and replaced whole when keys change
// (a configuration reload; the key store). A request keeps the set it was authenticated
// with alive (`Snapshot`), so a change never pulls a key from under a running request.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/keys.hpp"

namespace sluice::keys {

// HMAC-SHA256 of a secret under the server's key: what a key is found (and, in the key
// store, kept) by. The plain secret is never kept beside it.
using Digest = std::array<unsigned char, 32>;

class Hasher {
 public:
  // `server_key`: any bytes (a fleet shares one so that every instance finds the same
  // key by the same digest); empty: 32 random bytes, for this process only.
  explicit Hasher(std::string_view server_key = {});
  Digest digest(std::string_view secret) const noexcept;
  // Lower-case hex of digest(secret): how the key store writes it.
  std::string hex(std::string_view secret) const;

 private:
  // SHA-256's state after the key's inner and outer pads (a block each): each digest
  // starts from copies of them and compresses 2 blocks instead of 4. (libcrypto's
  // SHA256_CTX, 112 bytes, kept opaque here: keys.cpp checks the size.)
  struct alignas(8) State {
    unsigned char bytes[112];
  };
  State inner_{}, outer_{};
};

// Lower-case hex (64 characters) to a digest; false if it is not one.
bool parse_digest(std::string_view hex, Digest& out) noexcept;

// The same characters for the life of the process: what request records hold (they may
// wait in the access log's queue after the key set they came from was replaced). Never
// shrinks: bounded by the names, tenants and tiers ever seen.
std::string_view intern(std::string_view s);

struct Entry {
  config::ApiKey key;   // `key.key` (the plain secret) is empty for keys from the store
  // key.name, key.tenant and key.tier, interned: what request records point to.
  std::string_view record_name, record_tenant, record_tier;
  std::string masked;   // for logs and records: "sk-prod-***1a2b"
  int metrics_tier = -1;  // the tier's index in the metrics (-1: not a labelled tier)
  bool from_config = true;  // read-only at runtime (the file is its source)
  std::int64_t expires_ms = -1;  // Unix ms after which it is refused (-1: never)
  // When a request last used it (Unix ms, 0: not since this set was made), kept to the
  // second (note_use); and what of it the key store has been told (its poll thread).
  mutable std::atomic<std::int64_t> last_used_ms{0}, reported_ms{0};
  void note_use(std::int64_t now_ms) const noexcept {
    // At most one write a second per key: a hot key's line is not written by every request.
    if (now_ms - last_used_ms.load(std::memory_order_relaxed) >= 1000) {
      last_used_ms.store(now_ms, std::memory_order_relaxed);
    }
  }
};

// A key of the key store, as read: found by its digest (and, until old_until_ms, by its
// previous secret's: a rotation's grace).
struct Stored {
  config::ApiKey key;  // key.key empty
  std::string masked;
  Digest digest{};
  bool has_old = false;
  Digest old_digest{};
  std::int64_t old_until_ms = -1;
  std::int64_t expires_ms = -1;
  bool enabled = true;
};

struct DigestHash {
  std::size_t operator()(const Digest& d) const noexcept {
    std::size_t h;
    static_assert(sizeof h <= sizeof(Digest));
    __builtin_memcpy(&h, d.data(), sizeof h);  // already uniform: a cryptographic digest
    return h;
  }
};

class KeySet {
 public:
  // Keys from the configuration (`keys`, `keys_file`, SLUICE_API_KEYS). tier_index maps
  // a tier to its metrics label index (may be empty: -1 for all).
  static std::shared_ptr<const KeySet> from_config(const std::vector<config::ApiKey>& keys, const Hasher& hasher,
                                                   const std::function<int(std::string_view)>& tier_index = {});
  // The file's keys and the store's. A stored key named like a file key is left out (the
  // file wins; `shadowed` names it); a disabled one is listed but not found by digest.
  static std::shared_ptr<const KeySet> build(const std::vector<config::ApiKey>& keys, const std::vector<Stored>& stored,
                                             const Hasher& hasher,
                                             const std::function<int(std::string_view)>& tier_index = {},
                                             std::vector<std::string>* shadowed = nullptr);

  // The key with this digest, in force at now_ms (not expired; an old secret within its
  // grace); null if none.
  const Entry* find(const Digest& d, std::int64_t now_ms) const noexcept {
    auto it = by_digest_.find(d);
    if (it == by_digest_.end()) return nullptr;
    const Found& f = it->second;
    if (f.until_ms >= 0 && now_ms >= f.until_ms) return nullptr;
    if (f.entry->expires_ms >= 0 && now_ms >= f.entry->expires_ms) return nullptr;
    return f.entry.get();
  }
  const Entry* find_name(std::string_view name) const noexcept;
  // Every key, in the order given (configuration first).
  const std::vector<std::shared_ptr<const Entry>>& entries() const noexcept { return entries_; }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Found {
    std::shared_ptr<const Entry> entry;
    std::int64_t until_ms = -1;  // a rotated key's old secret: valid until then
  };
  void add_name(const std::shared_ptr<const Entry>& e) { by_name_.emplace(e->key.name, e.get()); }

  std::vector<std::shared_ptr<const Entry>> entries_;
  std::unordered_map<Digest, Found, DigestHash> by_digest_;
  std::unordered_map<std::string_view, const Entry*> by_name_;  // into entries_
};

// What a request holds: the key it was authenticated as, and the set that owns it.
struct Snapshot {
  std::shared_ptr<const KeySet> set;
  const Entry* entry = nullptr;
};

// The set in force. current() is read by every request: one relaxed atomic load when
// nothing changed since the caller's last look (Reader), a lock only after a change.
class Registry {
 public:
  Registry(std::shared_ptr<const KeySet> initial, std::shared_ptr<const Hasher> hasher);

  void install(std::shared_ptr<const KeySet> next);
  std::shared_ptr<const KeySet> current() const;
  std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }
  const Hasher& hasher() const noexcept { return *hasher_; }

  // A worker's view: keeps its own reference to the set, refreshed when the version moved.
  class Reader {
   public:
    explicit Reader(const Registry& r) : r_(r) {}
    const std::shared_ptr<const KeySet>& get() {
      const auto v = r_.version();
      if (v != seen_ || !set_) {
        set_ = r_.current();
        seen_ = v;
      }
      return set_;
    }
    // The key whose secret this is, in force at now_ms, or an empty entry.
    Snapshot find(std::string_view secret, std::int64_t now_ms) {
      Snapshot s{get(), nullptr};
      s.entry = s.set->find(r_.hasher().digest(secret), now_ms);
      return s;
    }

   private:
    const Registry& r_;
    std::shared_ptr<const KeySet> set_;
    std::uint64_t seen_ = ~std::uint64_t{0};
  };

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const KeySet> set_;
  std::atomic<std::uint64_t> version_{0};
  std::shared_ptr<const Hasher> hasher_;
};

}  // namespace sluice::keys
