// Routes with several backends (the long form), balancing, retries, fallbacks, canaries,
// breaker overrides, default backend names and the top-level routing: section.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config_fixture.hpp"

using namespace sluice::config;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using RoutingConfigTest = sluice::config::testing::ConfigFixture;
using sluice::config::testing::fake_env_vars;

std::vector<std::string> names_of(const Route& r) {
  std::vector<std::string> out;
  for (const auto& b : r.backends) out.push_back(b.name);
  return out;
}

// Every error's key, for tests that check nothing else went wrong.
std::vector<std::string> keys_of(const LoadResult& r) {
  std::vector<std::string> out;
  for (const auto& e : r.errors) out.push_back(e.key);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Short and long form

TEST_F(RoutingConfigTest, ShortFormGivesOneBackend) {
  auto r = load("models:\n"
                "  - alias: gpt\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "    model: gpt-4o-mini\n"
                "    api_key: sk-short-1234567890ab\n"
                "    tls_verify: false\n"
                "    max_in_flight: 4\n"
                "    backend_max_in_flight: 12\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Route& rt = r.config->routes[0];
  ASSERT_EQ(rt.backends.size(), 1u);
  const Backend& b = rt.primary();
  EXPECT_EQ(&b, &rt.backends[0]);
  EXPECT_EQ(b.provider, Provider::openai);
  EXPECT_EQ(b.host, "api.openai.com");
  EXPECT_EQ(b.port, 443);
  EXPECT_EQ(b.path_prefix, "/v1");
  EXPECT_EQ(b.model, "gpt-4o-mini");
  EXPECT_EQ(b.api_key, "sk-short-1234567890ab");
  EXPECT_FALSE(b.tls_verify);
  EXPECT_EQ(b.max_in_flight, 12);  // backend_max_in_flight
  EXPECT_EQ(rt.max_in_flight, 4);  // the route's own
  EXPECT_EQ(b.name, "api.openai.com:443");
  EXPECT_EQ(b.weight, 1);
  EXPECT_TRUE(b.probe);
  EXPECT_EQ(rt.balance, Balance::least_connections);
  EXPECT_EQ(rt.retries, 2);
}

TEST_F(RoutingConfigTest, ShortFormDoesNotTakeLongFormBackendKeys) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    weight: 2\n"      // 4
                "    name: x\n"        // 5
                "    probe: false\n"); // 6
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "models[0].weight").line, 4);
  EXPECT_THAT(error_at(r, "models[0].weight").message, HasSubstr("unknown key"));
  EXPECT_EQ(error_at(r, "models[0].name").line, 5);
  EXPECT_EQ(error_at(r, "models[0].probe").line, 6);
}

