#include "gateway/cache_admin.hpp"

#include <array>
#include <charconv>

#include "cache/cache.hpp"
#include "common/text.hpp"
#include "history/history.hpp"

namespace sluice::gateway {

namespace {

constexpr std::size_t kDefaultLimit = 100, kMaxLimit = 1000;

AdminAnswer bad(std::string message, std::string param) {
  return {Reason::invalid_request, std::move(message), std::move(param)};
}

}  // namespace

boost::asio::awaitable<AdminAnswer> cache_admin(cache::WorkerCache& cache, std::string_view method,
                                                std::string_view qs) {
  static constexpr std::array<std::string_view, 4> kAllowed{"route", "limit", "key", "all"};
  std::string error;
  const auto params = history::parse_query_params(qs, kAllowed, error);
  if (!params) co_return bad(std::move(error), "query");
  std::string route, hash;
  std::size_t limit = kDefaultLimit;
  bool all = false;
  for (const auto& p : *params) {
    if (p.name == "route") {
      route = p.value;
    } else if (p.name == "key") {
      if (!cache::valid_hash(p.value)) co_return bad("key: expected the 64 hex digits of X-Sluice-Cache-Key", "key");
      hash = p.value;
    } else if (p.name == "all") {
      if (p.value != "true") co_return bad("all: expected true", "all");
      all = true;
    } else if (p.name == "limit") {
      std::size_t n = 0;
      auto r = std::from_chars(p.value.data(), p.value.data() + p.value.size(), n);
      if (r.ec != std::errc() || r.ptr != p.value.data() + p.value.size() || n < 1 || n > kMaxLimit) {
        co_return bad("limit: expected an integer from 1 to " + std::to_string(kMaxLimit), "limit");
      }
      limit = n;
    }
  }
  if (method == "GET" || method == "HEAD") {
    if (!hash.empty() || all) co_return bad("GET lists entries: use route and limit (key and all are for DELETE)", "query");
    auto list = co_await cache.list(route, limit);
    std::string body = R"({"object":"list","data":[)";
    bool first = true;
    for (const auto& l : list) {
      if (!first) body += ',';
      first = false;
      body += R"({"route":)";
      append_json_string(body, l.key.route);
      body += R"(,"key":")" + l.key.hash + R"(","bytes":)" + std::to_string(l.bytes) +
              R"(,"tokens":)" + std::to_string(l.tokens) + R"(,"stored_ms":)" + std::to_string(l.stored_ms) +
              R"(,"ttl_ms":)" + std::to_string(l.ttl_ms) + "}";
    }
    body += "]}";
    co_return AdminAnswer{Reason::ok, std::move(body), {}};
  }
  if (method != "DELETE") co_return AdminAnswer{Reason::method_not_allowed, "use GET or DELETE for /admin/cache", {}};
  if (hash.empty() && route.empty() && !all) {
    co_return bad("say what to drop: key=<hash>, route=<alias> or all=true", "query");
  }
  if (all && (!hash.empty() || !route.empty())) co_return bad("all=true drops everything: give it alone", "all");
  auto n = co_await cache.drop(route, hash);
  if (!n) {
    co_return AdminAnswer{Reason::store_unavailable,
                          "the shared cache (Redis) is unreachable: only this instance's copies were dropped", {}};
  }
  co_return AdminAnswer{Reason::ok, R"({"dropped":)" + std::to_string(*n) + "}", {}};
}

}  // namespace sluice::gateway
