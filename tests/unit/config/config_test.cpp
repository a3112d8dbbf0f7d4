#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "config/config.hpp"
#include "config_fixture.hpp"
#include "source_tree.hpp"

using namespace sluice::config;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

std::optional<std::string> empty_env(const char*) { return std::nullopt; }

const char* kMinimal =
    "models:\n"
    "  - alias: demo\n"
    "    provider: simulated\n";

using ConfigTest = sluice::config::testing::ConfigFixture;
using sluice::config::testing::fake_env;
using sluice::config::testing::fake_env_vars;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-config-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const auto p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST_F(ConfigTest, CorsOriginsAreCheckedAndOffByDefault) {
  const std::string route = "models:\n  - alias: m\n    provider: simulated\n";
  auto off = load(route);
  ASSERT_TRUE(off.ok()) << all_errors(off);
  EXPECT_FALSE(off.config->cors.enabled());
  auto on = load(route + "cors:\n  allowed_origins: [\"https://app.example.com\", \"http://localhost:5173\"]\n  max_age: 1m\n");
  ASSERT_TRUE(on.ok()) << all_errors(on);
  EXPECT_TRUE(on.config->cors.allows("http://localhost:5173"));
  EXPECT_FALSE(on.config->cors.allows("http://localhost:5174"));
  EXPECT_EQ(on.config->cors.max_age, std::chrono::minutes(1));
  auto any = load(route + "cors: {allowed_origins: [\"*\"]}\n");
  ASSERT_TRUE(any.ok()) << all_errors(any);
  EXPECT_TRUE(any.config->cors.allows("https://whoever.example"));
  auto bad = load(route + "cors:\n  allowed_origins: [\"https://app.example.com/\", \"ftp://x\", \"https://\", {a: 1}]\n");
  ASSERT_FALSE(bad.ok());
  for (int i = 0; i < 4; ++i) error_at(bad, "cors.allowed_origins[" + std::to_string(i) + "]");
  EXPECT_THAT(error_at(load(route + "cors: {allowed_origins: https://a.example}\n"), "cors.allowed_origins").message,
              HasSubstr("a list of origins"));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// The shipped example.

TEST_F(ConfigTest, ExampleConfigLoadsWithEmptyEnv) {
  auto r = load_file(sluice::test::source_path("config/sluice.example.yaml"), empty_env);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 8080);
  EXPECT_EQ(c.admin_listen_host, "127.0.0.1");
  EXPECT_EQ(c.admin_listen_port, 8081);
  EXPECT_TRUE(c.console);
  const Route* demo = c.find_route("demo");
  ASSERT_NE(demo, nullptr);
  EXPECT_EQ(demo->backends[0].provider, Provider::simulated);
  EXPECT_EQ(demo->backends[0].sim.ttft, Millis(150));
  EXPECT_EQ(demo->backends[0].sim.inter_token, Millis(30));
  EXPECT_EQ(demo->backends[0].model, "demo");
  const ApiKey* k = c.find_key("sk-demo-0000000000000000");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->name, "demo");
  EXPECT_EQ(k->tenant, "demo");
  EXPECT_EQ(k->tier, "standard");
  EXPECT_EQ(k->models, std::vector<std::string>{"*"});
  EXPECT_EQ(c.find_key("sk-demo-0000000000000001"), nullptr);
  EXPECT_EQ(c.find_route("nope"), nullptr);
  EXPECT_TRUE(c.params.count("temperature"));
  EXPECT_TRUE(c.options.count("num_ctx"));
}

// ---------------------------------------------------------------------------------------
// Defaults.

TEST_F(ConfigTest, MinimalConfigGetsDefaults) {
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  const Config d;
  EXPECT_EQ(c.listen_host, "127.0.0.1");
  EXPECT_EQ(c.listen_port, 8080);
  EXPECT_EQ(c.workers, 0);
  EXPECT_EQ(c.max_body_bytes, d.max_body_bytes);
  EXPECT_EQ(c.max_header_bytes, d.max_header_bytes);
  EXPECT_EQ(c.timeouts.total, Millis(600000));
  EXPECT_EQ(c.timeouts.heartbeat, Millis(15000));
  EXPECT_EQ(c.access_log, "-");
  EXPECT_TRUE(c.keys.empty());
  ASSERT_EQ(c.routes.size(), 1u);
  ASSERT_EQ(c.routes[0].backends.size(), 1u);
  EXPECT_EQ(c.routes[0].backends[0].model, "demo");
  EXPECT_EQ(c.routes[0].backends[0].sim.max_in_flight, 64);
  EXPECT_EQ(c.routes[0].backends[0].name, "simulated:demo");
  EXPECT_EQ(c.routes[0].balance, Balance::least_connections);
  EXPECT_EQ(c.routes[0].retries, 2);
  EXPECT_TRUE(c.routes[0].fallbacks.empty());
  EXPECT_FALSE(c.routes[0].canary.has_value());
  EXPECT_FALSE(c.routes[0].breaker.has_value());
  EXPECT_FALSE(c.routes[0].canned_reply.has_value());
  // instance defaults to "<hostname>:<port>".
  EXPECT_THAT(c.instance, ::testing::EndsWith(":8080"));
  EXPECT_GT(c.instance.size(), 5u);
}

TEST_F(ConfigTest, DefaultParamsAndOptionsWhenOmitted) {
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok());
  const auto& p = r.config->params;
  ASSERT_TRUE(p.count("temperature"));
  EXPECT_EQ(p.at("temperature").min, 0);
  EXPECT_EQ(p.at("temperature").max, 2);
  EXPECT_FALSE(p.at("temperature").integer);
  EXPECT_EQ(p.at("max_tokens").max, 131072);
  EXPECT_TRUE(p.at("max_tokens").integer);
  EXPECT_EQ(p.at("n").min, 1);
  EXPECT_EQ(p.at("n").max, 1);
  EXPECT_EQ(p.at("seed").max, 9007199254740992.0);
  EXPECT_EQ(p.at("presence_penalty").min, -2);
  EXPECT_EQ(p.size(), 8u);
  const auto& o = r.config->options;
  EXPECT_EQ(o.at("num_ctx").min, 256);
  EXPECT_EQ(o.at("num_predict").min, -2);
  EXPECT_EQ(o.at("mirostat").max, 2);
  EXPECT_TRUE(o.at("seed").integer);
  EXPECT_EQ(o.size(), 11u);
}

