// The key of a request: SHA-256 over a version, the tenant scope, the route and the
// request normalised (object keys sorted at every level; the fields that do not change
// the answer left out).
#include <openssl/evp.h>

#include <algorithm>
#include <boost/json.hpp>
#include <vector>

#include "cache/cache.hpp"
#include "common/text.hpp"
#include "config/models.hpp"
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
    case json::kind::double_: {
      // 0 and 0.0 (and 1e0) are one value.
      const double d = v.get_double();
      if (d == static_cast<double>(static_cast<std::int64_t>(d)) && d > -9.0e15 && d < 9.0e15) {
        out += std::to_string(static_cast<std::int64_t>(d));
      } else {
        out += json::serialize(v);
      }
      return;
    }
    default: out += json::serialize(v);
  }
}

// A message's content given as one text part is the same as that text.
const json::value& content_of(const json::value& c) {
  if (const auto* a = c.if_array(); a && a->size() == 1) {
    if (const auto* part = (*a)[0].if_object()) {
      const auto* type = part->if_contains("type");
      const auto* text = part->if_contains("text");
      if (type && type->is_string() && type->get_string() == "text" && text && text->is_string() && part->size() == 2) {
        return *text;
      }
    }
  }
  return c;
}

// The request body, normalised, without copying it: its top-level keys sorted (the ones
// that do not change the answer left out, max_completion_tokens named max_tokens), each
// message with its content normalised.
// roles_only: each message is its role alone (the semantic stage's partition: requests
// alike but for their messages' text).
void canonical_body(std::string& out, const json::object& body, bool roles_only = false) {
  std::vector<std::pair<std::string_view, const json::value*>> kv;
  kv.reserve(body.size());
  for (const auto& e : body) {
    std::string_view k = e.key();
    if (std::find(std::begin(kIgnored), std::end(kIgnored), k) != std::end(kIgnored)) continue;
    if (k == "max_completion_tokens") k = "max_tokens";  // the same bound, by its newer name
    if (std::any_of(kv.begin(), kv.end(), [k](const auto& p) { return p.first == k; })) continue;
    kv.emplace_back(k, &e.value());
  }
  std::sort(kv.begin(), kv.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out += '{';
  bool first = true;
  for (const auto& [k, v] : kv) {
    if (!first) out += ',';
    first = false;
    out += json::serialize(json::string_view(k.data(), k.size()));
    out += ':';
    if (k != "messages" || !v->is_array()) {
      canonical(out, *v);
      continue;
    }
    out += '[';
    bool first_m = true;
    for (const auto& m : v->get_array()) {
      if (!first_m) out += ',';
      first_m = false;
      const auto* o = m.if_object();
      if (roles_only) {
        // Who speaks: the role, and the name of the speaker when given.
        const auto* role = o ? o->if_contains("role") : nullptr;
        canonical(out, role ? *role : json::value());
        if (const auto* name = o ? o->if_contains("name") : nullptr) {
          out += '/';
          canonical(out, *name);
        }
        continue;
      }
      if (!o || !o->contains("content")) {
        canonical(out, m);
        continue;
      }
      std::vector<const json::key_value_pair*> mk;
      for (const auto& e : *o) mk.push_back(&e);
      std::sort(mk.begin(), mk.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
      out += '{';
      bool first_k = true;
      for (const auto* e : mk) {
        if (!first_k) out += ',';
        first_k = false;
        out += json::serialize(json::string_view(e->key()));
        out += ':';
        canonical(out, e->key() == "content" ? content_of(e->value()) : e->value());
      }
      out += '}';
    }
    out += ']';
  }
  out += '}';
}

bool zero(const json::value* v) { return v && v->is_number() && v->to_number<double>() == 0.0; }
bool set(const json::value* v) { return v && !v->is_null(); }

// What serves the route: a reload that changes its backends' models starts afresh.
std::string served_by(const config::Route& route) {
  std::string served;
  for (const auto& b : route.backends) {
    served += config::to_string(b.provider);
    served += '/';
    served += b.model;
    served += '\n';
  }
  return served;
}

std::string digest(std::string_view version, const llm::ChatRequest& req, std::string_view route, std::string_view scope,
                   std::string_view served, bool roles_only) {
  std::string text(version);
  text += '\n';
  text += scope;
  text += '\n';
  text += route;
  text += '\n';
  text += served;
  text += '\n';
  canonical_body(text, req.body, roles_only);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  append_hex(hex, std::string_view(reinterpret_cast<const char*>(md), len));
  return hex;
}

}  // namespace

Key key_of(const config::Route& route, const llm::ChatRequest& req, std::string_view scope) {
  return key_of(req, route.alias, scope, served_by(route));
}

Key key_of(const llm::ChatRequest& req, std::string_view route, std::string_view scope, std::string_view served) {
  return Key{std::string(route), digest("v2", req, route, scope, served, false)};
}

std::string partition_of(const config::Route& route, const llm::ChatRequest& req, std::string_view scope) {
  return digest("p1", req, route.alias, scope, served_by(route), true);
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
