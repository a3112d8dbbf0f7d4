#include "keys/keys.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include "common/text.hpp"

namespace sluice::keys {

namespace {

// One digest context per thread, reused (no allocation per lookup).
struct Ctx {
  EVP_MD_CTX* p = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(p); }
};

// SHA-256 fetched once: EVP_sha256() makes every EVP_DigestInit_ex look the algorithm up
// in the provider store again (a lock and a property query per call: libcrypto's share of
// the gateway's samples in bench/profile.sh went from 2.1 % to 1.1 % without it).
const EVP_MD* sha256_md() noexcept {
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched ? fetched : EVP_sha256();
  }();
  return md;
}

void sha256(EVP_MD_CTX* c, std::string_view a, std::string_view b, unsigned char* out) noexcept {
  unsigned int len = 0;
  EVP_DigestInit_ex(c, sha256_md(), nullptr);
  EVP_DigestUpdate(c, a.data(), a.size());
  EVP_DigestUpdate(c, b.data(), b.size());
  EVP_DigestFinal_ex(c, out, &len);
}

std::string_view bytes(const auto& a) { return {reinterpret_cast<const char*>(a.data()), a.size()}; }

}  // namespace

Hasher::Hasher(std::string_view server_key) {
  std::array<unsigned char, 64> k{};
  if (server_key.empty()) {
    if (RAND_bytes(k.data(), 32) != 1) throw std::runtime_error("keys: no random bytes for the key hash");
  } else if (server_key.size() > k.size()) {  // HMAC: a long key is hashed first
    Ctx c;
    sha256(c.p, server_key, {}, k.data());
  } else {
    __builtin_memcpy(k.data(), server_key.data(), server_key.size());
  }
  for (std::size_t i = 0; i < k.size(); ++i) {
    ipad_[i] = k[i] ^ 0x36;
    opad_[i] = k[i] ^ 0x5c;
  }
}

Digest Hasher::digest(std::string_view secret) const noexcept {
  thread_local Ctx c;
  std::array<unsigned char, 32> inner{};
  Digest d{};
  sha256(c.p, bytes(ipad_), secret, inner.data());
  sha256(c.p, bytes(opad_), bytes(inner), d.data());
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
