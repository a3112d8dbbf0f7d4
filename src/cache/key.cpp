// The key of a request: SHA-256 over a version, the tenant scope, the route and the
// request normalised (object keys sorted at every level; the fields that do not change
// the answer left out).
#include <openssl/evp.h>

#include <algorithm>
#include <boost/json.hpp>
#include <vector>

#include "cache/cache.hpp"
#include "llm/chat.hpp"

namespace sluice::cache {

namespace json = boost::json;

namespace {

// Top-level fields that change nothing in the answer: how it is delivered (stream,
// stream_options), who asks (user, safety_identifier, metadata), what the upstream keeps
// or bills (store, prompt_cache_key, prompt_cache_retention, service_tier), and the model
// (the route stands for it).
constexpr std::string_view kIgnored[] = {"model",          "stream",          "stream_options",
                                          "user",           "safety_identifier", "metadata",
                                          "store",          "prompt_cache_key", "prompt_cache_retention",
                                          "service_tier"};

void canonical(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: {
      const auto& o = v.get_object();
      std::vector<const json::key_value_pair*> kv;
      kv.reserve(o.size());
      for (const auto& e : o) kv.push_back(&e);
      std::sort(kv.begin(), kv.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
      out += '{';
      bool first = true;
      for (const auto* e : kv) {
        if (!first) out += ',';
        first = false;
        out += json::serialize(json::string_view(e->key()));
        out += ':';
        canonical(out, e->value());
      }
      out += '}';
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (!first) out += ',';
        first = false;
        canonical(out, e);
      }
      out += ']';
      return;
    }
    default: out += json::serialize(v);
  }
}

bool zero(const json::value* v) { return v && v->is_number() && v->to_number<double>() == 0.0; }
bool set(const json::value* v) { return v && !v->is_null(); }

}  // namespace

Key key_of(const llm::ChatRequest& req, std::string_view route, std::string_view scope) {
  std::string text = "v1\n";
  text += scope;
  text += '\n';
  text += route;
  text += '\n';
  json::object kept;
  for (const auto& e : req.body) {
    if (std::find(std::begin(kIgnored), std::end(kIgnored), std::string_view(e.key())) == std::end(kIgnored)) {
      kept.emplace(e.key(), e.value());
    }
  }
  canonical(text, kept);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  Key k{std::string(route), std::string()};
  k.hash.reserve(2 * len);
  for (unsigned i = 0; i < len; ++i) {
    k.hash += kHex[md[i] >> 4];
    k.hash += kHex[md[i] & 15];
  }
  return k;
}

bool deterministic(const llm::ChatRequest& req) {
  const json::object& b = req.body;
  if (zero(b.if_contains("temperature")) || set(b.if_contains("seed"))) return true;
  if (const auto* o = b.if_contains("options"); o && o->is_object()) {
    const auto& opts = o->get_object();
    if (zero(opts.if_contains("temperature")) || set(opts.if_contains("seed"))) return true;
  }
  return false;
}

}  // namespace sluice::cache