TEST_F(ConfigTest, ExplicitParamsReplaceDefaults) {
  auto r = load(std::string(kMinimal) +
                "params:\n"
                "  temperature: {min: 0, max: 1.5}\n"
                "  max_tokens: {min: 1, max: 32768, integer: true}\n"
                "  seed: {integer: true}\n"
                "options: {}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& p = r.config->params;
  EXPECT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("temperature").max, 1.5);
  EXPECT_TRUE(p.at("max_tokens").integer);
  EXPECT_EQ(p.at("seed").min, -9007199254740992.0);
  EXPECT_FALSE(p.count("top_p"));
  EXPECT_TRUE(r.config->options.empty());
}

// ---------------------------------------------------------------------------------------
// Durations.

TEST_F(ConfigTest, DurationsAcceptUnitsAndBareMilliseconds) {
  auto r = load(std::string(kMinimal) +
                "timeouts:\n"
                "  connect: 250ms\n"
                "  first_token: 5s\n"
                "  total: 10m\n"
                "  keep_alive: 1h\n"
                "  idle: 1500\n"
                "  shutdown_grace: 0\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& t = r.config->timeouts;
  EXPECT_EQ(t.connect, Millis(250));
  EXPECT_EQ(t.first_token, Millis(5000));
  EXPECT_EQ(t.total, Millis(600000));
  EXPECT_EQ(t.keep_alive, Millis(3600000));
  EXPECT_EQ(t.idle, Millis(1500));
  EXPECT_EQ(t.shutdown_grace, Millis(0));
  EXPECT_EQ(t.heartbeat, Millis(15000));  // untouched default
}

TEST_F(ConfigTest, BadDurationsAreErrorsWithLines) {
  auto r = load(std::string(kMinimal) +    // lines 1-3
                "timeouts:\n"              // 4
                "  connect: 5 sec\n"       // 5
                "  idle: -1s\n"            // 6
                "  total: 1.5s\n"          // 7
                "  heartbeat: 0\n"         // 8
                "  first_token: [1]\n");   // 9
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.config, nullptr);
  EXPECT_EQ(error_at(r, "timeouts.connect").line, 5);
  EXPECT_THAT(error_at(r, "timeouts.connect").message, HasSubstr("expected a duration"));
  EXPECT_EQ(error_at(r, "timeouts.idle").line, 6);
  EXPECT_EQ(error_at(r, "timeouts.total").line, 7);
  EXPECT_EQ(error_at(r, "timeouts.heartbeat").line, 8);
  EXPECT_THAT(error_at(r, "timeouts.heartbeat").message, HasSubstr("greater than 0"));
  EXPECT_EQ(error_at(r, "timeouts.first_token").line, 9);
  EXPECT_EQ(r.errors.size(), 5u);
}

// ---------------------------------------------------------------------------------------
// Errors: kinds, key paths, lines.

TEST_F(ConfigTest, UnknownProviderMessage) {
  auto r = load("models:\n"
                "  - alias: demo\n"
                "    provider: foo\n");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  EXPECT_EQ(r.errors[0].to_string(),
            "line 3: models[0].provider: unknown provider 'foo' (expected simulated, openai, ollama or anthropic)");
}

TEST_F(ConfigTest, UnknownKeysAreErrors) {
  auto r = load("listne: 127.0.0.1:9000\n"
                "models:\n"
                "  - alias: demo\n"
                "    provider: simulated\n"
                "    sim: {ttft: 1s, ttfb: 2s}\n"
                "limits:\n"
                "  max_body: 10\n");
  ASSERT_FALSE(r.ok());
  auto e1 = error_at(r, "listne");
  EXPECT_EQ(e1.line, 1);
  EXPECT_THAT(e1.message, HasSubstr("unknown key"));
  EXPECT_THAT(e1.message, HasSubstr("listen"));  // suggests the valid keys
  EXPECT_EQ(error_at(r, "models[0].sim.ttfb").line, 5);
  EXPECT_EQ(error_at(r, "limits.max_body").line, 7);
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST_F(ConfigTest, WrongTypesNameTheExpectedType) {
  auto r = load("workers: many\n"          // 1
                "limits: [1, 2]\n"         // 2
                "access_log: {a: b}\n"     // 3
                "models:\n"                // 4
                "  - alias: demo\n"        // 5
                "    provider: simulated\n"  // 6
                "    sim: {jitter: lots}\n"  // 7
                "keys:\n"                  // 8
                "  - name: a\n"            // 9
                "    key: sk-aaaaaaaaaaaa\n"  // 10
                "    admin: maybe\n"       // 11
                "    models: demo\n");     // 12
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "workers").message, HasSubstr("expected an integer"));
  EXPECT_EQ(error_at(r, "workers").line, 1);
  EXPECT_THAT(error_at(r, "limits").message, HasSubstr("expected a map"));
  EXPECT_EQ(error_at(r, "limits").line, 2);
  EXPECT_THAT(error_at(r, "access_log").message, HasSubstr("expected a string"));
  EXPECT_THAT(error_at(r, "models[0].sim.jitter").message, HasSubstr("expected a number"));
  EXPECT_EQ(error_at(r, "models[0].sim.jitter").line, 7);
  EXPECT_THAT(error_at(r, "keys[0].admin").message, HasSubstr("expected a boolean"));
  EXPECT_EQ(error_at(r, "keys[0].admin").line, 11);
  EXPECT_THAT(error_at(r, "keys[0].models").message, HasSubstr("expected a list"));
  EXPECT_EQ(error_at(r, "keys[0].models").line, 12);
}