TEST_F(RoutingConfigTest, LongFormWithThreeBackends) {
  fake_env_vars()["OPENAI_API_KEY"] = "sk-openai-env-123456789";
  fake_env_vars()["GPU_B_KEY"] = "sk-gpu-b-1234567890ab";
  // The per-route override applies to the short form only.
  fake_env_vars()["SLUICE_MODEL_CHAT_API_KEY"] = "sk-route-override-12345";
  auto r = load("models:\n"
                "  - alias: chat\n"
                "    balance: weighted\n"
                "    retries: 3\n"
                "    max_in_flight: 100\n"
                "    backends:\n"
                "      - provider: openai\n"
                "        base_url: http://10.0.0.1:8000/v1\n"
                "        model: llama-70b\n"
                "        name: gpu-a\n"
                "        weight: 3\n"
                "        max_in_flight: 32\n"
                "        api_key: sk-gpu-a-1234567890ab\n"
                "      - provider: openai\n"
                "        base_url: http://10.0.0.2:8000/v1\n"
                "        model: llama-70b\n"
                "        api_key_env: GPU_B_KEY\n"
                "        probe: false\n"
                "      - provider: openai\n"
                "        base_url: https://api.openai.com/v1\n"
                "        weight: 1\n"
                "        tls_verify: true\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Route& rt = *r.config->find_route("chat");
  EXPECT_EQ(rt.balance, Balance::weighted);
  EXPECT_EQ(rt.retries, 3);
  EXPECT_EQ(rt.max_in_flight, 100);
  ASSERT_EQ(rt.backends.size(), 3u);
  const Backend& a = rt.backends[0];
  EXPECT_EQ(a.name, "gpu-a");
  EXPECT_EQ(a.weight, 3);
  EXPECT_EQ(a.max_in_flight, 32);
  EXPECT_EQ(a.model, "llama-70b");
  EXPECT_EQ(a.host, "10.0.0.1");
  EXPECT_EQ(a.api_key, "sk-gpu-a-1234567890ab");
  EXPECT_TRUE(a.probe);
  const Backend& b = rt.backends[1];
  EXPECT_EQ(b.name, "10.0.0.2:8000");
  EXPECT_EQ(b.weight, 1);
  EXPECT_EQ(b.max_in_flight, 0);
  EXPECT_EQ(b.api_key, "sk-gpu-b-1234567890ab");
  EXPECT_FALSE(b.probe);
  const Backend& c = rt.backends[2];
  EXPECT_EQ(c.name, "api.openai.com:443");
  EXPECT_EQ(c.model, "chat");  // defaults to the alias
  EXPECT_TRUE(c.tls);
  EXPECT_EQ(c.api_key, "sk-openai-env-123456789");  // provider variable, not the route override
  EXPECT_EQ(&rt.primary(), &rt.backends[0]);
}

TEST_F(RoutingConfigTest, LongFormSimulatedBackends) {
  auto r = load("models:\n"
                "  - alias: sims\n"
                "    balance: round_robin\n"
                "    backends:\n"
                "      - provider: simulated\n"
                "        sim: {ttft: 10ms, inter_token: 1ms}\n"
                "      - provider: simulated\n"
                "        model: other\n"
                "        sim: {ttft: 20ms}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Route& rt = r.config->routes[0];
  EXPECT_EQ(rt.balance, Balance::round_robin);
  ASSERT_EQ(rt.backends.size(), 2u);
  EXPECT_EQ(rt.backends[0].sim.ttft, Millis(10));
  EXPECT_EQ(rt.backends[0].sim.inter_token, Millis(1));
  EXPECT_EQ(rt.backends[0].model, "sims");
  EXPECT_EQ(rt.backends[1].sim.ttft, Millis(20));
  EXPECT_EQ(rt.backends[1].model, "other");
  EXPECT_EQ(names_of(rt), (std::vector<std::string>{"simulated:sims#0", "simulated:sims#1"}));
}

TEST_F(RoutingConfigTest, BothFormsInOneRouteIsAnError) {
  auto r = load("models:\n"
                "  - alias: a\n"                                // 2
                "    provider: openai\n"                        // 3
                "    base_url: http://h:1/v1\n"                 // 4
                "    backend_max_in_flight: 3\n"                // 5
                "    backends:\n"                               // 6
                "      - {provider: ollama, base_url: http://h:2}\n");
  ASSERT_FALSE(r.ok());
  auto p = error_at(r, "models[0].provider");
  EXPECT_EQ(p.line, 3);
  EXPECT_THAT(p.message, HasSubstr("not allowed together with 'backends'"));
  EXPECT_EQ(error_at(r, "models[0].base_url").line, 4);
  auto m = error_at(r, "models[0].backend_max_in_flight");
  EXPECT_EQ(m.line, 5);
  EXPECT_THAT(m.message, HasSubstr("not allowed together with 'backends'"));
  EXPECT_EQ(r.errors.size(), 3u) << all_errors(r);

  for (const char* key : {"model: x", "api_key: sk-1234567890abcdef", "api_key_env: X", "tls_verify: true",
                          "ca_file: x.pem", "sim: {ttft: 1ms}"}) {
    auto r2 = load(std::string("models:\n"
                               "  - alias: a\n"
                               "    backends: [{provider: simulated}]\n"
                               "    ") + key + "\n");
    ASSERT_FALSE(r2.ok()) << key;
    const std::string k = std::string(key).substr(0, std::string(key).find(':'));
    EXPECT_THAT(error_at(r2, "models[0]." + k).message, HasSubstr("together with 'backends'")) << key;
    EXPECT_EQ(error_at(r2, "models[0]." + k).line, 4) << key;
  }
}

TEST_F(RoutingConfigTest, NeitherFormIsAnError) {
  auto r = load("models:\n  - alias: a\n    retries: 1\n");
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[0]");
  EXPECT_EQ(e.line, 2);
  EXPECT_THAT(e.message, HasSubstr("missing required key 'provider'"));
  EXPECT_THAT(e.message, HasSubstr("'backends'"));
}

TEST_F(RoutingConfigTest, BadBackendEntries) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    backends:\n"
                "      - provider: openai\n"                   // 4: [0] no base_url
                "      - just-a-string\n"                      // 5: [1] not a map
                "      - {provider: simulated, alias: x}\n"    // 6: [2] unknown key
                "      - {provider: simulated, weight: 0}\n"   // 7: [3]
                "      - {provider: simulated, max_in_flight: -1}\n"  // 8: [4]
                "      - {provider: simulated, name: 'a b'}\n"        // 9: [5]
                "      - {provider: simulated, probe: maybe}\n"       // 10: [6]
                "      - {model: m}\n"                                // 11: [7] no provider
                "      - {provider: ollama, base_url: http://h:1, sim: {ttft: 1ms}}\n"  // 12: [8]
                "      - {provider: simulated, base_url: http://h:1}\n"                 // 13: [9]
                "      - {provider: openai, base_url: http://h:1, api_key: sk-1234567890ab, api_key_env: K}\n"  // 14
                "  - alias: b\n"
                "    backends: []\n"                           // 16
                "  - alias: c\n"
                "    backends: {provider: simulated}\n");      // 18
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].backends[0]").message, HasSubstr("missing required key 'base_url'"));
  EXPECT_EQ(error_at(r, "models[0].backends[0]").line, 4);
  EXPECT_THAT(error_at(r, "models[0].backends[1]").message, HasSubstr("expected a map"));
  EXPECT_EQ(error_at(r, "models[0].backends[1]").line, 5);
  EXPECT_THAT(error_at(r, "models[0].backends[2].alias").message, HasSubstr("unknown key"));
  EXPECT_THAT(error_at(r, "models[0].backends[2].alias").message, HasSubstr("weight"));
  EXPECT_EQ(error_at(r, "models[0].backends[3].weight").line, 7);
  EXPECT_THAT(error_at(r, "models[0].backends[3].weight").message, HasSubstr("between 1 and"));
  EXPECT_EQ(error_at(r, "models[0].backends[4].max_in_flight").line, 8);
  EXPECT_THAT(error_at(r, "models[0].backends[5].name").message, HasSubstr("invalid character"));
  EXPECT_THAT(error_at(r, "models[0].backends[6].probe").message, HasSubstr("expected a boolean"));
  auto np = error_at(r, "models[0].backends[7]");
  EXPECT_EQ(np.line, 11);
  EXPECT_THAT(np.message, HasSubstr("missing required key 'provider'"));
  EXPECT_THAT(np.message, Not(HasSubstr("backends")));
  EXPECT_EQ(error_at(r, "models[0].backends[8].sim").line, 12);
  EXPECT_EQ(error_at(r, "models[0].backends[9].base_url").line, 13);
  EXPECT_THAT(error_at(r, "models[0].backends[10]").message, HasSubstr("only one of 'api_key' and 'api_key_env'"));
  auto empty = error_at(r, "models[1].backends");
  EXPECT_EQ(empty.line, 16);
  EXPECT_THAT(empty.message, HasSubstr("at least one backend"));
  auto notlist = error_at(r, "models[2].backends");
  EXPECT_EQ(notlist.line, 18);
  EXPECT_THAT(notlist.message, HasSubstr("expected a list of backends"));
}

