#include "keys/keys.hpp"

// SHA256_Init/Update/Final: deprecated in OpenSSL 3 for EVP, which cannot copy a digest
// state without an allocation before 3.1 (EVP_MD_CTX_copy_ex duplicates the provider's
// context); the key's HMAC needs exactly that copy, per request.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "common/text.hpp"

namespace sluice::keys {

namespace {

std::string_view bytes(const auto& a) { return {reinterpret_cast<const char*>(a.data()), a.size()}; }

}  // namespace

Hasher::Hasher(std::string_view server_key) {
  std::array<unsigned char, 64> k{};
  if (server_key.empty()) {
    if (RAND_bytes(k.data(), 32) != 1) throw std::runtime_error("keys: no random bytes for the key hash");
  } else if (server_key.size() > k.size()) {  // HMAC: a long key is hashed first
    SHA256(reinterpret_cast<const unsigned char*>(server_key.data()), server_key.size(), k.data());
  } else {
    __builtin_memcpy(k.data(), server_key.data(), server_key.size());
  }
  std::array<unsigned char, 64> ipad{}, opad{};
  for (std::size_t i = 0; i < k.size(); ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  static_assert(sizeof(SHA256_CTX) <= sizeof(State) && alignof(SHA256_CTX) <= alignof(State));
  for (auto [pad, state] : {std::pair{&ipad, &inner_}, std::pair{&opad, &outer_}}) {
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, pad->data(), pad->size());
    std::memcpy(state->bytes, &c, sizeof c);
    OPENSSL_cleanse(&c, sizeof c);
  }
  OPENSSL_cleanse(k.data(), k.size());
  OPENSSL_cleanse(ipad.data(), ipad.size());
  OPENSSL_cleanse(opad.data(), opad.size());
}

Digest Hasher::digest(std::string_view secret) const noexcept {
  SHA256_CTX c;
  std::array<unsigned char, 32> inner{};
  Digest d{};
  std::memcpy(&c, inner_.bytes, sizeof c);
  SHA256_Update(&c, secret.data(), secret.size());
  SHA256_Final(inner.data(), &c);
  std::memcpy(&c, outer_.bytes, sizeof c);
  SHA256_Update(&c, inner.data(), inner.size());
  SHA256_Final(d.data(), &c);
  return d;
}

std::string Hasher::hex(std::string_view secret) const {
  const auto d = digest(secret);
  std::string out;
  append_hex(out, bytes(d));
  return out;
}

std::string_view intern(std::string_view s) {
  static std::mutex mu;
  static std::unordered_set<std::string, StringHash, std::equal_to<>> strings;
  std::lock_guard lock(mu);
  auto it = strings.find(s);
  if (it == strings.end()) it = strings.emplace(s).first;
  return *it;  // (node-based: the characters never move)
}

namespace {
void intern_record_fields(Entry& e) {
  e.record_name = intern(e.key.name);
  e.record_tenant = intern(e.key.tenant);
  e.record_tier = intern(e.key.tier);
}
}  // namespace

bool parse_digest(std::string_view hex, Digest& out) noexcept {
  if (hex.size() != out.size() * 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

std::shared_ptr<const KeySet> KeySet::from_config(const std::vector<config::ApiKey>& keys, const Hasher& hasher,
                                                  const std::function<int(std::string_view)>& tier_index) {
  return build(keys, {}, hasher, tier_index);
}

std::shared_ptr<const KeySet> KeySet::build(const std::vector<config::ApiKey>& keys, const std::vector<Stored>& stored,
                                            const Hasher& hasher, const std::function<int(std::string_view)>& tier_index,
                                            std::vector<std::string>* shadowed) {
  auto set = std::make_shared<KeySet>();
  const auto tier_of = [&](const std::string& tier) { return tier_index ? tier_index(tier) : -1; };
  for (const auto& k : keys) {
    auto e = std::make_shared<Entry>();
    e->key = k;
    e->masked = mask_key(k.key);
    e->metrics_tier = tier_of(k.tier);
    e->from_config = true;
    intern_record_fields(*e);
    set->by_digest_.emplace(hasher.digest(k.key), Found{e, -1});
    set->add_name(e);
    set->entries_.push_back(std::move(e));
  }
  for (const auto& s : stored) {
    if (set->find_name(s.key.name)) {
      if (shadowed) shadowed->push_back(s.key.name);
      continue;
    }
    auto e = std::make_shared<Entry>();
    e->key = s.key;
    e->masked = s.masked;
    e->metrics_tier = tier_of(s.key.tier);
    e->from_config = false;
    e->expires_ms = s.expires_ms;
    intern_record_fields(*e);
    if (s.enabled) {
      // A digest already taken (a file key's secret) stays the file's.
      set->by_digest_.emplace(s.digest, Found{e, -1});
      if (s.has_old && s.old_until_ms >= 0) set->by_digest_.emplace(s.old_digest, Found{e, s.old_until_ms});
    }
    set->add_name(e);
    set->entries_.push_back(std::move(e));
  }
  return set;
}

const Entry* KeySet::find_name(std::string_view name) const noexcept {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Registry::Registry(std::shared_ptr<const KeySet> initial, std::shared_ptr<const Hasher> hasher)
    : set_(std::move(initial)), hasher_(std::move(hasher)) {
  version_.store(1, std::memory_order_release);
}

void Registry::install(std::shared_ptr<const KeySet> next) {
  std::lock_guard lock(mu_);
  set_ = std::move(next);
  version_.fetch_add(1, std::memory_order_acq_rel);
}

std::shared_ptr<const KeySet> Registry::current() const {
  std::lock_guard lock(mu_);
  return set_;
}

}  // namespace sluice::keys