TEST_F(ConfigTest, OutOfRangeValues) {
  auto r = load("workers: -1\n"
                "listen: 127.0.0.1:70000\n"
                "limits: {max_body_bytes: 0, upstream_pool_per_host: -3, max_header_bytes: 100}\n"
                "models:\n"
                "  - alias: demo\n"
                "    provider: simulated\n"
                "    sim: {jitter: 2, error_rate_500: 1.5, max_in_flight: 0, default_output_tokens: 10,"
                " max_output_tokens: 5}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "workers").message, HasSubstr("out of range"));
  EXPECT_THAT(error_at(r, "listen").message, HasSubstr("65535"));
  EXPECT_EQ(error_at(r, "listen").line, 2);
  EXPECT_EQ(error_at(r, "limits.max_body_bytes").line, 3);
  error_at(r, "limits.upstream_pool_per_host");
  error_at(r, "limits.max_header_bytes");
  EXPECT_EQ(error_at(r, "models[0].sim.jitter").line, 7);
  error_at(r, "models[0].sim.error_rate_500");
  error_at(r, "models[0].sim.max_in_flight");
  EXPECT_THAT(error_at(r, "models[0].sim.default_output_tokens").message, HasSubstr("greater than max_output_tokens"));
  EXPECT_EQ(r.errors.size(), 9u) << all_errors(r);
}

TEST_F(ConfigTest, ListenForms) {
  auto r = load(std::string(kMinimal) + "listen: \"[::1]:0\"\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "::1");
  EXPECT_EQ(r.config->listen_port, 0);
  r = load(std::string(kMinimal) + "listen: 0.0.0.0:9000\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->listen_host, "0.0.0.0");
  EXPECT_EQ(r.config->listen_port, 9000);
  for (const char* bad : {"8080", ":8080", "::1:8080", "host:", "host:80x"}) {
    r = load(std::string(kMinimal) + "listen: \"" + bad + "\"\n");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(error_at(r, "listen").line, 4) << bad;
  }
}

TEST_F(ConfigTest, ManyErrorsReportedAtOnce) {
  auto r = load("workers: x\n"                // 1
                "bogus: 1\n"                  // 2
                "models:\n"                   // 3
                "  - alias: a\n"              // 4
                "    provider: nope\n"        // 5
                "  - alias: b\n"              // 6
                "    provider: openai\n"      // 7 (no base_url)
                "keys:\n"                     // 8
                "  - name: k\n");             // 9 (no secret)
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.config, nullptr);
  EXPECT_EQ(error_at(r, "workers").line, 1);
  EXPECT_EQ(error_at(r, "bogus").line, 2);
  EXPECT_EQ(error_at(r, "models[0].provider").line, 5);
  EXPECT_THAT(error_at(r, "models[1]").message, HasSubstr("base_url"));
  EXPECT_EQ(error_at(r, "models[1]").line, 6);
  EXPECT_THAT(error_at(r, "keys[0]").message, HasSubstr("secret"));
  EXPECT_EQ(error_at(r, "keys[0]").line, 9);
  EXPECT_EQ(r.errors.size(), 5u) << all_errors(r);
}

TEST_F(ConfigTest, AtLeastOneRouteRequired) {
  for (const char* y : {"", "workers: 2\n", "models: []\n", "models:\n"}) {
    auto r = load(y);
    ASSERT_FALSE(r.ok()) << y;
    EXPECT_THAT(error_at(r, "models").message, HasSubstr("at least one route")) << y;
  }
}

TEST_F(ConfigTest, TopLevelMustBeAMap) {
  auto r = load("- a\n- b\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.errors[0].message, HasSubstr("top level"));
}

TEST_F(ConfigTest, YamlSyntaxErrorHasLine) {
  auto r = load("models:\n"
                "  - alias: demo\n"
                "    provider: [simulated\n"
                "workers: 1\n");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_GT(r.errors[0].line, 0);
  EXPECT_THAT(r.errors[0].message, HasSubstr("invalid YAML"));
}

TEST_F(ConfigTest, DuplicateYamlKey) {
  auto r = load(std::string(kMinimal) + "workers: 1\nworkers: 2\n");
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "workers");
  EXPECT_EQ(e.line, 5);
  EXPECT_THAT(e.message, HasSubstr("duplicate key"));
}

TEST_F(ConfigTest, DuplicateAliases) {
  auto r = load("models:\n"
                "  - alias: demo\n"
                "    provider: simulated\n"
                "  - alias: demo\n"
                "    provider: simulated\n");
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "models[1].alias");
  EXPECT_EQ(e.line, 4);
  EXPECT_THAT(e.message, HasSubstr("duplicate alias 'demo'"));
  EXPECT_THAT(e.message, HasSubstr("line 2"));
}

TEST_F(ConfigTest, RouteRequiredFieldsAndReservedAlias) {
  auto r = load("models:\n"
                "  - provider: simulated\n"
                "  - alias: \"*\"\n"
                "    provider: simulated\n"
                "  - alias: x\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0]").message, HasSubstr("'alias'"));
  EXPECT_THAT(error_at(r, "models[1].alias").message, HasSubstr("reserved"));
  EXPECT_THAT(error_at(r, "models[2]").message, HasSubstr("'provider'"));
}

TEST_F(ConfigTest, RangeMinGreaterThanMax) {
  auto r = load(std::string(kMinimal) +
                "params:\n"                          // 4
                "  temperature: {min: 3, max: 1}\n"  // 5
                "options:\n"                         // 6
                "  num_ctx: {min: x}\n"              // 7
                "  top_k: {max: 5, step: 1}\n");     // 8
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "params.temperature");
  EXPECT_EQ(e.line, 5);
  EXPECT_THAT(e.message, HasSubstr("min (3) is greater than max (1)"));
  EXPECT_EQ(error_at(r, "options.num_ctx.min").line, 7);
  EXPECT_EQ(error_at(r, "options.top_k.step").line, 8);
}

// ---------------------------------------------------------------------------------------
// Backends and URLs.

TEST_F(ConfigTest, BaseUrlParsing) {
  auto r = load("models:\n"
                "  - alias: gpt\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1/\n"
                "    model: gpt-4o-mini\n"
                "  - alias: llama\n"
                "    provider: ollama\n"
                "    base_url: http://127.0.0.1:11434\n"
                "  - alias: plain\n"
                "    provider: openai\n"
                "    base_url: HTTP://example.com/a/b\n"
                "    tls_verify: false\n"
                "  - alias: v6\n"
                "    provider: openai\n"
                "    base_url: https://[::1]:8443/\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Backend& gpt = r.config->find_route("gpt")->backends[0];
  EXPECT_TRUE(gpt.tls);
  EXPECT_EQ(gpt.host, "api.openai.com");
  EXPECT_EQ(gpt.port, 443);
  EXPECT_EQ(gpt.path_prefix, "/v1");
  EXPECT_EQ(gpt.model, "gpt-4o-mini");
  EXPECT_EQ(gpt.base_url, "https://api.openai.com/v1/");
  EXPECT_TRUE(gpt.tls_verify);
  const Backend& llama = r.config->find_route("llama")->backends[0];
  EXPECT_EQ(llama.provider, Provider::ollama);
  EXPECT_FALSE(llama.tls);
  EXPECT_EQ(llama.host, "127.0.0.1");
  EXPECT_EQ(llama.port, 11434);
  EXPECT_EQ(llama.path_prefix, "");
  EXPECT_EQ(llama.model, "llama");
  const Backend& plain = r.config->find_route("plain")->backends[0];
  EXPECT_FALSE(plain.tls);
  EXPECT_EQ(plain.port, 80);
  EXPECT_EQ(plain.path_prefix, "/a/b");
  EXPECT_FALSE(plain.tls_verify);
  const Backend& v6 = r.config->find_route("v6")->backends[0];
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 8443);
  EXPECT_EQ(v6.path_prefix, "");
}