TEST_F(RoutingConfigTest, RouteKeysAndTheirRanges) {
  auto r = load("models:\n"
                "  - alias: other\n"
                "    provider: simulated\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    balance: latency\n"
                "    retries: 0\n"
                "    fallbacks: [other]\n"
                "    canned_reply: \"Sorry, try again later.\"\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Route& a = *r.config->find_route("a");
  EXPECT_EQ(a.balance, Balance::latency);
  EXPECT_EQ(a.retries, 0);
  EXPECT_EQ(a.fallbacks, std::vector<std::string>{"other"});
  ASSERT_TRUE(a.canned_reply.has_value());
  EXPECT_EQ(*a.canned_reply, "Sorry, try again later.");

  auto bad = load("models:\n"
                  "  - alias: a\n"
                  "    provider: simulated\n"
                  "    balance: random\n"           // 4
                  "    retries: 11\n"               // 5
                  "    canned_reply: \"\"\n"        // 6
                  "    fallbacks: other\n"          // 7
                  "  - alias: b\n"
                  "    provider: simulated\n"
                  "    retries: -1\n"               // 10
                  "    fallbacks: [\"\"]\n");       // 11
  ASSERT_FALSE(bad.ok());
  auto bal = error_at(bad, "models[0].balance");
  EXPECT_EQ(bal.line, 4);
  EXPECT_THAT(bal.message, HasSubstr("round_robin, weighted, least_connections or latency"));
  auto ret = error_at(bad, "models[0].retries");
  EXPECT_EQ(ret.line, 5);
  EXPECT_THAT(ret.message, HasSubstr("between 0 and 10"));
  EXPECT_EQ(error_at(bad, "models[0].canned_reply").line, 6);
  EXPECT_THAT(error_at(bad, "models[0].fallbacks").message, HasSubstr("expected a list"));
  EXPECT_EQ(error_at(bad, "models[1].retries").line, 10);
  EXPECT_EQ(error_at(bad, "models[1].fallbacks[0]").line, 11);
  EXPECT_EQ(bad.errors.size(), 6u) << all_errors(bad);
}

// ---------------------------------------------------------------------------------------
// Default backend names

TEST_F(RoutingConfigTest, DefaultNames) {
  auto r = load("models:\n"
                // Same host:port, same model: one backend, named host:port.
                "  - alias: one\n"
                "    provider: openai\n"
                "    base_url: http://10.0.0.1:8000/v1\n"
                "    model: m\n"
                "  - alias: one-again\n"
                "    provider: openai\n"
                "    base_url: http://10.0.0.1:8000/v1\n"
                "    model: m\n"
                // Same host:port, different models: host:port/model.
                "  - alias: two\n"
                "    provider: ollama\n"
                "    base_url: http://10.0.0.2:11434\n"
                "    model: llama3.2:1b\n"
                "  - alias: multi\n"
                "    backends:\n"
                "      - {provider: ollama, base_url: 'http://10.0.0.2:11434', model: qwen}\n"
                "      - {provider: simulated}\n"
                "      - {provider: openai, base_url: 'https://[::1]:8443/v1'}\n"
                "      - {provider: simulated, name: my-sim}\n"
                // Simulated, one backend.
                "  - alias: demo\n"
                "    provider: simulated\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(c.find_route("one")->backends[0].name, "10.0.0.1:8000");
  EXPECT_EQ(c.find_route("one-again")->backends[0].name, "10.0.0.1:8000");
  EXPECT_EQ(c.find_route("two")->backends[0].name, "10.0.0.2:11434/llama3.2:1b");
  EXPECT_EQ(names_of(*c.find_route("multi")),
            (std::vector<std::string>{"10.0.0.2:11434/qwen", "simulated:multi#1", "[::1]:8443", "my-sim"}));
  EXPECT_EQ(c.find_route("demo")->backends[0].name, "simulated:demo");
}

TEST_F(RoutingConfigTest, BackendsAndFallbacksAreBounded) {
  std::string yaml = "models:\n  - alias: big\n    backends:\n";
  for (int i = 0; i < 65; ++i) yaml += "      - {provider: simulated, name: s" + std::to_string(i) + "}\n";
  yaml += "  - alias: many\n    provider: simulated\n    fallbacks: [";
  for (int i = 0; i < 17; ++i) yaml += std::string(i ? "," : "") + "big";
  yaml += "]\n";
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  const std::string all = all_errors(r);
  EXPECT_NE(all.find("models[0].backends: at most 64 backends per route, got 65"), std::string::npos) << all;
  EXPECT_NE(all.find("models[1].fallbacks: at most 16 fallbacks, got 17"), std::string::npos) << all;
}

TEST_F(RoutingConfigTest, CanaryStickiness) {
  const std::string base =
      "models:\n"
      "  - alias: chat\n"
      "    provider: simulated\n"
      "    canary: {alias: chat-v2, weight: 10";
  const std::string rest = "}\n  - alias: chat-v2\n    provider: simulated\n";
  auto r = load(base + rest);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("chat")->canary->sticky, CanarySticky::none);
  r = load(base + ", sticky: key" + rest);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("chat")->canary->sticky, CanarySticky::key);
  EXPECT_NE(describe(*r.config).find("canary chat-v2 10% sticky by key"), std::string::npos) << describe(*r.config);
  r = load(base + ", sticky: user" + rest);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("chat")->canary->sticky, CanarySticky::user);
  r = load(base + ", sticky: cookie" + rest);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(all_errors(r).find("models[0].canary.sticky"), std::string::npos) << all_errors(r);
  EXPECT_NE(all_errors(r).find("expected none, key or user"), std::string::npos) << all_errors(r);
}

TEST_F(RoutingConfigTest, DefaultNamesTellApartProvidersCredentialsAndTls) {
  auto r = load("models:\n"
                // One server speaking two APIs with the same model name: provider:host:port/model.
                "  - alias: oa\n"
                "    provider: openai\n"
                "    base_url: http://10.0.0.3:8080/v1\n"
                "    model: m\n"
                "  - alias: an\n"
                "    provider: anthropic\n"
                "    base_url: http://10.0.0.3:8080\n"
                "    model: m\n"
                // Same model with two credentials, and with other TLS settings: host:port#k.
                "  - alias: k1\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'https://10.0.0.4/v1', model: m, api_key: sk-one-1111111111}\n"
                "      - {provider: openai, base_url: 'https://10.0.0.4/v1', model: m, api_key: sk-two-2222222222}\n"
                "  - alias: k2\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'https://10.0.0.4/v1', model: m, api_key: sk-two-2222222222}\n"
                "      - {provider: openai, base_url: 'https://10.0.0.4/v1', model: m, api_key: sk-two-2222222222, tls_verify: false}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(c.find_route("oa")->backends[0].name, "openai:10.0.0.3:8080/m");
  EXPECT_EQ(c.find_route("an")->backends[0].name, "anthropic:10.0.0.3:8080/m");
  EXPECT_EQ(names_of(*c.find_route("k1")), (std::vector<std::string>{"10.0.0.4:443#1", "10.0.0.4:443#2"}));
  // The same backend as k1's second (same credential): the same name; then a third one.
  EXPECT_EQ(names_of(*c.find_route("k2")), (std::vector<std::string>{"10.0.0.4:443#2", "10.0.0.4:443#3"}));
}

TEST_F(RoutingConfigTest, NamedBackendsMustAgreeOnCredentialAndTls) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    backends:\n"
                "      - {name: x, provider: openai, base_url: 'https://10.0.0.5/v1', api_key: sk-aaaa-1111111111}\n"
                "  - alias: b\n"
                "    backends:\n"
                "      - {name: x, provider: openai, base_url: 'https://10.0.0.5/v1', api_key: sk-bbbb-2222222222, tls_verify: false}\n");
  ASSERT_FALSE(r.ok());
  const std::string all = all_errors(r);
  EXPECT_NE(all.find("tls_verify"), std::string::npos) << all;
  EXPECT_NE(all.find("credential"), std::string::npos) << all;
  EXPECT_EQ(all.find("sk-aaaa"), std::string::npos) << "a secret in an error: " << all;
  EXPECT_EQ(all.find("sk-bbbb"), std::string::npos) << "a secret in an error: " << all;
}

