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
          integer("semantic_max_entries", &CacheSettings::semantic_max_entries, 1, 1'000'000,
                  "The semantic stage's index on this instance: entries per partition (requests alike but for their "
                  "messages' text: one route, tenant and set of parameters); beyond it the oldest is replaced."),
          integer("semantic_max_partitions", &CacheSettings::semantic_max_partitions, 1, 1'000'000,
                  "Partitions the semantic index holds on this instance; beyond it, the tenant holding the most "
                  "gives up its least recently used one."),
          integer("semantic_max_bytes", &CacheSettings::semantic_max_bytes, 1 << 20, kMaxI64,
                  "Memory the semantic index may hold on this instance (vectors and graphs, estimated); beyond it "
                  "partitions go as beyond `semantic_max_partitions`."),
      }};
  return t;
}

const Table<SemanticCache>& semantic_table() {
  static const Table<SemanticCache> t{
      "models[].cache.semantic",
      {
          text("embedding", &SemanticCache::embedding,
               "The alias of a route whose first backend serves embeddings (provider `openai`: OpenAI, vLLM, "
               "llama.cpp..., or `ollama`): a prompt the exact key and SimHash missed is embedded and compared with "
               "the kept ones. Empty: the SimHash stage only.")
              .with_default("none"),
          number("threshold", &SemanticCache::threshold, 0.5, 1.0,
                 "The cosine similarity from which a kept answer is served for another prompt."),
          integer("simhash_distance", &SemanticCache::simhash_distance, -1, 16,
                  "The SimHash stage (no embedding call). 0: a kept prompt of the same words (case, punctuation and "
                  "spacing aside) is the same question. More: one whose 64-bit SimHash differs in at most this many "
                  "bits, and at `1 - bits/64` >= `threshold`, is too; beware: one word changed in a prompt of fifty "
                  "moves only a few bits. -1: no SimHash stage."),
          duration("timeout", &SemanticCache::timeout, Millis{1},
                   "How long a request waits for its prompt's embedding; then it goes on as a miss."),
          integer("max_text_bytes", &SemanticCache::max_text_bytes, 1, 1 << 20,
                  "Prompts longer than this (their messages' text) get the exact key only: an embedding model reads "
                  "a bounded input, and two long prompts alike in their first part are not the same question."),
          boolean("tools", &SemanticCache::tools,
                  "Also requests with tools, tool calls or tool results (off: the exact key only for them)."),
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
          optional_section("semantic", &RouteCache::semantic, semantic_table(),
                           "The semantic stage, see `models[].cache.semantic`: a request the exact key misses is "
                           "answered with a kept answer to a prompt that says the same in other words. Never for "
                           "requests with images or other non-text parts."),
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

void check_cache(Loader& l, Config& c) {
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    const auto& rc = c.routes[i].cache;
    if (!rc || !rc->semantic || rc->semantic->embedding.empty()) continue;
    const std::string p = join(join(join(index("models", i), "cache"), "semantic"), "embedding");
    const Route* r = c.find_route(rc->semantic->embedding);
    if (!r) l.error(p, 0, "unknown model alias " + q(rc->semantic->embedding));
    else if (r->primary().provider != Provider::openai && r->primary().provider != Provider::ollama) {
      l.error(p, 0, "the embedding route must have provider openai or ollama");
    }
  }
}

void cache_reference(std::vector<TableDoc>& out) {
  out.push_back(cache_table().doc());
  out.push_back(route_cache_table().doc());
  out.push_back(semantic_table().doc());
}

}  // namespace sluice::config::detail