TEST_F(ConfigTest, BadBaseUrls) {
  const char* bad[] = {"ftp://x", "api.openai.com/v1", "https://", "https://u:p@host/v1",
                       "http://host:0", "http://host:99999", "http://host/v1?x=1", "http://host:/"};
  for (const char* url : bad) {
    auto r = load(std::string("models:\n"
                              "  - alias: a\n"
                              "    provider: openai\n"
                              "    base_url: \"") + url + "\"\n");
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(error_at(r, "models[0].base_url").line, 4) << url;
  }
}

TEST_F(ConfigTest, ProviderSpecificSettings) {
  auto r = load("models:\n"
                "  - alias: a\n"
                "    provider: simulated\n"
                "    base_url: http://x\n"          // 4: not for simulated
                "  - alias: b\n"
                "    provider: ollama\n"
                "    base_url: http://x:11434\n"
                "    sim: {ttft: 1s}\n"             // 8: sim only for simulated
                "  - alias: c\n"
                "    provider: openai\n"
                "    base_url: http://x\n"
                "    api_key: sk-one-111111111111\n"
                "    api_key_env: SOME_VAR\n"      // both credential forms
                "  - alias: d\n"
                "    provider: ollama\n"
                "    base_url: http://x:11434\n"
                "    native_responses: true\n"    // 17: the Responses API is OpenAI's
                "  - alias: e\n"
                "    provider: openai\n"
                "    base_url: http://x/v1\n"
                "    native_responses: true\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "models[0].base_url").line, 4);
  EXPECT_EQ(error_at(r, "models[1].sim").line, 8);
  EXPECT_THAT(error_at(r, "models[2]").message, HasSubstr("only one of 'api_key' and 'api_key_env'"));
  EXPECT_EQ(error_at(r, "models[3].native_responses").line, 17);
  EXPECT_THAT(error_at(r, "models[3].native_responses").message, HasSubstr("only provider openai"));
  EXPECT_EQ(r.errors.size(), 4u) << all_errors(r);  // the openai backend may
}

TEST_F(ConfigTest, CaFileResolvedAgainstBaseDir) {
  TempDir dir;
  dir.write("certs/ca.pem", "-----BEGIN CERTIFICATE-----\n");
  const std::string yaml =
      "models:\n"
      "  - alias: a\n"
      "    provider: openai\n"
      "    base_url: https://x\n"
      "    ca_file: certs/ca.pem\n";
  auto r = load(yaml, dir.path());
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(std::filesystem::path(r.config->routes[0].backends[0].ca_file),
            std::filesystem::path(dir.path()) / "certs/ca.pem");
  r = load(yaml, dir.path() + "/nowhere");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].ca_file").message, HasSubstr("not found"));
}

TEST_F(ConfigTest, SimSettingsParsed) {
  auto r = load("models:\n"
                "  - alias: s\n"
                "    provider: simulated\n"
                "    sim:\n"
                "      ttft: 1s\n"
                "      ttft_per_prompt_token: 0.5\n"
                "      inter_token: 5ms\n"
                "      jitter: 0\n"
                "      max_in_flight: 2\n"
                "      max_waiting: 0\n"
                "      default_output_tokens: 8\n"
                "      max_output_tokens: 16\n"
                "      error_rate_429: 0.25\n"
                "      error_rate_500: 0.1\n"
                "      error_rate_503: 0.05\n"
                "      abort_rate: 0.01\n"
                "      hang_rate: 0.02\n"
                "      slow_first_token_rate: 0.03\n"
                "      slow_first_token: 2s\n"
                "      seed: 18446744073709551615\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const SimSettings& s = r.config->routes[0].backends[0].sim;
  EXPECT_EQ(s.ttft, Millis(1000));
  EXPECT_DOUBLE_EQ(s.ttft_per_prompt_token_ms, 0.5);
  EXPECT_EQ(s.inter_token, Millis(5));
  EXPECT_EQ(s.jitter, 0.0);
  EXPECT_EQ(s.max_in_flight, 2);
  EXPECT_EQ(s.max_waiting, 0);
  EXPECT_EQ(s.default_output_tokens, 8);
  EXPECT_EQ(s.max_output_tokens, 16);
  EXPECT_DOUBLE_EQ(s.error_rate_429, 0.25);
  EXPECT_DOUBLE_EQ(s.error_rate_500, 0.1);
  EXPECT_DOUBLE_EQ(s.error_rate_503, 0.05);
  EXPECT_DOUBLE_EQ(s.abort_rate, 0.01);
  EXPECT_DOUBLE_EQ(s.hang_rate, 0.02);
  EXPECT_DOUBLE_EQ(s.slow_first_token_rate, 0.03);
  EXPECT_EQ(s.slow_first_token, Millis(2000));
  EXPECT_EQ(s.seed, 18446744073709551615ull);
}

// ---------------------------------------------------------------------------------------
// Client keys.

TEST_F(ConfigTest, KeyDefaultsAndFields) {
  auto r = load(std::string(kMinimal) +
                "keys:\n"
                "  - {name: a, key: sk-a-111111111111}\n"
                "  - name: b\n"
                "    key: sk-b-222222222222\n"
                "    tenant: acme\n"
                "    tier: premium\n"
                "    models: [demo]\n"
                "    admin: true\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const ApiKey* a = r.config->find_key("sk-a-111111111111");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->tenant, "default");
  EXPECT_EQ(a->tier, "standard");
  EXPECT_EQ(a->models, std::vector<std::string>{"*"});
  EXPECT_FALSE(a->admin);
  const ApiKey* b = r.config->find_key("sk-b-222222222222");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name, "b");
  EXPECT_EQ(b->tenant, "acme");
  EXPECT_EQ(b->tier, "premium");
  EXPECT_EQ(b->models, std::vector<std::string>{"demo"});
  EXPECT_TRUE(b->admin);
  EXPECT_EQ(r.config->find_key(""), nullptr);
}

TEST_F(ConfigTest, KeyEnvResolvedOrErrorNamesVariable) {
  const std::string yaml = std::string(kMinimal) +
                           "keys:\n"                              // 4
                           "  - name: prod\n"                     // 5
                           "    key_env: PROD_KEY\n";             // 6
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "keys[0].key_env");
  EXPECT_EQ(e.line, 6);
  EXPECT_THAT(e.message, HasSubstr("PROD_KEY"));
  EXPECT_THAT(e.message, HasSubstr("not set"));

  fake_env_vars()["PROD_KEY"] = "sk-prod-secret-12345678";
  r = load(yaml);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  ASSERT_NE(r.config->find_key("sk-prod-secret-12345678"), nullptr);
  EXPECT_EQ(r.config->find_key("sk-prod-secret-12345678")->name, "prod");
}