TEST_F(RoutingConfigTest, ExplicitNameKeepsItsValueAndCountsForTheModelRule) {
  // A named backend at the same host:port with another model still makes the unnamed
  // ones there take host:port/model.
  auto r = load("models:\n"
                "  - alias: a\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h:8000', model: big, name: big-one}\n"
                "  - alias: b\n"
                "    provider: openai\n"
                "    base_url: http://h:8000\n"
                "    model: small\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("a")->backends[0].name, "big-one");
  EXPECT_EQ(r.config->find_route("b")->backends[0].name, "h:8000/small");
}

// ---------------------------------------------------------------------------------------
// Backends shared by name

// One server spoken to natively by one route and in chat by another is two backends: by
// default two names; one name for both is an error.
TEST_F(RoutingConfigTest, ABackendServedNativelyIsNotTheSameAsOneTranslatedTo) {
  auto two = load("models:\n"
                  "  - {alias: n, provider: openai, base_url: 'http://h1:8000/v1', model: m, native_responses: true}\n"
                  "  - {alias: t, provider: openai, base_url: 'http://h1:8000/v1', model: m}\n");
  ASSERT_TRUE(two.ok()) << all_errors(two);
  EXPECT_NE(names_of(*two.config->find_route("n")), names_of(*two.config->find_route("t")));
  auto one = load("models:\n"
                  "  - alias: n\n"
                  "    backends:\n"
                  "      - {provider: openai, base_url: 'http://h1:8000/v1', model: m, native_responses: true, name: pool}\n"
                  "  - alias: t\n"
                  "    backends:\n"
                  "      - {provider: openai, base_url: 'http://h1:8000/v1', model: m, name: pool}\n");  // 7
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(error_at(one, "models[1].backends[0]").line, 7);
  EXPECT_THAT(error_at(one, "models[1].backends[0]").message, HasSubstr("native_responses"));
}

TEST_F(RoutingConfigTest, SharedBackendMustAgree) {
  auto r = load("models:\n"
                "  - alias: a\n"                                                          // 2
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h1:8000/v1', model: m, name: pool, max_in_flight: 4}\n"  // 4
                "  - alias: b\n"                                                          // 5
                "    backends:\n"
                "      - {provider: ollama, base_url: 'http://h2:8000', model: n, name: pool, probe: false}\n"  // 7
                "  - alias: c\n"                                                          // 8
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h1:8000/v1', model: m, name: pool, max_in_flight: 8}\n");  // 10
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[1].backends[0]");
  EXPECT_EQ(e.line, 7);
  EXPECT_THAT(e.message, HasSubstr("backend 'pool' differs from the one at models[0].backends[0], line 4, route 'a'"));
  EXPECT_THAT(e.message, HasSubstr("provider (ollama vs openai)"));
  EXPECT_THAT(e.message, HasSubstr("base_url ('http://h2:8000' vs 'http://h1:8000/v1')"));
  EXPECT_THAT(e.message, HasSubstr("model ('n' vs 'm')"));
  EXPECT_THAT(e.message, HasSubstr("probe (false vs true)"));
  auto m = error_at(r, "models[2].backends[0]");
  EXPECT_EQ(m.line, 10);
  EXPECT_THAT(m.message, HasSubstr("max_in_flight 8 differs from 4 set by route 'a' for the same backend pool"));
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

TEST_F(RoutingConfigTest, SharedBackendBetweenFormsAgreeing) {
  // A long-form backend named like a short-form route's default name is that backend; the
  // limit one of them sets applies to both.
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: openai\n"
                "    base_url: http://h1:8000/v1\n"
                "    model: m\n"
                "  - alias: b\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h1:8000/v1/', model: m, max_in_flight: 6}\n"
                "      - {provider: openai, base_url: 'http://h9:8000/v1', model: m}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("a")->backends[0].name, "h1:8000");
  EXPECT_EQ(r.config->find_route("b")->backends[0].name, "h1:8000");
  EXPECT_EQ(r.config->find_route("a")->backends[0].max_in_flight, 6);
  EXPECT_EQ(r.config->find_route("b")->backends[1].max_in_flight, 0);
}

TEST_F(RoutingConfigTest, SimulatedNamesAreNeverShared) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    backends:\n"
                "      - {provider: simulated, name: shared}\n"                          // 4
                "  - alias: b\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h:1', name: shared}\n"     // 7
                "  - alias: c\n"
                "    backends:\n"
                "      - {provider: simulated, name: 'simulated:d'}\n"                   // 10
                "  - alias: d\n"                                                         // 11
                "    provider: simulated\n");
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[1].backends[0]");
  EXPECT_EQ(e.line, 7);
  EXPECT_THAT(e.message, HasSubstr("backend name 'shared' is already used at models[0].backends[0], line 4"));
  EXPECT_THAT(e.message, HasSubstr("simulated"));
  // Route d's default name collides with c's explicit one.
  auto d = error_at(r, "models[3].alias");
  EXPECT_EQ(d.line, 11);
  EXPECT_THAT(d.message, HasSubstr("'simulated:d'"));
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

TEST_F(RoutingConfigTest, ANameOnlyOncePerRoute) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h:1/v1', model: m}\n"      // 4
                "      - {provider: openai, base_url: 'http://h:1/v1', model: m}\n"      // 5
                "  - alias: b\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://h:2', name: x}\n"          // 8
                "      - {provider: openai, base_url: 'http://h:2', name: x}\n");        // 9
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[0].backends[1]");
  EXPECT_EQ(e.line, 5);
  EXPECT_THAT(e.message, HasSubstr("backend name 'h:1' appears twice in this route"));
  EXPECT_THAT(e.message, HasSubstr("models[0].backends[0], line 4"));
  EXPECT_EQ(error_at(r, "models[1].backends[1]").line, 9);
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

TEST_F(RoutingConfigTest, BreakerOverridesOfASharedBackendMustAgree) {
  const std::string common =
      "models:\n"
      "  - alias: a\n"                                   // 2
      "    provider: openai\n"
      "    base_url: http://h:8000/v1\n"
      "    model: m\n"
      "    breaker: {error_rate: 0.2}\n"                 // 6
      "  - alias: b\n"
      "    provider: openai\n"
      "    base_url: http://h:8000/v1\n"
      "    model: m\n";
  auto r = load(common + "    breaker: {error_rate: 0.3}\n");  // 11
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[1].breaker");
  EXPECT_EQ(e.line, 11);
  EXPECT_THAT(e.message, HasSubstr("route 'a' sets (models[0].breaker, line 6)"));
  EXPECT_THAT(e.message, HasSubstr("shared backend 'h:8000'"));
  EXPECT_EQ(r.errors.size(), 1u) << all_errors(r);

  // The same override, or none on the other route: fine.
  r = load(common + "    breaker: {error_rate: 0.2}\n");
  EXPECT_TRUE(r.ok()) << all_errors(r);
  r = load(common);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_FALSE(r.config->find_route("b")->breaker.has_value());
  ASSERT_TRUE(r.config->find_route("a")->breaker.has_value());
  EXPECT_DOUBLE_EQ(r.config->find_route("a")->breaker->error_rate, 0.2);
}

// ---------------------------------------------------------------------------------------
// Fallbacks and canaries

TEST_F(RoutingConfigTest, FallbacksAndCanaryParsed) {
  auto r = load("models:\n"
                "  - alias: chat-v1\n"
                "    provider: simulated\n"
                "    fallbacks: [small, tiny]\n"
                "    canary:\n"
                "      alias: chat-v2\n"
                "      weight: 12.5\n"
                "      window: 2m\n"
                "      min_requests: 50\n"
                "      max_error_rate_increase: 0.05\n"
                "      max_ttft_ratio: 1.5\n"
                "  - alias: chat-v2\n"
                "    provider: simulated\n"
                "    canary: {alias: chat-v1, weight: 0}\n"
                "  - alias: small\n"
                "    provider: simulated\n"
                "  - alias: tiny\n"
                "    provider: simulated\n"
                "    canary: {alias: small, weight: 100, max_error_rate_increase: -1, max_ttft_ratio: 0}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  const Route& v1 = *c.find_route("chat-v1");
  EXPECT_EQ(v1.fallbacks, (std::vector<std::string>{"small", "tiny"}));
  ASSERT_TRUE(v1.canary.has_value());
  EXPECT_EQ(v1.canary->alias, "chat-v2");
  EXPECT_DOUBLE_EQ(v1.canary->weight, 12.5);
  EXPECT_EQ(v1.canary->window, Millis(120000));
  EXPECT_EQ(v1.canary->min_requests, 50);
  EXPECT_DOUBLE_EQ(v1.canary->max_error_rate_increase, 0.05);
  EXPECT_DOUBLE_EQ(v1.canary->max_ttft_ratio, 1.5);
  // The canary target is a plain route too, callable directly.
  ASSERT_NE(c.find_route("chat-v2"), nullptr);
  const CanaryConfig& d = *c.find_route("chat-v2")->canary;
  const CanaryConfig defaults;
  EXPECT_EQ(d.weight, 0);
  EXPECT_EQ(d.window, defaults.window);
  EXPECT_EQ(d.min_requests, defaults.min_requests);
  EXPECT_DOUBLE_EQ(d.max_error_rate_increase, defaults.max_error_rate_increase);
  EXPECT_DOUBLE_EQ(d.max_ttft_ratio, defaults.max_ttft_ratio);
  const CanaryConfig& off = *c.find_route("tiny")->canary;
  EXPECT_EQ(off.weight, 100);
  EXPECT_DOUBLE_EQ(off.max_error_rate_increase, -1);
  EXPECT_DOUBLE_EQ(off.max_ttft_ratio, 0);
  EXPECT_FALSE(c.find_route("small")->canary.has_value());
}

TEST_F(RoutingConfigTest, FallbackErrors) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    fallbacks:\n"
                "      - b\n"        // 5: fine
                "      - ghost\n"    // 6
                "      - a\n"        // 7: itself
                "      - b\n"        // 8: duplicate
                "  - alias: b\n"
                "    provider: simulated\n");
  ASSERT_FALSE(r.ok());
  auto g = error_at(r, "models[0].fallbacks[1]");
  EXPECT_EQ(g.line, 6);
  EXPECT_THAT(g.message, HasSubstr("unknown model alias 'ghost'"));
  auto s = error_at(r, "models[0].fallbacks[2]");
  EXPECT_EQ(s.line, 7);
  EXPECT_THAT(s.message, HasSubstr("its own fallback"));
  auto d = error_at(r, "models[0].fallbacks[3]");
  EXPECT_EQ(d.line, 8);
  EXPECT_THAT(d.message, HasSubstr("duplicate fallback 'b'"));
  EXPECT_EQ(r.errors.size(), 3u) << all_errors(r);
}

