// The response cache: where answers are kept (`cache`) and which routes use it
// (`models[].cache`). See docs/cache.md.
#include <string>

#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Enum<CacheStore>& cache_store_enum() {
  static const Enum<CacheStore> e{"cache store", {{"memory", CacheStore::memory}, {"redis", CacheStore::redis}}};
  return e;
}

const Table<CacheSettings>& cache_table() {
  static const Table<CacheSettings> t{
      "cache",
      {
          choice("store", &CacheSettings::store, cache_store_enum(),
                 "Where cached answers live: this instance's memory, or Redis (the `redis` section) so that every "
                 "instance of a fleet serves what any one cached, with this instance's memory in front of it. While "
                 "Redis is down, lookups miss (the answers are generated) and `/infra` says so."),
          duration("ttl", &CacheSettings::ttl, Millis{1000},
                   "How long a cached answer is served again (a route may set its own)."),
          integer("max_bytes", &CacheSettings::max_bytes, 0, kMaxI64,
                  "Memory the cached answers may hold on this instance; beyond it the least recently used go first."),
          integer("max_entry_bytes", &CacheSettings::max_entry_bytes, 1, kMaxI64,
                  "An answer larger than this (its chat.completion JSON) is not cached."),
          duration("local_ttl", &CacheSettings::local_ttl, Millis{0},
                   "With `store: redis`: how long this instance's copy of an entry answers without asking Redis; "
                   "also how long a drop made through another instance may take to reach this one. 0 = every lookup "
                   "asks Redis."),
      }};
  return t;
}

const Table<RouteCache>& route_cache_table() {
  static const Table<RouteCache> t{
      "models[].cache",
      {
          boolean("enabled", &RouteCache::enabled,
                  "Whether the route answers from the cache and keeps answers (`cache: {}` turns it on)."),
          duration("ttl", &RouteCache::ttl, Millis{1000}, "How long this route's answers are served again.")
              .with_default("`cache.ttl`"),
          boolean("shared", &RouteCache::shared,
                  "One entry for every tenant: a tenant may be served an answer generated for another. Off: each "
                  "tenant has its own entries."),
          boolean("any_temperature", &RouteCache::any_temperature,
                  "Also cache requests that are not deterministic (without `temperature: 0` or a `seed`): the same "
                  "answer is then served to requests that would have sampled another."),
          boolean("coalesce", &RouteCache::coalesce,
                  "Identical requests (the same key) arriving while the first is being generated share its one "
                  "upstream generation (on this instance): each gets the answer, streamed from the start then as it "
                  "comes, under its own id. With `enabled: false`, only this."),
      }};
  return t;
}

}  // namespace

void read_cache(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  cache_table().read(l, n, "cache", c.cache);
}

void read_route_cache(Loader& l, const YAML::Node& n, const std::string& path, RouteCache& rc) {
  if (n.IsNull()) return;
  route_cache_table().read(l, n, path, rc);
}

void cache_reference(std::vector<TableDoc>& out) {
  out.push_back(cache_table().doc());
  out.push_back(route_cache_table().doc());
}

}  // namespace sluice::config::detail