TEST_F(ConfigTest, KeySecretRules) {
  auto r = load(std::string(kMinimal) +
                "keys:\n"                                              // 4
                "  - {name: a}\n"                                      // 5 no secret
                "  - {name: b, key: sk-b-1111111111, key_env: X}\n"    // 6 both
                "  - {name: c, key: \"has space\"}\n"                  // 7 bad secret
                "  - {name: \"bad name\", key: sk-d-1111111111}\n"     // 8 bad name
                "  - {key: sk-e-1111111111}\n");                       // 9 no name
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "keys[0]").line, 5);
  EXPECT_THAT(error_at(r, "keys[1]").message, HasSubstr("only one of"));
  EXPECT_EQ(error_at(r, "keys[2].key").line, 7);
  EXPECT_THAT(error_at(r, "keys[2].key").message, Not(HasSubstr("has space")));
  EXPECT_EQ(error_at(r, "keys[3].name").line, 8);
  EXPECT_THAT(error_at(r, "keys[4]").message, HasSubstr("'name'"));
}

TEST_F(ConfigTest, DuplicateKeyNamesAndSecrets) {
  auto r = load(std::string(kMinimal) +
                "keys:\n"                                           // 4
                "  - {name: a, key: sk-same-000000000000}\n"        // 5
                "  - {name: a, key: sk-other-00000000000}\n"        // 6 dup name
                "  - {name: c, key: sk-same-000000000000}\n");      // 7 dup secret
  ASSERT_FALSE(r.ok());
  auto name = error_at(r, "keys[1].name");
  EXPECT_EQ(name.line, 6);
  EXPECT_THAT(name.message, HasSubstr("duplicate key name"));
  auto secret = error_at(r, "keys[2].key");
  EXPECT_EQ(secret.line, 7);
  EXPECT_THAT(secret.message, HasSubstr("duplicate secret"));
  EXPECT_THAT(secret.to_string(), Not(HasSubstr("sk-same-000000000000")));
  EXPECT_EQ(r.errors.size(), 2u) << all_errors(r);
}

TEST_F(ConfigTest, KeyNamingUnknownAlias) {
  auto r = load(std::string(kMinimal) +
                "keys:\n"                                   // 4
                "  - name: a\n"                             // 5
                "    key: sk-a-111111111111\n"              // 6
                "    models:\n"                             // 7
                "      - demo\n"                            // 8
                "      - ghost\n");                         // 9
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "keys[0].models[1]");
  EXPECT_EQ(e.line, 9);
  EXPECT_THAT(e.message, HasSubstr("unknown model alias 'ghost'"));
  EXPECT_EQ(r.errors.size(), 1u);
}

TEST_F(ConfigTest, KeysFileRelativeToBaseDir) {
  TempDir dir;
  dir.write("secrets/keys.yaml",
            "- {name: f1, key: sk-file-111111111111, tenant: t1}\n"
            "- {name: f2, key: sk-file-222222222222, models: [demo]}\n");
  const std::string main = dir.write("sluice.yaml", std::string(kMinimal) +
                                                        "keys_file: secrets/keys.yaml\n"
                                                        "keys:\n"
                                                        "  - {name: inline, key: sk-inline-1111111111}\n");
  auto r = load_file(main, fake_env);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->keys.size(), 3u);
  ASSERT_NE(r.config->find_key("sk-file-111111111111"), nullptr);
  EXPECT_EQ(r.config->find_key("sk-file-111111111111")->tenant, "t1");
  EXPECT_NE(r.config->find_key("sk-inline-1111111111"), nullptr);
}

TEST_F(ConfigTest, KeysFileErrors) {
  TempDir dir;
  dir.write("keys.yaml",
            "- {name: f1, key: sk-file-111111111111}\n"
            "- {name: f1, key: sk-file-222222222222, tenat: x}\n");
  auto r = load(std::string(kMinimal) + "keys_file: keys.yaml\n", dir.path());
  ASSERT_FALSE(r.ok());
  auto e = error_at(r, "keys_file[1].tenat");
  EXPECT_EQ(e.line, 2);
  EXPECT_THAT(e.message, HasSubstr("keys.yaml"));
  r = load(std::string(kMinimal) + "keys_file: missing.yaml\n", dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "keys_file").line, 4);
  EXPECT_THAT(error_at(r, "keys_file").message, HasSubstr("missing.yaml"));
}

// ---------------------------------------------------------------------------------------
// Environment overrides.

TEST_F(ConfigTest, PortOverridesOnlyThePort) {
  fake_env_vars()["PORT"] = "9999";
  auto r = load(std::string(kMinimal) + "listen: 0.0.0.0:8000\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "0.0.0.0");
  EXPECT_EQ(r.config->listen_port, 9999);
  EXPECT_THAT(r.config->instance, ::testing::EndsWith(":9999"));
}

TEST_F(ConfigTest, ListenHostAndPortEnv) {
  fake_env_vars()["SLUICE_LISTEN"] = "10.0.0.1:7000";
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "10.0.0.1");
  EXPECT_EQ(r.config->listen_port, 7000);

  fake_env_vars()["HOST"] = "0.0.0.0";
  fake_env_vars()["PORT"] = "7001";
  r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "0.0.0.0");
  EXPECT_EQ(r.config->listen_port, 7001);

  fake_env_vars().clear();
  fake_env_vars()["HOST"] = "::";
  r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "::");
  EXPECT_EQ(r.config->listen_port, 8080);
}