TEST_F(RoutingConfigTest, OverloadReadAndItsErrors) {
  auto ok = load("models:\n"
                 "  - alias: big\n"
                 "    provider: simulated\n"
                 "    canned_reply: busy\n"
                 "    overload: {model: small, canned: true, max_wait: 250ms}\n"
                 "  - alias: small\n"
                 "    provider: simulated\n");
  ASSERT_TRUE(ok.ok()) << all_errors(ok);
  const auto& ov = *ok.config->find_route("big")->overload;
  EXPECT_EQ(ov.model, "small");
  EXPECT_TRUE(ov.canned);
  EXPECT_EQ(ov.max_wait, std::chrono::milliseconds(250));
  EXPECT_FALSE(ok.config->find_route("small")->overload.has_value());

  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    overload: {}\n"                          // neither
                "  - alias: b\n"
                "    provider: simulated\n"
                "    overload: {model: b}\n"                  // itself
                "  - alias: c\n"
                "    provider: simulated\n"
                "    overload: {model: ghost, canned: true}\n"  // unknown; no canned_reply
                "  - alias: d\n"
                "    provider: simulated\n"
                "    overload: {model: a, max_wait: soon}\n");  // not a duration
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].overload").message, HasSubstr("neither a light model nor canned"));
  EXPECT_THAT(error_at(r, "models[1].overload.model").message, HasSubstr("its own light model"));
  EXPECT_THAT(error_at(r, "models[2].overload.model").message, HasSubstr("unknown model alias 'ghost'"));
  EXPECT_THAT(error_at(r, "models[2].overload.canned").message, HasSubstr("canned_reply"));
  EXPECT_EQ(error_at(r, "models[3].overload.max_wait").line, 13);
  EXPECT_EQ(r.errors.size(), 5u) << all_errors(r);
}

