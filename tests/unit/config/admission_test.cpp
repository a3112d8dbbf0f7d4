// Admission settings of the configuration (config/admission.hpp): redis, rate_limits,
// concurrency, and the keys' and routes' concurrency fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "config_fixture.hpp"

using namespace sluice::config;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// Two routes and two keys; admission sections are appended (from line 10 on).
const std::string kAdmBase =
    "models:\n"                                             // 1
    "  - alias: demo\n"                                     // 2
    "    provider: simulated\n"                             // 3
    "  - alias: gpt\n"                                      // 4
    "    provider: openai\n"                                // 5
    "    base_url: https://api.openai.com/v1\n"             // 6
    "keys:\n"                                               // 7
    "  - {name: app, key: sk-app-000000000001, tenant: acme, tier: gold}\n"  // 8
    "  - {name: batch, key: sk-batch-0000000002}\n";        // 9

class AdmissionConfigTest : public sluice::config::testing::ConfigFixture {
 protected:
  static int count_at(const LoadResult& r, const std::string& key) {
    int n = 0;
    for (const auto& e : r.errors) n += e.key == key;
    return n;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Defaults

TEST_F(AdmissionConfigTest, DefaultsWithoutAdmissionSections) {
  auto r = load(kAdmBase);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(c.redis.url, "redis://127.0.0.1:6379");
  EXPECT_EQ(c.redis.timeout, Millis(250));
  EXPECT_EQ(c.redis.connect_timeout, Millis(500));
  EXPECT_EQ(c.redis.retry_interval, Millis(1000));
  EXPECT_EQ(c.redis.key_prefix, "sluice");
  EXPECT_EQ(c.rate_limits.backend, LimiterBackend::memory);
  EXPECT_EQ(c.rate_limits.on_redis_down, DownPolicy::open);
  EXPECT_TRUE(c.rate_limits.requests.empty());
  EXPECT_TRUE(c.rate_limits.tokens.empty());
  EXPECT_FALSE(c.rate_limits.any());
  EXPECT_EQ(c.rate_limits.reserve_output_tokens, 1024);
  EXPECT_EQ(c.rate_limits.reservation_ttl, Millis(600000 + 60000));  // timeouts.total + 1 min
  EXPECT_EQ(c.concurrency.per_key, 0);
  EXPECT_EQ(c.concurrency.queue_size, 256);
  EXPECT_EQ(c.concurrency.max_wait[static_cast<int>(Priority::vip)], Millis(1000));
  EXPECT_EQ(c.concurrency.max_wait[static_cast<int>(Priority::premium)], Millis(2000));
  EXPECT_EQ(c.concurrency.max_wait[static_cast<int>(Priority::standard)], Millis(10000));
  EXPECT_TRUE(c.concurrency.tier_priority.empty());
  for (const auto& k : c.keys) {
    EXPECT_EQ(k.max_in_flight, -1) << k.name;
    EXPECT_FALSE(k.priority.has_value()) << k.name;
  }
  for (const auto& rt : c.routes) {
    EXPECT_EQ(rt.max_in_flight, 0) << rt.alias;
    for (const auto& b : rt.backends) EXPECT_EQ(b.max_in_flight, 0) << rt.alias;
  }
}

TEST_F(AdmissionConfigTest, EmptySectionsKeepDefaults) {
  auto r = load(kAdmBase + "redis:\nrate_limits:\nconcurrency:\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->redis.url, "redis://127.0.0.1:6379");
  EXPECT_EQ(r.config->rate_limits.backend, LimiterBackend::memory);
  EXPECT_EQ(r.config->concurrency.queue_size, 256);
}

// ---------------------------------------------------------------------------------------
// redis:

TEST_F(AdmissionConfigTest, RedisSettings) {
  auto r = load(kAdmBase +
                "redis:\n"
                "  url: redis://gw:pa55@redis.internal:6380/2\n"
                "  timeout: 100ms\n"
                "  connect_timeout: 2s\n"
                "  retry_interval: 1m\n"
                "  key_prefix: gw-prod\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& s = r.config->redis;
  EXPECT_EQ(s.url, "redis://gw:pa55@redis.internal:6380/2");
  EXPECT_EQ(s.timeout, Millis(100));
  EXPECT_EQ(s.connect_timeout, Millis(2000));
  EXPECT_EQ(s.retry_interval, Millis(60000));
  EXPECT_EQ(s.key_prefix, "gw-prod");
}

TEST_F(AdmissionConfigTest, RedisErrorsWithLines) {
  const std::string yaml = kAdmBase +
                           "redis:\n"                          // 10
                           "  url: http://redis.internal\n"    // 11
                           "  timeout: 0\n"                    // 12
                           "  connect_timeout: soon\n"         // 13
                           "  retry_interval: -1s\n"           // 14
                           "  key_prefix: 'a b'\n"             // 15
                           "  db: 3\n";                        // 16
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto url = error_at(r, "redis.url");
  EXPECT_EQ(url.line, 11);
  EXPECT_THAT(url.message, HasSubstr("redis://"));
  auto t = error_at(r, "redis.timeout");
  EXPECT_EQ(t.line, 12);
  EXPECT_THAT(t.message, HasSubstr("greater than 0"));
  auto ct = error_at(r, "redis.connect_timeout");
  EXPECT_EQ(ct.line, 13);
  EXPECT_THAT(ct.message, HasSubstr("expected a duration"));
  EXPECT_EQ(error_at(r, "redis.retry_interval").line, 14);
  auto kp = error_at(r, "redis.key_prefix");
  EXPECT_EQ(kp.line, 15);
  EXPECT_THAT(kp.message, HasSubstr("without spaces"));
  auto db = error_at(r, "redis.db");
  EXPECT_EQ(db.line, 16);
  EXPECT_THAT(db.message, HasSubstr("unknown key"));
  EXPECT_EQ(r.errors.size(), 6u) << all_errors(r);
}

TEST_F(AdmissionConfigTest, RedisKeyPrefixRules) {
  for (const char* bad : {"''", "'{tag}'", "'a}'", "\"a\\tb\""}) {
    auto r = load(kAdmBase + "redis:\n  key_prefix: " + bad + "\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(error_at(r, "redis.key_prefix").line, 11) << bad;
  }
  auto ok = load(kAdmBase + "redis:\n  key_prefix: 'sluice:eu-1'\n");
  ASSERT_TRUE(ok.ok()) << all_errors(ok);
  EXPECT_EQ(ok.config->redis.key_prefix, "sluice:eu-1");
}

TEST_F(AdmissionConfigTest, RedisSectionMustBeAMap) {
  auto r = load(kAdmBase + "redis: [a]\n");
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "redis");
  EXPECT_EQ(e.line, 10);
  EXPECT_THAT(e.message, HasSubstr("expected a map"));
}

TEST_F(AdmissionConfigTest, RedisUrlThatCannotWorkIsRejectedAtLoad) {
  // The loader reports every mistake at startup; a Redis URL with no host or a port out of
  // range would only fail later, at the first connection.
  for (const char* bad : {"redis://", "redis://cache:99999", "redis://cache:port", "redis://cache/notadb"}) {
    auto r = load(kAdmBase + "redis:\n  url: " + bad + "\n");
    EXPECT_FALSE(r.ok()) << bad << " was accepted";
    if (!r.ok()) {
      EXPECT_EQ(error_at(r, "redis.url").line, 11) << bad;
    }
  }
}

// ---------------------------------------------------------------------------------------
// rate_limits:

TEST_F(AdmissionConfigTest, RateLimitsParsed) {
  auto r = load(kAdmBase +
                "rate_limits:\n"
                "  backend: auto\n"
                "  reserve_output_tokens: 256\n"
                "  reservation_ttl: 90s\n"
                "  requests:\n"
                "    - {scope: key, limit: 60}\n"
                "    - scope: tenant_model\n"
                "      tenant: acme\n"
                "      model: gpt\n"
                "      algorithm: sliding_window\n"
                "      limit: 100\n"
                "      window: 10s\n"
                "    - scope: tier\n"
                "      tier: gold\n"
                "      key: app\n"
                "      burst: 20\n"                // before its algorithm: order does not matter
                "      algorithm: token_bucket\n"
                "      limit: 5\n"
                "      window: 1s\n"
                "      on_redis_down: closed\n"
                "    - {scope: model, algorithm: token_bucket, limit: 7}\n"
                "    - {scope: tenant, algorithm: fixed_window, limit: 99999999999999, window: 1h}\n"
                "  tokens:\n"
                "    - {scope: key, limit: 100000, per: minute}\n"
                "    - {scope: tenant, tenant: acme, limit: 2000000, per: hour}\n"
                "    - {scope: model, model: demo, limit: 50000000, per: day, on_redis_down: open}\n"
                "    - {scope: tier, tier: gold, limit: 900000000, per: month}\n"
                "timeouts:\n"
                "  total: 90s\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& rl = r.config->rate_limits;
  EXPECT_EQ(rl.backend, LimiterBackend::auto_);
  EXPECT_EQ(rl.reserve_output_tokens, 256);
  EXPECT_EQ(rl.reservation_ttl, Millis(90000));
  EXPECT_TRUE(rl.any());
  ASSERT_EQ(rl.requests.size(), 5u);

  const auto& r0 = rl.requests[0];
  EXPECT_EQ(r0.id, "requests[0]");
  EXPECT_EQ(r0.scope, LimitScope::key);
  EXPECT_EQ(r0.algorithm, LimitAlgorithm::fixed_window);
  EXPECT_EQ(r0.limit, 60);
  EXPECT_EQ(r0.window, Millis(60000));
  EXPECT_TRUE(r0.when.key.empty() && r0.when.tier.empty() && r0.when.tenant.empty() && r0.when.model.empty());
  EXPECT_EQ(r0.on_redis_down, DownPolicy::open);  // auto: open

  const auto& r1 = rl.requests[1];
  EXPECT_EQ(r1.id, "requests[1]");
  EXPECT_EQ(r1.scope, LimitScope::tenant_model);
  EXPECT_EQ(r1.when.tenant, "acme");
  EXPECT_EQ(r1.when.model, "gpt");
  EXPECT_EQ(r1.algorithm, LimitAlgorithm::sliding_window);
  EXPECT_EQ(r1.limit, 100);
  EXPECT_EQ(r1.window, Millis(10000));

  const auto& r2 = rl.requests[2];
  EXPECT_EQ(r2.scope, LimitScope::tier);
  EXPECT_EQ(r2.when.tier, "gold");
  EXPECT_EQ(r2.when.key, "app");
  EXPECT_EQ(r2.algorithm, LimitAlgorithm::token_bucket);
  EXPECT_EQ(r2.limit, 5);
  EXPECT_EQ(r2.burst, 20);
  EXPECT_EQ(r2.window, Millis(1000));
  EXPECT_EQ(r2.on_redis_down, DownPolicy::closed);

  const auto& r3 = rl.requests[3];
  EXPECT_EQ(r3.scope, LimitScope::model);
  EXPECT_EQ(r3.algorithm, LimitAlgorithm::token_bucket);
  EXPECT_EQ(r3.burst, 7);  // defaults to the limit

  const auto& r4 = rl.requests[4];
  EXPECT_EQ(r4.scope, LimitScope::tenant);
  EXPECT_EQ(r4.limit, 99'999'999'999'999LL);  // the largest allowed (below 10^14)
  EXPECT_EQ(r4.window, Millis(3'600'000));

  ASSERT_EQ(rl.tokens.size(), 4u);
  EXPECT_EQ(rl.tokens[0].id, "tokens[0]");
  EXPECT_EQ(rl.tokens[0].scope, LimitScope::key);
  EXPECT_EQ(rl.tokens[0].limit, 100000);
  EXPECT_EQ(rl.tokens[0].per, QuotaPeriod::minute);
  EXPECT_EQ(rl.tokens[1].id, "tokens[1]");
  EXPECT_EQ(rl.tokens[1].when.tenant, "acme");
  EXPECT_EQ(rl.tokens[1].per, QuotaPeriod::hour);
  EXPECT_EQ(rl.tokens[2].when.model, "demo");
  EXPECT_EQ(rl.tokens[2].per, QuotaPeriod::day);
  EXPECT_EQ(rl.tokens[2].on_redis_down, DownPolicy::open);
  EXPECT_EQ(rl.tokens[3].when.tier, "gold");
  EXPECT_EQ(rl.tokens[3].per, QuotaPeriod::month);
  EXPECT_EQ(rl.tokens[3].limit, 900'000'000);
}

TEST_F(AdmissionConfigTest, OnRedisDownDefaultsFollowTheBackend) {
  const std::string limits =
      "  requests:\n"
      "    - {scope: key, limit: 10}\n"
      "    - {scope: key, limit: 20, on_redis_down: open}\n"
      "  tokens:\n"
      "    - {scope: key, limit: 1000, per: day}\n"
      "    - {scope: key, limit: 1000, per: day, on_redis_down: closed}\n";
  {
    auto r = load(kAdmBase + "rate_limits:\n  backend: redis\n" + limits);
    ASSERT_TRUE(r.ok()) << all_errors(r);
    const auto& rl = r.config->rate_limits;
    EXPECT_EQ(rl.on_redis_down, DownPolicy::closed);
    EXPECT_EQ(rl.requests[0].on_redis_down, DownPolicy::closed);
    EXPECT_EQ(rl.requests[1].on_redis_down, DownPolicy::open);
    EXPECT_EQ(rl.tokens[0].on_redis_down, DownPolicy::closed);
    EXPECT_EQ(rl.tokens[1].on_redis_down, DownPolicy::closed);
  }
  for (const char* backend : {"memory", "auto"}) {
    auto r = load(kAdmBase + "rate_limits:\n  backend: " + backend + "\n" + limits);
    ASSERT_TRUE(r.ok()) << all_errors(r);
    const auto& rl = r.config->rate_limits;
    EXPECT_EQ(rl.on_redis_down, DownPolicy::open) << backend;
    EXPECT_EQ(rl.requests[0].on_redis_down, DownPolicy::open) << backend;
    EXPECT_EQ(rl.requests[1].on_redis_down, DownPolicy::open) << backend;
    EXPECT_EQ(rl.tokens[0].on_redis_down, DownPolicy::open) << backend;
    EXPECT_EQ(rl.tokens[1].on_redis_down, DownPolicy::closed) << backend;
  }
  {
    // The section's own default overrides the backend's; a limit's overrides both.
    auto r = load(kAdmBase + "rate_limits:\n  backend: redis\n  on_redis_down: open\n" + limits);
    ASSERT_TRUE(r.ok()) << all_errors(r);
    const auto& rl = r.config->rate_limits;
    EXPECT_EQ(rl.on_redis_down, DownPolicy::open);
    EXPECT_EQ(rl.requests[0].on_redis_down, DownPolicy::open);
    EXPECT_EQ(rl.tokens[1].on_redis_down, DownPolicy::closed);
  }
  {
    auto r = load(kAdmBase + "rate_limits:\n  backend: auto\n  on_redis_down: closed\n" + limits);
    ASSERT_TRUE(r.ok()) << all_errors(r);
    EXPECT_EQ(r.config->rate_limits.requests[0].on_redis_down, DownPolicy::closed);
    EXPECT_EQ(r.config->rate_limits.requests[1].on_redis_down, DownPolicy::open);
  }
}

TEST_F(AdmissionConfigTest, ReservationTtlDefaultsToTotalTimeoutPlusAMinute) {
  auto r = load(kAdmBase + "timeouts:\n  total: 30s\nrate_limits:\n  tokens:\n    - {scope: key, limit: 10, per: minute}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->rate_limits.reservation_ttl, Millis(90000));
  auto e = load(kAdmBase + "rate_limits:\n  reservation_ttl: 999ms\n");
  ASSERT_FALSE(e.ok());
  auto err = error_at(e, "rate_limits.reservation_ttl");
  EXPECT_EQ(err.line, 11);
  EXPECT_THAT(err.message, HasSubstr("at least 1s"));
}

// A reservation shorter than the longest request would expire under a running request
// (and its tokens be admitted again meanwhile): refused, at the line of reservation_ttl.
TEST_F(AdmissionConfigTest, ReservationTtlShorterThanTotalTimeoutIsAnError) {
  auto e = load(kAdmBase + "rate_limits:\n  reservation_ttl: 2m\ntimeouts:\n  total: 3m\n");
  ASSERT_FALSE(e.ok());
  auto err = error_at(e, "rate_limits.reservation_ttl");
  EXPECT_EQ(err.line, 11);
  EXPECT_THAT(err.message, HasSubstr("timeouts.total"));
  // The default total (10 min) against a shorter TTL, too.
  EXPECT_FALSE(load(kAdmBase + "rate_limits:\n  reservation_ttl: 5m\n").ok());
  // Equal or longer is fine.
  auto ok = load(kAdmBase + "rate_limits:\n  reservation_ttl: 3m\ntimeouts:\n  total: 3m\n");
  ASSERT_TRUE(ok.ok()) << all_errors(ok);
  EXPECT_EQ(ok.config->rate_limits.reservation_ttl, Millis(180000));
}

TEST_F(AdmissionConfigTest, UnknownModelOrKeyInAFilterIsAnError) {
  const std::string yaml = kAdmBase +
                           "rate_limits:\n"                               // 10
                           "  requests:\n"                                // 11
                           "    - scope: model\n"                         // 12
                           "      model: gpt-5\n"                         // 13
                           "      limit: 10\n"                            // 14
                           "  tokens:\n"                                  // 15
                           "    - scope: key\n"                           // 16
                           "      key: ghost\n"                           // 17
                           "      limit: 10\n"                            // 18
                           "      per: hour\n";                           // 19
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto m = error_at(r, "rate_limits.requests[0].model");
  EXPECT_EQ(m.line, 13);
  EXPECT_THAT(m.message, HasSubstr("unknown model alias 'gpt-5'"));
  auto k = error_at(r, "rate_limits.tokens[0].key");
  EXPECT_EQ(k.line, 17);
  EXPECT_THAT(k.message, HasSubstr("unknown key name 'ghost'"));
  EXPECT_EQ(k.to_string(), "line 17: rate_limits.tokens[0].key: unknown key name 'ghost'");
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);

  // Tier and tenant filters name free-form labels: any value is accepted.
  auto ok = load(kAdmBase + "rate_limits:\n  requests:\n    - {scope: tier, tier: platinum, tenant: nobody, limit: 1}\n");
  EXPECT_TRUE(ok.ok()) << all_errors(ok);
}

TEST_F(AdmissionConfigTest, FilterMayNameAKeyFromTheEnvironment) {
  sluice::config::testing::fake_env_vars()["SLUICE_API_KEYS"] = "ci:sk-ci-1234567890abcd";
  auto r = load(kAdmBase + "rate_limits:\n  requests:\n    - {scope: key, key: ci, limit: 3}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->rate_limits.requests[0].when.key, "ci");
}

TEST_F(AdmissionConfigTest, MissingRequiredFields) {
  const std::string yaml = kAdmBase +
                           "rate_limits:\n"                     // 10
                           "  requests:\n"                      // 11
                           "    - limit: 10\n"                  // 12  no scope
                           "    - scope: key\n"                 // 13  no limit
                           "      window: 1m\n"                 // 14
                           "  tokens:\n"                        // 15
                           "    - scope: key\n"                 // 16  no per
                           "      limit: 100\n"                 // 17
                           "    - {per: day}\n";                // 18  no scope, no limit
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto s = error_at(r, "rate_limits.requests[0]");
  EXPECT_EQ(s.line, 12);
  EXPECT_THAT(s.message, HasSubstr("missing required key 'scope'"));
  auto l = error_at(r, "rate_limits.requests[1]");
  EXPECT_EQ(l.line, 13);
  EXPECT_THAT(l.message, HasSubstr("missing required key 'limit'"));
  auto p = error_at(r, "rate_limits.tokens[0]");
  EXPECT_EQ(p.line, 16);
  EXPECT_THAT(p.message, HasSubstr("missing required key 'per'"));
  EXPECT_EQ(count_at(r, "rate_limits.tokens[1]"), 2) << all_errors(r);
  EXPECT_EQ(error_at(r, "rate_limits.tokens[1]").line, 18);
  EXPECT_EQ(r.errors.size(), 5u) << all_errors(r);
}

TEST_F(AdmissionConfigTest, BadLimitValues) {
  const std::string yaml = kAdmBase +
                           "rate_limits:\n"                                                    // 10
                           "  backend: etcd\n"                                                 // 11
                           "  on_redis_down: maybe\n"                                          // 12
                           "  reserve_output_tokens: -1\n"                                     // 13
                           "  requests:\n"                                                     // 14
                           "    - {scope: user, limit: 1}\n"                                   // 15
                           "    - {scope: key, algorithm: leaky_bucket, limit: 1}\n"           // 16
                           "    - {scope: key, limit: 0}\n"                                    // 17
                           "    - {scope: key, limit: 1, window: 500ms}\n"                     // 18
                           "    - {scope: key, limit: 1, burst: 5}\n"                          // 19
                           "    - {scope: key, algorithm: token_bucket, limit: 1, burst: 0}\n" // 20
                           "    - {scope: key, limit: 1, on_redis_down: later}\n"              // 21
                           "    - {scope: key, tier: '', limit: 1}\n"                          // 22
                           "    - {scope: key, limit: 1, per: day}\n"                          // 23
                           "  tokens:\n"                                                       // 24
                           "    - {scope: key, limit: 1, per: week}\n"                         // 25
                           "    - {scope: key, limit: 1, per: day, window: 1m}\n";             // 26
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto b = error_at(r, "rate_limits.backend");
  EXPECT_EQ(b.line, 11);
  EXPECT_THAT(b.message, HasSubstr("unknown backend 'etcd'"));
  EXPECT_EQ(error_at(r, "rate_limits.on_redis_down").line, 12);
  EXPECT_EQ(error_at(r, "rate_limits.reserve_output_tokens").line, 13);
  auto sc = error_at(r, "rate_limits.requests[0].scope");
  EXPECT_EQ(sc.line, 15);
  EXPECT_THAT(sc.message, HasSubstr("unknown scope 'user'"));
  auto al = error_at(r, "rate_limits.requests[1].algorithm");
  EXPECT_EQ(al.line, 16);
  EXPECT_THAT(al.message, HasSubstr("unknown algorithm 'leaky_bucket'"));
  auto lim = error_at(r, "rate_limits.requests[2].limit");
  EXPECT_EQ(lim.line, 17);
  EXPECT_THAT(lim.message, HasSubstr("out of range"));
  auto w = error_at(r, "rate_limits.requests[3].window");
  EXPECT_EQ(w.line, 18);
  EXPECT_THAT(w.message, HasSubstr("at least 1s"));
  auto bu = error_at(r, "rate_limits.requests[4].burst");
  EXPECT_EQ(bu.line, 19);
  EXPECT_THAT(bu.message, HasSubstr("only to algorithm token_bucket"));
  EXPECT_EQ(error_at(r, "rate_limits.requests[5].burst").line, 20);
  EXPECT_EQ(error_at(r, "rate_limits.requests[6].on_redis_down").line, 21);
  auto f = error_at(r, "rate_limits.requests[7].tier");
  EXPECT_EQ(f.line, 22);
  EXPECT_THAT(f.message, HasSubstr("must not be empty"));
  auto unk = error_at(r, "rate_limits.requests[8].per");
  EXPECT_EQ(unk.line, 23);
  EXPECT_THAT(unk.message, HasSubstr("unknown key"));
  auto per = error_at(r, "rate_limits.tokens[0].per");
  EXPECT_EQ(per.line, 25);
  EXPECT_THAT(per.message, HasSubstr("unknown period 'week'"));
  EXPECT_EQ(error_at(r, "rate_limits.tokens[1].window").line, 26);
  EXPECT_EQ(r.errors.size(), 14u) << all_errors(r);
}

TEST_F(AdmissionConfigTest, LimitNames) {
  auto ok = load(kAdmBase +
                 "rate_limits:\n"
                 "  requests:\n"
                 "    - {name: per-key_1, scope: key, limit: 1}\n"
                 "    - {scope: key, limit: 2}\n"
                 "  tokens:\n"
                 "    - {name: per-key_1, scope: key, limit: 1, per: day}\n");  // (another list)
  ASSERT_TRUE(ok.ok()) << all_errors(ok);
  EXPECT_EQ(ok.config->rate_limits.requests[0].name, "per-key_1");
  EXPECT_EQ(ok.config->rate_limits.requests[0].id, "per-key_1") << "errors say the name";
  EXPECT_EQ(ok.config->rate_limits.requests[1].id, "requests[1]");
  EXPECT_EQ(ok.config->rate_limits.tokens[0].id, "per-key_1");
  const std::string yaml = kAdmBase +
                           "rate_limits:\n"                                            // 10
                           "  requests:\n"                                             // 11
                           "    - {name: 'a:b', scope: key, limit: 1}\n"               // 12
                           "    - {name: '', scope: key, limit: 1}\n"                  // 13
                           "    - {name: same, scope: key, limit: 1}\n"                // 14
                           "    - {name: same, scope: tenant, limit: 1}\n"             // 15
                           "    - {name: " + std::string(65, 'x') + ", scope: key, limit: 1}\n";  // 16
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "rate_limits.requests[0].name").line, 12);
  EXPECT_THAT(error_at(r, "rate_limits.requests[0].name").message, HasSubstr("1 to 64 letters"));
  EXPECT_EQ(error_at(r, "rate_limits.requests[1].name").line, 13);
  auto dup = error_at(r, "rate_limits.requests[3].name");
  EXPECT_EQ(dup.line, 15);
  EXPECT_THAT(dup.message, HasSubstr("another limit of this list is named 'same'"));
  EXPECT_EQ(error_at(r, "rate_limits.requests[4].name").line, 16);
  EXPECT_EQ(r.errors.size(), 4u) << all_errors(r);
}

TEST_F(AdmissionConfigTest, LimitListsMustBeLists) {
  auto r = load(kAdmBase + "rate_limits:\n  requests: {scope: key, limit: 1}\n  tokens: 5\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "rate_limits.requests").line, 11);
  EXPECT_THAT(error_at(r, "rate_limits.requests").message, HasSubstr("expected a list of limits"));
  EXPECT_EQ(error_at(r, "rate_limits.tokens").line, 12);
  auto u = load(kAdmBase + "rate_limits:\n  limits: []\n");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(error_at(u, "rate_limits.limits").line, 11);
}

// ---------------------------------------------------------------------------------------
// concurrency:, keys and routes

TEST_F(AdmissionConfigTest, ConcurrencySettings) {
  auto r = load(kAdmBase +
                "concurrency:\n"
                "  per_key: 4\n"
                "  queue_size: 10\n"
                "  max_wait:\n"
                "    vip: 3s\n"
                "    premium: 500ms\n"
                "    standard: 20s\n"
                "  tier_priority:\n"
                "    gold: vip\n"
                "    silver: premium\n"
                "    free: standard\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& cc = r.config->concurrency;
  EXPECT_EQ(cc.per_key, 4);
  EXPECT_EQ(cc.queue_size, 10);
  EXPECT_EQ(cc.max_wait[static_cast<int>(Priority::vip)], Millis(3000));
  EXPECT_EQ(cc.max_wait[static_cast<int>(Priority::premium)], Millis(500));
  EXPECT_EQ(cc.max_wait[static_cast<int>(Priority::standard)], Millis(20000));
  ASSERT_EQ(cc.tier_priority.size(), 3u);
  EXPECT_EQ(cc.tier_priority.at("gold"), Priority::vip);
  EXPECT_EQ(cc.tier_priority.at("silver"), Priority::premium);
  EXPECT_EQ(cc.tier_priority.at("free"), Priority::standard);
}

TEST_F(AdmissionConfigTest, PartialMaxWaitKeepsOtherDefaults) {
  auto r = load(kAdmBase + "concurrency:\n  max_wait: {premium: 0}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& mw = r.config->concurrency.max_wait;
  EXPECT_EQ(mw[static_cast<int>(Priority::premium)], Millis(0));
  EXPECT_EQ(mw[static_cast<int>(Priority::vip)], Millis(1000));
  EXPECT_EQ(mw[static_cast<int>(Priority::standard)], Millis(10000));
}

TEST_F(AdmissionConfigTest, ConcurrencyErrors) {
  const std::string yaml = kAdmBase +
                           "concurrency:\n"               // 10
                           "  per_key: -1\n"              // 11
                           "  queue_size: many\n"         // 12
                           "  max_wait:\n"                // 13
                           "    vip: fast\n"              // 14
                           "    gold: 1s\n"               // 15
                           "  tier_priority:\n"           // 16
                           "    gold: platinum\n"         // 17
                           "    silver: premium\n"        // 18
                           "  burst: 3\n";                // 19
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "concurrency.per_key").line, 11);
  EXPECT_THAT(error_at(r, "concurrency.per_key").message, HasSubstr("out of range"));
  EXPECT_EQ(error_at(r, "concurrency.queue_size").line, 12);
  EXPECT_EQ(error_at(r, "concurrency.max_wait.vip").line, 14);
  EXPECT_EQ(error_at(r, "concurrency.max_wait.gold").line, 15);
  auto tp = error_at(r, "concurrency.tier_priority.gold");
  EXPECT_EQ(tp.line, 17);
  EXPECT_THAT(tp.message, HasSubstr("unknown priority 'platinum'"));
  EXPECT_EQ(error_at(r, "concurrency.burst").line, 19);
  EXPECT_EQ(r.errors.size(), 6u) << all_errors(r);

  auto list = load(kAdmBase + "concurrency:\n  tier_priority: [gold]\n");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(error_at(list, "concurrency.tier_priority").line, 11);
}

TEST_F(AdmissionConfigTest, KeyMaxInFlightAndPriority) {
  const std::string yaml =
      "models:\n"
      "  - alias: demo\n"
      "    provider: simulated\n"
      "keys:\n"
      "  - {name: a, key: sk-a-111111111111, max_in_flight: 3, priority: vip}\n"
      "  - {name: b, key: sk-b-222222222222, max_in_flight: 0, priority: standard}\n"
      "  - {name: c, key: sk-c-333333333333, priority: premium}\n";
  auto r = load(yaml);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& ks = r.config->keys;
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].max_in_flight, 3);
  EXPECT_EQ(ks[0].priority, Priority::vip);
  EXPECT_EQ(ks[1].max_in_flight, 0);
  EXPECT_EQ(ks[1].priority, Priority::standard);
  EXPECT_EQ(ks[2].max_in_flight, -1);
  EXPECT_EQ(ks[2].priority, Priority::premium);
}

TEST_F(AdmissionConfigTest, KeyFieldErrors) {
  const std::string yaml =
      "models:\n"                                                           // 1
      "  - alias: demo\n"                                                   // 2
      "    provider: simulated\n"                                           // 3
      "keys:\n"                                                             // 4
      "  - name: a\n"                                                       // 5
      "    key: sk-a-111111111111\n"                                        // 6
      "    max_in_flight: -1\n"                                             // 7
      "    priority: urgent\n"                                              // 8
      "  - {name: b, key: sk-b-222222222222, max_in_flight: x, priority: [vip]}\n";  // 9
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto m = error_at(r, "keys[0].max_in_flight");
  EXPECT_EQ(m.line, 7);
  EXPECT_THAT(m.message, HasSubstr("out of range"));
  auto p = error_at(r, "keys[0].priority");
  EXPECT_EQ(p.line, 8);
  EXPECT_THAT(p.message, HasSubstr("unknown priority 'urgent'"));
  EXPECT_EQ(error_at(r, "keys[1].max_in_flight").line, 9);
  EXPECT_EQ(error_at(r, "keys[1].priority").line, 9);
  EXPECT_EQ(r.errors.size(), 4u) << all_errors(r);
}

TEST_F(AdmissionConfigTest, RouteMaxInFlight) {
  auto r = load(
      "models:\n"
      "  - alias: a\n"
      "    provider: openai\n"
      "    base_url: http://10.0.0.5:8000/v1\n"
      "    max_in_flight: 8\n"
      "    backend_max_in_flight: 16\n"
      "  - alias: b\n"
      "    provider: openai\n"
      "    base_url: http://10.0.0.5:8000/v1\n"
      "    model: other\n"
      "    backend_max_in_flight: 16\n"
      "  - alias: c\n"
      "    provider: openai\n"
      "    base_url: http://10.0.0.6:8000/v1\n"
      "    backend_max_in_flight: 2\n"
      "  - alias: s1\n"
      "    provider: simulated\n"
      "    backend_max_in_flight: 3\n"
      "  - alias: s2\n"
      "    provider: simulated\n"
      "    backend_max_in_flight: 4\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("a")->max_in_flight, 8);
  EXPECT_EQ(r.config->find_route("a")->backends[0].max_in_flight, 16);
  EXPECT_EQ(r.config->find_route("b")->max_in_flight, 0);
  EXPECT_EQ(r.config->find_route("b")->backends[0].max_in_flight, 16);
  EXPECT_EQ(r.config->find_route("c")->backends[0].max_in_flight, 2);
  EXPECT_EQ(r.config->find_route("s1")->backends[0].max_in_flight, 3);
  EXPECT_EQ(r.config->find_route("s2")->backends[0].max_in_flight, 4);
}

TEST_F(AdmissionConfigTest, RoutesSharingABackendTakeTheLimitOneOfThemSets) {
  // Same host:port and model: one backend (10.0.0.5:8000). Only route a sets the limit;
  // b, which sets none, shares it.
  auto r = load(
      "models:\n"
      "  - alias: a\n"
      "    provider: openai\n"
      "    base_url: http://10.0.0.5:8000/v1\n"
      "    model: m\n"
      "    backend_max_in_flight: 16\n"
      "  - alias: b\n"
      "    provider: openai\n"
      "    base_url: http://10.0.0.5:8000/v1\n"
      "    model: m\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("a")->backends[0].name, "10.0.0.5:8000");
  EXPECT_EQ(r.config->find_route("b")->backends[0].name, "10.0.0.5:8000");
  EXPECT_EQ(r.config->find_route("b")->backends[0].max_in_flight, 16);
}

TEST_F(AdmissionConfigTest, RoutesToOneBackendMustAgreeOnItsLimit) {
  const std::string yaml =
      "models:\n"                                    // 1
      "  - alias: a\n"                               // 2
      "    provider: openai\n"                       // 3
      "    base_url: http://10.0.0.5:8000/v1\n"      // 4
      "    backend_max_in_flight: 16\n"              // 5
      "    model: m\n"                               // 6
      "  - alias: b\n"                               // 7
      "    provider: openai\n"                       // 8
      "    base_url: http://10.0.0.5:8000/v1/\n"     // 9
      "    backend_max_in_flight: 8\n"               // 10
      "    model: m\n"                               // 11
      "  - alias: c\n"                               // 12
      "    provider: openai\n"                       // 13
      "    base_url: http://10.0.0.5:8001/v1\n"      // 14
      "    backend_max_in_flight: 8\n"               // 15
      "    model: m\n"                               // 16
      "  - alias: d\n"                               // 17
      "    provider: openai\n"                       // 18
      "    base_url: http://10.0.0.6:8000/v1\n"      // 19
      "    max_in_flight: -2\n";                     // 20
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[1].alias");
  EXPECT_EQ(e.line, 7);
  EXPECT_THAT(e.message, HasSubstr("backend_max_in_flight 8 differs from 16"));
  EXPECT_THAT(e.message, HasSubstr("'a'"));
  EXPECT_THAT(e.message, HasSubstr("the same backend 10.0.0.5:8000"));
  auto m = error_at(r, "models[3].max_in_flight");
  EXPECT_EQ(m.line, 20);
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

// ---------------------------------------------------------------------------------------
// Environment

TEST_F(AdmissionConfigTest, RedisUrlAndBackendFromTheEnvironment) {
  sluice::config::testing::fake_env_vars()["SLUICE_REDIS_URL"] = "redis://env-redis:6390/3";
  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = " redis ";
  auto r = load(kAdmBase +
                "redis:\n  url: redis://yaml-redis:6379\n"
                "rate_limits:\n  backend: memory\n  requests:\n    - {scope: key, limit: 5}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->redis.url, "redis://env-redis:6390/3");
  EXPECT_EQ(r.config->rate_limits.backend, LimiterBackend::redis);
  // The on_redis_down default follows the backend the environment chose.
  EXPECT_EQ(r.config->rate_limits.on_redis_down, DownPolicy::closed);
  EXPECT_EQ(r.config->rate_limits.requests[0].on_redis_down, DownPolicy::closed);

  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = "auto";
  auto a = load(kAdmBase + "rate_limits:\n  backend: redis\n  requests:\n    - {scope: key, limit: 5}\n");
  ASSERT_TRUE(a.ok()) << all_errors(a);
  EXPECT_EQ(a.config->rate_limits.backend, LimiterBackend::auto_);
  EXPECT_EQ(a.config->rate_limits.on_redis_down, DownPolicy::open);
  EXPECT_EQ(a.config->rate_limits.requests[0].on_redis_down, DownPolicy::open);

  // An explicit on_redis_down stays.
  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = "redis";
  auto o = load(kAdmBase + "rate_limits:\n  on_redis_down: open\n");
  ASSERT_TRUE(o.ok()) << all_errors(o);
  EXPECT_EQ(o.config->rate_limits.backend, LimiterBackend::redis);
  EXPECT_EQ(o.config->rate_limits.on_redis_down, DownPolicy::open);

  // Empty values count as unset.
  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = "";
  sluice::config::testing::fake_env_vars()["SLUICE_REDIS_URL"] = "";
  auto u = load(kAdmBase + "rate_limits:\n  backend: auto\n");
  ASSERT_TRUE(u.ok()) << all_errors(u);
  EXPECT_EQ(u.config->rate_limits.backend, LimiterBackend::auto_);
  EXPECT_EQ(u.config->redis.url, "redis://127.0.0.1:6379");
}

TEST_F(AdmissionConfigTest, BadEnvironmentValues) {
  sluice::config::testing::fake_env_vars()["SLUICE_REDIS_URL"] = "http://redis:6379";
  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = "disk";
  auto r = load(kAdmBase);
  ASSERT_FALSE(r.ok());
  auto u = error_at(r, "env SLUICE_REDIS_URL");
  EXPECT_EQ(u.line, 0);
  EXPECT_THAT(u.message, HasSubstr("redis://"));
  auto b = error_at(r, "env SLUICE_RATE_LIMIT_BACKEND");
  EXPECT_EQ(b.line, 0);
  EXPECT_THAT(b.message, HasSubstr("unknown backend 'disk'"));
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

// ---------------------------------------------------------------------------------------
// describe()

TEST_F(AdmissionConfigTest, DescribeShowsTheLimiterAndMasksTheRedisPassword) {
  auto r = load(kAdmBase +
                "redis:\n  url: redis://gw:Sup3rS3cret@redis.internal:6380/2\n"
                "rate_limits:\n  backend: redis\n"
                "  requests:\n    - {scope: key, limit: 5}\n    - {scope: tenant, limit: 50}\n"
                "  tokens:\n    - {scope: key, limit: 1000, per: day}\n"
                "concurrency:\n  per_key: 4\n  queue_size: 10\n"
                "  max_wait: {vip: 3s, premium: 500ms, standard: 20s}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const std::string d = describe(*r.config);
  EXPECT_THAT(d, HasSubstr("rate limits: backend redis"));
  // The user name stays (it is not a secret); the password is masked.
  EXPECT_THAT(d, HasSubstr("redis://gw:***@redis.internal:6380/2"));
  EXPECT_THAT(d, HasSubstr("on_redis_down closed"));
  EXPECT_THAT(d, HasSubstr("2 request limits, 1 token limits"));
  EXPECT_THAT(d, HasSubstr("concurrency: per key 4, queue 10, max wait vip 3s premium 500ms standard 20s"));
  EXPECT_THAT(d, Not(HasSubstr("Sup3rS3cret")));
}

TEST_F(AdmissionConfigTest, DescribeMasksAPasswordHoldingAnAt) {
  auto r = load(kAdmBase +
                "redis:\n  url: 'redis://:p@ss@cache:6379'\n"
                "rate_limits:\n  backend: auto\n  requests:\n    - {scope: key, limit: 5}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const std::string d = describe(*r.config);
  EXPECT_THAT(d, HasSubstr("rate limits: backend auto (redis://:***@cache:6379/0, on_redis_down open)"));
  EXPECT_THAT(d, Not(HasSubstr("p@ss")));
}

TEST_F(AdmissionConfigTest, DescribeMemoryBackendAndNoLimits) {
  auto m = load(kAdmBase +
                "redis:\n  url: redis://:hidden@cache:6379\n"
                "rate_limits:\n  requests:\n    - {scope: key, limit: 5}\n");
  ASSERT_TRUE(m.ok()) << all_errors(m);
  const std::string dm = describe(*m.config);
  EXPECT_THAT(dm, HasSubstr("rate limits: backend memory, 1 request limits, 0 token limits"));
  EXPECT_THAT(dm, Not(HasSubstr("redis://")));
  EXPECT_THAT(dm, Not(HasSubstr("hidden")));

  auto n = load(kAdmBase);
  ASSERT_TRUE(n.ok());
  const std::string dn = describe(*n.config);
  EXPECT_THAT(dn, HasSubstr("rate limits: none"));
  EXPECT_THAT(dn, HasSubstr("concurrency: per key unlimited, queue 256, max wait vip 1s premium 2s standard 10s"));
}

TEST_F(AdmissionConfigTest, DescribeShowsAPlainRedisUrlAsIs) {
  sluice::config::testing::fake_env_vars()["SLUICE_RATE_LIMIT_BACKEND"] = "redis";
  sluice::config::testing::fake_env_vars()["SLUICE_REDIS_URL"] = "redis://cache.internal:6379/1";
  auto r = load(kAdmBase + "rate_limits:\n  tokens:\n    - {scope: key, limit: 1000, per: month}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_THAT(describe(*r.config),
              HasSubstr("rate limits: backend redis (redis://cache.internal:6379/1, on_redis_down closed), "
                        "0 request limits, 1 token limits"));
}

TEST(AdmissionNames, ToStringAndPriorityFromName) {
  EXPECT_EQ(to_string(LimitScope::tenant_model), "tenant_model");
  EXPECT_EQ(to_string(LimitScope::key), "key");
  EXPECT_EQ(to_string(LimitAlgorithm::sliding_window), "sliding_window");
  EXPECT_EQ(to_string(LimitAlgorithm::token_bucket), "token_bucket");
  EXPECT_EQ(to_string(LimiterBackend::auto_), "auto");
  EXPECT_EQ(to_string(QuotaPeriod::month), "month");
  EXPECT_EQ(to_string(Priority::premium), "premium");
  EXPECT_EQ(priority_from_name("vip"), Priority::vip);
  EXPECT_EQ(priority_from_name("premium"), Priority::premium);
  EXPECT_EQ(priority_from_name("standard"), Priority::standard);
  EXPECT_FALSE(priority_from_name("").has_value());
  EXPECT_FALSE(priority_from_name("gold").has_value());
  // Queue classes are ordered lowest first.
  EXPECT_LT(Priority::standard, Priority::premium);
  EXPECT_LT(Priority::premium, Priority::vip);
}

TEST_F(AdmissionConfigTest, LeaseDefaultsToAThousandthOfLargeLimits) {
  auto r = load(kAdmBase +
                "rate_limits:\n  backend: redis\n  requests:\n"
                "    - {scope: key, limit: 999}\n"
                "    - {scope: key, limit: 5000}\n"
                "    - {scope: key, limit: 5000000}\n"
                "    - {scope: key, limit: 5000, lease: 0}\n"
                "    - {scope: key, limit: 5000, lease: 7}\n"
                "    - {scope: key, limit: 5000, lease: auto}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& q = r.config->rate_limits.requests;
  ASSERT_EQ(q.size(), 6u);
  EXPECT_EQ(q[0].lease, 0);     // small limits stay exact: no lease
  EXPECT_EQ(q[1].lease, 5);     // limit / 1000
  EXPECT_EQ(q[2].lease, 1000);  // at most 1000
  EXPECT_EQ(q[3].lease, 0);
  EXPECT_EQ(q[4].lease, 7);
  EXPECT_EQ(q[5].lease, 5);
}

TEST_F(AdmissionConfigTest, LeaseMustBeANonNegativeIntegerOrAuto) {
  auto r = load(kAdmBase + "rate_limits:\n  requests:\n    - {scope: key, limit: 5000, lease: -3}\n"
                           "    - {scope: key, limit: 5000, lease: lots}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "rate_limits.requests[0].lease").line, 12);
  EXPECT_EQ(error_at(r, "rate_limits.requests[1].lease").line, 13);
}