TEST_F(ConfigTest, AdminListenEnv) {
  fake_env_vars()["SLUICE_ADMIN_LISTEN"] = "127.0.0.1:9100";
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->admin_listen_host, "127.0.0.1");
  EXPECT_EQ(r.config->admin_listen_port, 9100);
  fake_env_vars()["SLUICE_ADMIN_LISTEN"] = "9100";
  r = load(kMinimal);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "env SLUICE_ADMIN_LISTEN").message, HasSubstr("host:port"));
}

TEST_F(ConfigTest, TrustedProxies) {
  auto r = load(std::string(kMinimal) + "trusted_proxies: ['10.0.0.0/8', '::1']\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  ASSERT_EQ(r.config->trusted_proxies.size(), 2u);
  EXPECT_EQ(r.config->trusted_proxies[0].bits, 8);
  EXPECT_EQ(r.config->trusted_proxies[1].bits, 128);
  r = load(std::string(kMinimal) + "trusted_proxies: '10.0.0.0/8'\n");
  EXPECT_THAT(error_at(r, "trusted_proxies").message, HasSubstr("expected a list of networks"));
  r = load(std::string(kMinimal) + "trusted_proxies: ['10.0.0.0/8', 'x/1']\n");
  EXPECT_THAT(error_at(r, "trusted_proxies[1]").message, HasSubstr("not an IP address"));
}

TEST_F(ConfigTest, ListenerTls) {
  TempDir dir;
  dir.write("tls/gw.crt", "cert");
  dir.write("tls/gw.key", "key");
  dir.write("tls/ca.crt", "ca");
  auto r = load(std::string(kMinimal) +
                    "tls:\n  cert_file: tls/gw.crt\n  key_file: tls/gw.key\n  client_ca_file: tls/ca.crt\n"
                    "  client_certs: optional\n  min_version: '1.3'\n  check_interval: 5s\n",
                dir.path());
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& t = r.config->tls;
  EXPECT_TRUE(t.enabled());
  EXPECT_EQ(std::filesystem::path(t.cert_file), std::filesystem::path(dir.path()) / "tls/gw.crt");
  EXPECT_EQ(std::filesystem::path(t.client_ca_file), std::filesystem::path(dir.path()) / "tls/ca.crt");
  EXPECT_EQ(t.client_certs, ClientCerts::optional);
  EXPECT_EQ(t.min_version, TlsMinVersion::v1_3);
  EXPECT_EQ(t.check_interval, std::chrono::seconds(5));
  // Off by default.
  r = load(kMinimal);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.config->tls.enabled());
  // Half a pair, client CAs without a certificate, a file that is not there, bad values.
  r = load(std::string(kMinimal) + "tls:\n  cert_file: tls/gw.crt\n", dir.path());
  EXPECT_THAT(error_at(r, "tls").message, HasSubstr("cert_file is set without key_file"));
  r = load(std::string(kMinimal) + "tls:\n  client_ca_file: tls/ca.crt\n", dir.path());
  EXPECT_THAT(error_at(r, "tls").message, HasSubstr("client_ca_file needs cert_file and key_file"));
  r = load(std::string(kMinimal) + "tls:\n  cert_file: tls/nope.crt\n  key_file: tls/gw.key\n", dir.path());
  EXPECT_THAT(error_at(r, "tls.cert_file").message, HasSubstr("file not found: "));
  r = load(std::string(kMinimal) + "tls:\n  cert_file: ''\n  key_file: tls/gw.key\n", dir.path());
  EXPECT_THAT(error_at(r, "tls.cert_file").message, HasSubstr("must not be empty"));
  r = load(std::string(kMinimal) + "tls:\n  cert_file: tls/gw.crt\n  key_file: tls/gw.key\n  min_version: '1.1'\n"
                                   "  client_certs: maybe\n  sni: x\n",
           dir.path());
  error_at(r, "tls.min_version");
  error_at(r, "tls.client_certs");
  EXPECT_THAT(all_errors(r), HasSubstr("sni"));
  // From the environment (relative to the working directory), checked as a whole.
  fake_env_vars()["SLUICE_TLS_CERT_FILE"] = dir.path() + "/tls/gw.crt";
  fake_env_vars()["SLUICE_TLS_KEY_FILE"] = dir.path() + "/tls/gw.key";
  r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->tls.key_file, dir.path() + "/tls/gw.key");
  fake_env_vars().erase("SLUICE_TLS_KEY_FILE");
  r = load(kMinimal);
  EXPECT_THAT(error_at(r, "env SLUICE_TLS_*").message, HasSubstr("cert_file is set without key_file"));
}

TEST_F(ConfigTest, RouteLoadOptions) {
  const std::string route = "models:\n  - alias: q\n    provider: ollama\n    base_url: http://127.0.0.1:11434\n    model: m\n";
  auto r = load(route + "    load_options: {policy: allow, values: {num_ctx: 4096, num_gpu: -1}, allowed: {num_ctx: [8192, 2048]}}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& lo = *r.config->routes[0].load_options;
  EXPECT_EQ(lo.policy, LoadPolicy::allow);
  EXPECT_EQ(lo.values.at("num_gpu"), -1);
  EXPECT_EQ(lo.allowed.at("num_ctx"), (std::vector<std::int64_t>{8192, 2048}));
  r = load(route + "    load_options: {policy: steer}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_FALSE(r.config->routes[0].load_options->values.size());
  r = load(route + "    load_options: {policy: pin, values: {num_thread: 4, num_ctx: 0, num_gpu: -2}, allowed: {num_ctx: [1]}}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].load_options.values.num_thread").message, HasSubstr("not a load option"));
  error_at(r, "models[0].load_options.values.num_ctx");
  error_at(r, "models[0].load_options.values.num_gpu");
  EXPECT_THAT(error_at(r, "models[0].load_options.allowed").message, HasSubstr("only with policy: allow"));
  r = load(route + "    load_options: {policy: sometimes}\n");
  error_at(r, "models[0].load_options.policy");
  r = load(route + "    load_options: {values: {num_ctx: 4096}}\n");
  EXPECT_THAT(error_at(r, "models[0].load_options").message, HasSubstr("missing required key 'policy'"));
  r = load(route + "    load_options: {policy: allow, values: {num_ctx: 100}, allowed: {num_batch: [9000]}}\n");
  EXPECT_THAT(error_at(r, "models[0].load_options.values.num_ctx").message, HasSubstr("outside options.num_ctx's range"));
  error_at(r, "models[0].load_options.allowed.num_batch[0]");
  r = load("models:\n  - alias: q\n    provider: simulated\n    load_options: {policy: pin}\n");
  EXPECT_THAT(error_at(r, "models[0].load_options").message, HasSubstr("applies to Ollama backends"));
  // The built-in options range takes num_gpu -1 (every layer).
  r = load(route);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->options.at("num_gpu").min, -1);
}