TEST_F(RoutingConfigTest, AdaptiveNeedsACeiling) {
  auto ok = load("models:\n"
                 "  - alias: a\n"
                 "    provider: simulated\n"
                 "    backend_max_in_flight: 8\n"
                 "    adaptive: {target_ttft: 800ms}\n");
  ASSERT_TRUE(ok.ok()) << all_errors(ok);
  const auto& ad = ok.config->find_route("a")->primary().adaptive;
  EXPECT_EQ(ad.target_ttft, std::chrono::milliseconds(800));
  EXPECT_EQ(ad.min, 1);
  EXPECT_EQ(ad.interval, std::chrono::milliseconds(2000));
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    adaptive: {target_ttft: 1s}\n"          // no max_in_flight
                "  - alias: b\n"
                "    backends:\n"
                "      - {provider: simulated, max_in_flight: 4, adaptive: {target_ttft: 1s, min: 5}}\n"
                "      - {provider: simulated, adaptive: {min: 2}}\n");  // no target_ttft
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].adaptive").message, HasSubstr("max_in_flight"));
  EXPECT_THAT(error_at(r, "models[1].backends[0].adaptive.min").message, HasSubstr("above the backend's max_in_flight"));
  EXPECT_THAT(all_errors(r), HasSubstr("target_ttft"));
}

TEST_F(RoutingConfigTest, CanaryErrors) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    canary: {alias: ghost, weight: 5}\n"   // 4
                "  - alias: b\n"
                "    provider: simulated\n"
                "    canary:\n"
                "      alias: b\n"                          // 8: itself
                "      weight: 150\n"                       // 9
                "      window: 0\n"                         // 10
                "      min_requests: 0\n"                   // 11
                "      max_error_rate_increase: -0.5\n"     // 12
                "      max_ttft_ratio: -1\n"                // 13
                "      rollback: true\n"                    // 14
                "  - alias: c\n"
                "    provider: simulated\n"
                "    canary: {weight: 5}\n"                 // 17
                "  - alias: d\n"
                "    provider: simulated\n"
                "    canary: {alias: a}\n"                  // 20
                "  - alias: e\n"
                "    provider: simulated\n"
                "    canary: a\n");                         // 23
  ASSERT_FALSE(r.ok());
  auto u = error_at(r, "models[0].canary.alias");
  EXPECT_EQ(u.line, 4);
  EXPECT_THAT(u.message, HasSubstr("unknown model alias 'ghost'"));
  auto s = error_at(r, "models[1].canary.alias");
  EXPECT_EQ(s.line, 8);
  EXPECT_THAT(s.message, HasSubstr("its own canary"));
  EXPECT_THAT(error_at(r, "models[1].canary.weight").message, HasSubstr("between 0 and 100"));
  EXPECT_EQ(error_at(r, "models[1].canary.window").line, 10);
  EXPECT_EQ(error_at(r, "models[1].canary.min_requests").line, 11);
  auto er = error_at(r, "models[1].canary.max_error_rate_increase");
  EXPECT_EQ(er.line, 12);
  EXPECT_THAT(er.message, HasSubstr("-1 (off) or between 0 and 1"));
  EXPECT_EQ(error_at(r, "models[1].canary.max_ttft_ratio").line, 13);
  EXPECT_THAT(error_at(r, "models[1].canary.rollback").message, HasSubstr("unknown key"));
  auto ma = error_at(r, "models[2].canary");
  EXPECT_EQ(ma.line, 17);
  EXPECT_THAT(ma.message, HasSubstr("missing required key 'alias'"));
  auto mw = error_at(r, "models[3].canary");
  EXPECT_EQ(mw.line, 20);
  EXPECT_THAT(mw.message, HasSubstr("missing required key 'weight'"));
  EXPECT_THAT(error_at(r, "models[4].canary").message, HasSubstr("expected a map"));
  EXPECT_EQ(r.errors.size(), 11u) << all_errors(r);
}

// ---------------------------------------------------------------------------------------
// routing:

TEST_F(RoutingConfigTest, RoutingDefaults) {
  auto r = load("models:\n  - {alias: a, provider: simulated}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const RoutingSettings& rs = r.config->routing;
  EXPECT_EQ(rs.health.interval, Millis(0));
  EXPECT_EQ(rs.health.timeout, Millis(5000));
  EXPECT_EQ(rs.health.unhealthy_after, 3);
  EXPECT_EQ(rs.health.healthy_after, 2);
  EXPECT_EQ(rs.health.eject_after, 5);
  EXPECT_EQ(rs.health.eject_for, Millis(30000));
  for (const BreakerConfig* b : {&rs.breaker, &rs.provider_breaker}) {
    EXPECT_TRUE(b->enabled);
    EXPECT_EQ(b->window, Millis(10000));
    EXPECT_EQ(b->min_requests, 20);
    EXPECT_DOUBLE_EQ(b->error_rate, 0.5);
    EXPECT_EQ(b->p95_ttft, Millis(0));
    EXPECT_EQ(b->open_for, Millis(5000));
    EXPECT_EQ(b->half_open_probes, 3);
  }
  EXPECT_EQ(rs.webhook_url, "");
  // An empty section keeps the defaults too.
  r = load("models:\n  - {alias: a, provider: simulated}\nrouting:\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->routing.health.eject_after, 5);
}

TEST_F(RoutingConfigTest, RoutingSectionParsed) {
  auto r = load("routing:\n"
                "  health:\n"
                "    interval: 10s\n"
                "    timeout: 2s\n"
                "    unhealthy_after: 4\n"
                "    healthy_after: 1\n"
                "    eject_after: 0\n"
                "    eject_for: 1m\n"
                "  breaker:\n"
                "    enabled: false\n"
                "    window: 100ms\n"
                "    min_requests: 7\n"
                "    error_rate: 0.25\n"
                "    p95_ttft: 3s\n"
                "    open_for: 20s\n"
                "    half_open_probes: 1\n"
                "  provider_breaker:\n"
                "    error_rate: 0.9\n"
                "  webhook: https://hooks.example.com/services/T000/B000?token=abc\n"
                "models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    breaker: {min_requests: 99}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const RoutingSettings& rs = r.config->routing;
  EXPECT_EQ(rs.health.interval, Millis(10000));
  EXPECT_EQ(rs.health.timeout, Millis(2000));
  EXPECT_EQ(rs.health.unhealthy_after, 4);
  EXPECT_EQ(rs.health.healthy_after, 1);
  EXPECT_EQ(rs.health.eject_after, 0);
  EXPECT_EQ(rs.health.eject_for, Millis(60000));
  EXPECT_FALSE(rs.breaker.enabled);
  EXPECT_EQ(rs.breaker.window, Millis(100));
  EXPECT_EQ(rs.breaker.min_requests, 7);
  EXPECT_DOUBLE_EQ(rs.breaker.error_rate, 0.25);
  EXPECT_EQ(rs.breaker.p95_ttft, Millis(3000));
  EXPECT_EQ(rs.breaker.open_for, Millis(20000));
  EXPECT_EQ(rs.breaker.half_open_probes, 1);
  // provider_breaker starts from the built-in defaults, not from routing.breaker.
  EXPECT_TRUE(rs.provider_breaker.enabled);
  EXPECT_DOUBLE_EQ(rs.provider_breaker.error_rate, 0.9);
  EXPECT_EQ(rs.provider_breaker.min_requests, 20);
  EXPECT_EQ(rs.provider_breaker.window, Millis(10000));
  EXPECT_EQ(rs.webhook_url, "https://hooks.example.com/services/T000/B000?token=abc");
  // A route's override starts from routing.breaker.
  const auto& ob = r.config->routes[0].breaker;
  ASSERT_TRUE(ob.has_value());
  EXPECT_EQ(ob->min_requests, 99);
  EXPECT_FALSE(ob->enabled);
  EXPECT_DOUBLE_EQ(ob->error_rate, 0.25);
  EXPECT_EQ(ob->open_for, Millis(20000));
}

TEST_F(RoutingConfigTest, RoutingRangeErrors) {
  auto r = load("models:\n"
                "  - {alias: a, provider: simulated}\n"
                "routing:\n"
                "  health:\n"
                "    interval: -1s\n"            // 5
                "    timeout: 0\n"               // 6
                "    unhealthy_after: 0\n"       // 7
                "    healthy_after: 0\n"         // 8
                "    eject_after: -1\n"          // 9
                "    eject_for: 0\n"             // 10
                "    period: 5s\n"               // 11
                "  breaker:\n"
                "    enabled: sometimes\n"       // 13
                "    window: 50ms\n"             // 14
                "    min_requests: 0\n"          // 15
                "    error_rate: 1.5\n"          // 16
                "    p95_ttft: fast\n"           // 17
                "    open_for: 0\n"              // 18
                "    half_open_probes: 0\n"      // 19
                "  provider_breaker:\n"
                "    error_rate: -0.1\n"         // 21
                "  webhook: ftp://hooks.example.com\n"  // 22
                "  retries: 3\n");               // 23
  ASSERT_FALSE(r.ok());
  const std::pair<const char*, int> expected[] = {
      {"routing.health.interval", 5},          {"routing.health.timeout", 6},
      {"routing.health.unhealthy_after", 7},   {"routing.health.healthy_after", 8},
      {"routing.health.eject_after", 9},       {"routing.health.eject_for", 10},
      {"routing.health.period", 11},           {"routing.breaker.enabled", 13},
      {"routing.breaker.window", 14},          {"routing.breaker.min_requests", 15},
      {"routing.breaker.error_rate", 16},      {"routing.breaker.p95_ttft", 17},
      {"routing.breaker.open_for", 18},        {"routing.breaker.half_open_probes", 19},
      {"routing.provider_breaker.error_rate", 21}, {"routing.webhook", 22},
      {"routing.retries", 23},
  };
  for (const auto& [key, line] : expected) EXPECT_EQ(error_at(r, key).line, line) << key;
  EXPECT_EQ(r.errors.size(), std::size(expected)) << all_errors(r);
  EXPECT_THAT(error_at(r, "routing.breaker.window").message, HasSubstr("at least 100ms"));
  EXPECT_THAT(error_at(r, "routing.breaker.error_rate").message, HasSubstr("between 0 and 1"));
  EXPECT_THAT(error_at(r, "routing.webhook").message, HasSubstr("http:// or https://"));
  EXPECT_THAT(error_at(r, "routing.retries").message, HasSubstr("health, breaker, provider_breaker, webhook"));

  // A route's breaker override has the same keys and ranges.
  auto o = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    breaker: {window: 10ms, colour: red}\n");  // 4
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(error_at(o, "models[0].breaker.window").line, 4);
  EXPECT_EQ(error_at(o, "models[0].breaker.colour").line, 4);
  EXPECT_THAT(keys_of(o), ::testing::UnorderedElementsAre("models[0].breaker.window", "models[0].breaker.colour"))
      << all_errors(o);
}

TEST_F(RoutingConfigTest, WebhookUrls) {
  for (const char* ok : {"http://127.0.0.1:9000/hook", "https://hooks.example.com", "\"\""}) {
    auto r = load(std::string("models:\n  - {alias: a, provider: simulated}\nrouting:\n  webhook: ") + ok + "\n");
    EXPECT_TRUE(r.ok()) << ok << "\n" << all_errors(r);
  }
  for (const char* bad : {"hooks.example.com/x", "https://user:pw@hooks.example.com", "https://h/x?a=1#frag",
                          "http://", "https://h:99999/"}) {
    auto r = load(std::string("models:\n  - {alias: a, provider: simulated}\nrouting:\n  webhook: '") + bad + "'\n");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(error_at(r, "routing.webhook").line, 4) << bad;
  }
}

// ---------------------------------------------------------------------------------------
// describe() and helpers

TEST_F(RoutingConfigTest, DescribeShowsRoutesBackendsAndRouting) {
  auto r = load("routing:\n"
                "  health: {interval: 10s, eject_after: 3, eject_for: 45s}\n"
                "  breaker: {error_rate: 0.3, min_requests: 10, p95_ttft: 8s, open_for: 15s}\n"
                "  webhook: https://hooks.example.com/secret-path?token=tok-123\n"
                "models:\n"
                "  - alias: chat\n"
                "    balance: weighted\n"
                "    retries: 1\n"
                "    fallbacks: [small, demo]\n"
                "    canary: {alias: chat-v2, weight: 10}\n"
                "    canned_reply: busy\n"
                "    backends:\n"
                "      - {provider: openai, base_url: 'http://10.0.0.1:8000/v1', model: big, name: gpu-a, weight: 3,\n"
                "         max_in_flight: 16, api_key: sk-backend-secret-9876}\n"
                "      - {provider: openai, base_url: 'http://10.0.0.2:8000/v1', model: big, probe: false}\n"
                "  - alias: chat-v2\n"
                "    provider: simulated\n"
                "  - alias: small\n"
                "    provider: simulated\n"
                "  - alias: demo\n"
                "    provider: simulated\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const std::string d = describe(*r.config);
  EXPECT_THAT(d, HasSubstr("  chat: 2 backends, balance weighted, retries 1, fallbacks small,demo, canary chat-v2 10%, "
                           "canned reply\n"));
  EXPECT_THAT(d, HasSubstr("    -> openai http://10.0.0.1:8000/v1 model big api_key "));
  EXPECT_THAT(d, HasSubstr("9876 name gpu-a weight 3 max_in_flight 16\n"));
  EXPECT_THAT(d, HasSubstr("    -> openai http://10.0.0.2:8000/v1 model big name 10.0.0.2:8000 probe off\n"));
  EXPECT_THAT(d, HasSubstr("  chat-v2: retries 2\n    -> simulated"));
  EXPECT_THAT(d, HasSubstr("model chat-v2 name simulated:chat-v2\n"));
  EXPECT_THAT(d, HasSubstr("routing:    probes every 10s (timeout 5s, unhealthy after 3, healthy after 2), "
                           "eject after 3 failures for 45s, breaker error_rate 0.3 min_requests 10 p95_ttft 8s "
                           "window 10s open_for 15s"));
  EXPECT_THAT(d, HasSubstr(", webhook hooks.example.com\n"));
  for (const char* secret : {"sk-backend-secret-9876", "backend-secret", "secret-path", "tok-123"}) {
    EXPECT_THAT(d, Not(HasSubstr(secret))) << secret;
  }

  auto q = load("routing:\n  health: {eject_after: 0}\n  breaker: {enabled: false}\n"
                "models:\n  - {alias: a, provider: simulated}\n");
  ASSERT_TRUE(q.ok()) << all_errors(q);
  const std::string dq = describe(*q.config);
  EXPECT_THAT(dq, HasSubstr("routing:    probes off, no ejection, breaker off, provider breaker error_rate 0.5"));
  EXPECT_THAT(dq, Not(HasSubstr("webhook")));
  EXPECT_THAT(dq, Not(HasSubstr("balance")));
}

TEST(RoutingConfigMisc, BalanceNames) {
  EXPECT_EQ(to_string(Balance::round_robin), "round_robin");
  EXPECT_EQ(to_string(Balance::weighted), "weighted");
  EXPECT_EQ(to_string(Balance::least_connections), "least_connections");
  EXPECT_EQ(to_string(Balance::latency), "latency");
}

// The example from docs/configuration.md ("Several backends").
TEST_F(RoutingConfigTest, DocumentationExampleLoads) {
  fake_env_vars()["OPENAI_API_KEY"] = "sk-openai-doc-12345678";
  auto r = load("routing:\n"
                "  health:\n"
                "    interval: 15s\n"
                "    eject_after: 5\n"
                "    eject_for: 30s\n"
                "  breaker:\n"
                "    error_rate: 0.5\n"
                "    min_requests: 20\n"
                "    p95_ttft: 10s\n"
                "  webhook: https://hooks.example.com/sluice\n"
                "models:\n"
                "  - alias: chat\n"
                "    balance: least_connections\n"
                "    retries: 2\n"
                "    fallbacks: [chat-cloud]\n"
                "    canned_reply: \"The assistant is busy; please try again in a minute.\"\n"
                "    canary: {alias: chat-next, weight: 5}\n"
                "    backends:\n"
                "      - provider: openai\n"
                "        base_url: http://10.0.0.11:8000/v1\n"
                "        model: llama-3.1-70b\n"
                "        name: gpu-1\n"
                "        weight: 2\n"
                "        max_in_flight: 32\n"
                "      - provider: openai\n"
                "        base_url: http://10.0.0.12:8000/v1\n"
                "        model: llama-3.1-70b\n"
                "        name: gpu-2\n"
                "        max_in_flight: 16\n"
                "  - alias: chat-next\n"
                "    provider: openai\n"
                "    base_url: http://10.0.0.13:8000/v1\n"
                "    model: llama-3.3-70b\n"
                "  - alias: chat-cloud\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "    model: gpt-4o-mini\n"
                "    breaker: {error_rate: 0.3, open_for: 30s}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(names_of(*c.find_route("chat")), (std::vector<std::string>{"gpu-1", "gpu-2"}));
  EXPECT_EQ(c.find_route("chat-next")->backends[0].name, "10.0.0.13:8000");
  EXPECT_EQ(c.find_route("chat-cloud")->backends[0].api_key, "sk-openai-doc-12345678");
  EXPECT_EQ(c.find_route("chat-cloud")->breaker->p95_ttft, Millis(10000));
  EXPECT_EQ(c.routing.health.interval, Millis(15000));
}