TEST_F(ConfigTest, BadEnvValuesNameTheVariable) {
  fake_env_vars()["SLUICE_WORKERS"] = "lots";
  fake_env_vars()["PORT"] = "65536";
  fake_env_vars()["SLUICE_LISTEN"] = "nohostport";
  auto r = load(kMinimal);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.config, nullptr);
  auto w = error_at(r, "env SLUICE_WORKERS");
  EXPECT_EQ(w.line, 0);
  EXPECT_THAT(w.message, HasSubstr("expected an integer"));
  EXPECT_EQ(w.to_string(), "env SLUICE_WORKERS: expected an integer, got 'lots'");
  EXPECT_THAT(error_at(r, "env PORT").message, HasSubstr("out of range"));
  error_at(r, "env SLUICE_LISTEN");
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST_F(ConfigTest, WorkersInstanceAccessLogEnv) {
  fake_env_vars()["SLUICE_WORKERS"] = "3";
  fake_env_vars()["SLUICE_INSTANCE"] = "gw-7";
  fake_env_vars()["SLUICE_ACCESS_LOG"] = "";
  auto r = load(std::string(kMinimal) + "workers: 1\ninstance: gw-1\naccess_log: /tmp/a.log\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->workers, 3);
  EXPECT_EQ(r.config->instance, "gw-7");
  EXPECT_EQ(r.config->access_log, "");
}

TEST_F(ConfigTest, ApiKeysFromEnv) {
  fake_env_vars()["SLUICE_API_KEYS"] = "ci:sk-ci-1234567890abcd, ops:sk-ops-abcdef123456";
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  ASSERT_EQ(r.config->keys.size(), 2u);
  const ApiKey* ci = r.config->find_key("sk-ci-1234567890abcd");
  ASSERT_NE(ci, nullptr);
  EXPECT_EQ(ci->name, "ci");
  EXPECT_EQ(ci->tenant, "default");
  EXPECT_EQ(ci->tier, "standard");
  EXPECT_EQ(ci->models, std::vector<std::string>{"*"});
  EXPECT_FALSE(ci->admin);
  ASSERT_NE(r.config->find_key("sk-ops-abcdef123456"), nullptr);
}

TEST_F(ConfigTest, ApiKeysEnvErrorsAndDuplicates) {
  fake_env_vars()["SLUICE_API_KEYS"] = "justasecret";
  auto r = load(kMinimal);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "env SLUICE_API_KEYS").message, HasSubstr("name:secret"));
  EXPECT_THAT(error_at(r, "env SLUICE_API_KEYS").message, Not(HasSubstr("justasecret")));

  // Same name as a YAML key -> duplicate name error.
  fake_env_vars()["SLUICE_API_KEYS"] = "demo:sk-env-1234567890ab";
  r = load(std::string(kMinimal) + "keys:\n  - {name: demo, key: sk-yaml-1234567890}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "env SLUICE_API_KEYS").message, HasSubstr("duplicate key name"));
}

TEST_F(ConfigTest, ModelApiKeyEnvOverride) {
  fake_env_vars()["SLUICE_MODEL_GPT_4O_MINI_API_KEY"] = "sk-override-1234567890";
  fake_env_vars()["OPENAI_API_KEY"] = "sk-openai-default-1234";
  auto r = load("models:\n"
                "  - alias: gpt-4o-mini\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "    api_key: sk-yaml-123456789012\n"
                "  - alias: other\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "  - alias: own\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "    api_key: sk-own-1234567890ab\n"
                "  - alias: local\n"
                "    provider: ollama\n"
                "    base_url: http://127.0.0.1:11434\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->find_route("gpt-4o-mini")->backends[0].api_key, "sk-override-1234567890");
  EXPECT_EQ(r.config->find_route("other")->backends[0].api_key, "sk-openai-default-1234");
  EXPECT_EQ(r.config->find_route("own")->backends[0].api_key, "sk-own-1234567890ab");
  EXPECT_EQ(r.config->find_route("local")->backends[0].api_key, "");  // OPENAI_API_KEY is openai-only
}

TEST_F(ConfigTest, AnthropicProviderTakesAnthropicApiKey) {
  fake_env_vars()["ANTHROPIC_API_KEY"] = "sk-ant-default-123456";
  fake_env_vars()["OPENAI_API_KEY"] = "sk-openai-default-1234";
  auto r = load("models:\n"
                "  - alias: claude\n"
                "    provider: anthropic\n"
                "    base_url: https://api.anthropic.com\n"
                "    model: claude-sonnet-4-5\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const auto& b = r.config->find_route("claude")->backends[0];
  EXPECT_EQ(b.provider, Provider::anthropic);
  EXPECT_EQ(b.api_key, "sk-ant-default-123456");
  EXPECT_EQ(b.path_prefix, "");
  EXPECT_EQ(to_string(b.provider), "anthropic");
  r = load("models:\n  - {alias: c, provider: anthropic}\n");
  EXPECT_THAT(error_at(r, "models[0]").message, HasSubstr("base_url"));
  r = load("models:\n  - {alias: c, provider: claude}\n");
  EXPECT_THAT(error_at(r, "models[0].provider").message, HasSubstr("simulated, openai, ollama or anthropic"));
}

// A secret pasted where a variable's name belongs never appears in an error (errors reach
// logs, and a refused reload's error is shown on /infra).
TEST_F(ConfigTest, ASecretInApiKeyEnvIsNotEchoed) {
  for (const std::string secret : {"sk-live-abcdef0123456789", "abcdef0123456789abcdef"}) {
    auto r = load("models:\n"
                  "  - alias: gpt\n"
                  "    provider: openai\n"
                  "    base_url: https://api.openai.com/v1\n"
                  "    api_key_env: " + secret + "\n"
                  "keys:\n"
                  "  - {name: app, key_env: " + secret + "}\n");
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(all_errors(r), Not(HasSubstr(secret)));
    EXPECT_THAT(error_at(r, "models[0].api_key_env").message, HasSubstr("not shown"));
  }
}

TEST_F(ConfigTest, ApiKeyEnvForProvider) {
  const std::string yaml =
      "models:\n"
      "  - alias: gpt\n"
      "    provider: openai\n"
      "    base_url: https://api.openai.com/v1\n"
      "    api_key_env: MY_OPENAI\n";
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].api_key_env").message, HasSubstr("MY_OPENAI"));
  fake_env_vars()["MY_OPENAI"] = "sk-my-1234567890abcd";
  r = load(yaml);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->routes[0].backends[0].api_key, "sk-my-1234567890abcd");
  // The per-route override wins even when api_key_env's variable is unset.
  fake_env_vars().clear();
  fake_env_vars()["SLUICE_MODEL_GPT_API_KEY"] = "sk-route-1234567890ab";
  r = load(yaml);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->routes[0].backends[0].api_key, "sk-route-1234567890ab");
}

TEST_F(ConfigTest, EmptyEnvValueCountsAsUnset) {
  fake_env_vars()["PORT"] = "";
  fake_env_vars()["SLUICE_WORKERS"] = "";
  auto r = load(kMinimal);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_port, 8080);
}

// ---------------------------------------------------------------------------------------
// describe() and small helpers.

TEST_F(ConfigTest, DescribeNeverShowsSecrets) {
  fake_env_vars()["SLUICE_API_KEYS"] = "ci:sk-ci-secretvalue-9876";
  auto r = load("listen: 127.0.0.1:8081\n"
                "models:\n"
                "  - alias: demo\n"
                "    provider: simulated\n"
                "  - alias: gpt\n"
                "    provider: openai\n"
                "    base_url: https://api.openai.com/v1\n"
                "    model: gpt-4o-mini\n"
                "    api_key: sk-proj-providersecret-4242\n"
                "keys:\n"
                "  - {name: app, key: sk-live-clientsecret-1a2b, tenant: acme, tier: gold}\n"
                "  - {name: tiny, key: abcdefghijklmnop}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const std::string d = describe(*r.config);
  EXPECT_THAT(d, HasSubstr("127.0.0.1:8081"));
  EXPECT_THAT(d, HasSubstr("  demo: retries 2\n    -> simulated"));
  EXPECT_THAT(d, HasSubstr("  gpt: retries 2\n    -> openai https://api.openai.com:443/v1 model gpt-4o-mini"));
  EXPECT_THAT(d, HasSubstr("name api.openai.com:443\n"));
  EXPECT_THAT(d, HasSubstr("app tenant=acme tier=gold"));
  EXPECT_THAT(d, HasSubstr("1a2b"));  // masked form keeps the tail
  for (const char* secret : {"sk-live-clientsecret-1a2b", "clientsecret", "sk-proj-providersecret-4242",
                             "providersecret", "sk-ci-secretvalue-9876", "secretvalue", "abcdefgh", "ijklmnop"}) {
    EXPECT_THAT(d, Not(HasSubstr(secret))) << secret;
  }
}

TEST(ConfigMisc, ProviderNames) {
  EXPECT_EQ(to_string(Provider::simulated), "simulated");
  EXPECT_EQ(to_string(Provider::openai), "openai");
  EXPECT_EQ(to_string(Provider::ollama), "ollama");
}

TEST(ConfigMisc, ErrorToString) {
  EXPECT_EQ((ConfigError{"workers", 3, "bad"}).to_string(), "line 3: workers: bad");
  EXPECT_EQ((ConfigError{"env PORT", 0, "bad"}).to_string(), "env PORT: bad");
  EXPECT_EQ((ConfigError{"", 7, "bad"}).to_string(), "line 7: bad");
}

TEST(ConfigMisc, LoadFileMissing) {
  auto r = load_file("/nonexistent/sluice.yaml", empty_env);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, HasSubstr("/nonexistent/sluice.yaml"));
}

TEST(ConfigMisc, ProcessEnvReadsTheEnvironment) {
  ::setenv("SLUICE_CONFIG_TEST_VAR", "v1", 1);
  EXPECT_EQ(process_env("SLUICE_CONFIG_TEST_VAR"), std::optional<std::string>("v1"));
  ::unsetenv("SLUICE_CONFIG_TEST_VAR");
  EXPECT_EQ(process_env("SLUICE_CONFIG_TEST_VAR"), std::nullopt);
}

TEST_F(ConfigTest, ErrorsSortedByLineThenEnvironment) {
  fake_env_vars()["SLUICE_WORKERS"] = "-5";
  auto r = load("models:\n"                 // 1
                "  - alias: a\n"            // 2
                "    provider: nope\n"      // 3
                "keys:\n"                   // 4
                "  - name: k\n"             // 5 (no secret)
                "    models: [ghost]\n"     // 6 (unknown alias, found in the last pass)
                "workers: x\n");            // 7
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 5u) << all_errors(r);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_EQ(r.errors[1].line, 5);
  EXPECT_EQ(r.errors[2].line, 6);
  EXPECT_EQ(r.errors[3].line, 7);
  EXPECT_EQ(r.errors[4].key, "env SLUICE_WORKERS");
}

TEST_F(ConfigTest, EmptyValueReportedAtItsKeysLine) {
  auto r = load(std::string(kMinimal) +   // 1-3
                "workers:\n"              // 4
                "\n"                      // 5
                "instance:\n");           // 6
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "workers").line, 4);
  EXPECT_THAT(error_at(r, "workers").message, HasSubstr("expected an integer"));
  EXPECT_EQ(error_at(r, "instance").line, 6);
}

TEST_F(ConfigTest, AllowParamsNamesOnlyBilledFields) {
  auto r = load("models:\n"
                "  - {alias: a, provider: simulated, allow_params: [service_tier, store]}\n"
                "  - {alias: b, provider: simulated}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->routes[0].allow_params, (std::vector<std::string>{"service_tier", "store"}));
  EXPECT_TRUE(r.config->routes[1].allow_params.empty());
  r = load("models:\n  - {alias: a, provider: simulated, allow_params: [temperature]}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "models[0].allow_params[0]").message, HasSubstr("expected service_tier, store, web_search_options, builtin_tools, file_ids or prompt"));
}
