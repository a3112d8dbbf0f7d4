// The key tables are the one declaration of each configuration key: the reference in
// docs/configuration.md must be what they generate, and every declared key must be read
// (a wrong value of it refused at its own path), so a key cannot be accepted and ignored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "config/reference.hpp"
#include "config_fixture.hpp"
#include "source_tree.hpp"

namespace sluice::config {
namespace {

using ::testing::HasSubstr;
using testing::ConfigFixture;

std::string read_doc() {
  std::ifstream in(sluice::test::source_path("docs/configuration.md"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ConfigReference, DocumentIsUpToDate) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
  std::string error;
  const std::string updated = update_reference(doc, error);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(updated == doc)
      << "docs/configuration.md's reference tables are out of date: run "
         "`build/sluice config-reference --write docs/configuration.md`";
}

TEST(ConfigReference, StaleDocumentIsNoticed) {
  const std::string doc = read_doc();
  std::string error;
  // A row removed (as if a key were added without regenerating): the update differs.
  const auto row = doc.find("| `connect` |");
  ASSERT_NE(row, std::string::npos);
  std::string stale = doc;
  stale.erase(row, doc.find('\n', row) + 1 - row);
  EXPECT_NE(update_reference(stale, error), stale);
  EXPECT_EQ(error, "");
  // A changed default is noticed as well.
  stale = doc;
  const auto five = stale.find("| `connect` | duration | `5s`");
  ASSERT_NE(five, std::string::npos);
  stale.replace(stale.find("`5s`", five), 4, "`6s`");
  EXPECT_NE(update_reference(stale, error), stale);
  // A block naming no table, and a table without a block, are errors.
  update_reference(doc + "<!-- BEGIN config-reference nothing -->\n<!-- END config-reference -->\n", error);
  EXPECT_THAT(error, HasSubstr("'nothing'"));
  update_reference("no blocks at all\n", error);
  EXPECT_THAT(error, HasSubstr("no block for table 'top level'"));
}

TEST(ConfigReference, EveryTableHasRowsWithDocumentation) {
  ASSERT_FALSE(reference_tables().empty());
  for (const auto& t : reference_tables()) {
    EXPECT_FALSE(t.keys.empty()) << t.name;
    if (t.variables) continue;  // variable and meaning only
    for (const auto& k : t.keys) {
      EXPECT_FALSE(k.type.empty()) << t.name << "." << k.key;
      EXPECT_FALSE(k.default_value.empty()) << t.name << "." << k.key;
    }
  }
}

// Where each table's map sits in a file that is otherwise valid: `@` is replaced by the
// map (in flow style), `path` is its key path in errors, `base` the keys it needs.
struct Host {
  std::string yaml;
  std::string path;
  std::vector<std::pair<std::string, std::string>> base;
};

const std::string kRoute = "models: [{alias: demo, provider: simulated}]";

std::map<std::string, Host> hosts() {
  const std::string route = kRoute;
  return {
      {"top level", {"@", "", {{"models", "[{alias: demo, provider: simulated}]"}}}},
      {"limits", {"{limits: @, " + route.substr(0) + "}", "limits", {}}},
      {"timeouts", {"{timeouts: @, " + route + "}", "timeouts", {}}},
      {"tls", {"{tls: @, " + route + "}", "tls", {}}},
      {"models[].load_options",
       {"{models: [{alias: demo, provider: ollama, base_url: 'http://127.0.0.1:1', model: m, load_options: @}]}",
        "models[0].load_options",
        {{"policy", "pin"}}}},
      {"cors", {"{cors: @, " + route + "}", "cors", {}}},
      {"responses", {"{responses: @, " + route + "}", "responses", {}}},
      {"admin", {"{admin: @, " + route + "}", "admin", {}}},
      {"keys[]", {"{keys: [@], " + route + "}", "keys[0]", {{"name", "a"}, {"key", "sk-test-0123456789abcdef"}}}},
      {"key_store", {"{key_store: @, " + route + "}", "key_store", {}}},
      {"models[]", {"{models: [@]}", "models[0]", {{"alias", "demo"}, {"provider", "simulated"}}}},
      {"models[].backends[]", {"{models: [{alias: demo, backends: [@]}]}", "models[0].backends[0]", {{"provider", "simulated"}}}},
      {"models[].sim", {"{models: [{alias: demo, provider: simulated, sim: @}]}", "models[0].sim", {}}},
      {"models[].canary",
       {"{models: [{alias: demo, provider: simulated, canary: @}, {alias: b, provider: simulated}]}",
        "models[0].canary",
        {{"alias", "b"}, {"weight", "10"}}}},
      {"routing", {"{routing: @, " + route + "}", "routing", {}}},
      {"routing.health", {"{routing: {health: @}, " + route + "}", "routing.health", {}}},
      {"routing.breaker", {"{routing: {breaker: @}, " + route + "}", "routing.breaker", {}}},
      {"params.<name>", {"{params: {temperature: @}, " + route + "}", "params.temperature", {}}},
      {"redis", {"{redis: @, " + route + "}", "redis", {}}},
      {"rate_limits", {"{rate_limits: @, " + route + "}", "rate_limits", {}}},
      {"rate_limits.requests[]",
       {"{rate_limits: {requests: [@]}, " + route + "}", "rate_limits.requests[0]", {{"scope", "key"}, {"limit", "10"}}}},
      {"rate_limits.tokens[]",
       {"{rate_limits: {tokens: [@]}, " + route + "}",
        "rate_limits.tokens[0]",
        {{"scope", "key"}, {"limit", "10"}, {"per", "day"}}}},
      {"concurrency", {"{concurrency: @, " + route + "}", "concurrency", {}}},
      {"concurrency.max_wait", {"{concurrency: {max_wait: @}, " + route + "}", "concurrency.max_wait", {}}},
      {"history", {"{history: @, " + route + "}", "history", {}}},
      {"events", {"{events: @, " + route + "}", "events", {}}},
      {"cache", {"{cache: @, " + route + "}", "cache", {}}},
      {"models[].cache", {"{models: [{alias: demo, provider: simulated, cache: @}]}", "models[0].cache", {}}},
      {"models[].backends[].adaptive",
       {"{models: [{alias: demo, provider: simulated, backend_max_in_flight: 4, adaptive: @}]}", "models[0].adaptive",
        {{"target_ttft", "1s"}}}},
      {"models[].backends[].load",
       {"{models: [{alias: demo, provider: openai, base_url: 'http://127.0.0.1:1', load: @}]}", "models[0].load", {{"source", "vllm"}}}},
      {"models[].embedding_batch",
       {"{models: [{alias: demo, provider: simulated, embedding_batch: @}]}", "models[0].embedding_batch", {}}},
      {"models[].price", {"{models: [{alias: demo, provider: simulated, price: @}]}", "models[0].price", {}}},
      {"models[].overload",
       {"{models: [{alias: demo, provider: simulated, canned_reply: busy, overload: @}]}", "models[0].overload",
        {{"canned", "true"}}}},
      {"models[].cache.semantic",
       {"{models: [{alias: demo, provider: simulated, cache: {semantic: @}}]}", "models[0].cache.semantic", {}}},
      {"guardrails[]", {"{guardrails: [@], " + route + "}", "guardrails[0]", {{"name", "g"}}}},
  };
}

class EveryKey : public ConfigFixture {};

TEST_F(EveryKey, HostsAreValidAndEveryDeclaredKeyIsRead) {
  const auto all = hosts();
  for (const auto& t : reference_tables()) {
    if (t.variables) continue;  // EveryVariable below
    auto h = all.find(t.name);
    ASSERT_NE(h, all.end()) << "no host for table '" << t.name << "': add one to hosts()";
    auto render = [&](const std::string& key, const std::string& value) {
      std::string map = "{";
      bool first = true;
      for (const auto& [k, v] : h->second.base) {
        if (k == key || (key == "key_env" && k == "key")) continue;  // one secret only
        map += (first ? "" : ", ") + k + ": " + v;
        first = false;
      }
      if (!key.empty()) map += (first ? "" : ", ") + key + ": " + value;
      map += "}";
      std::string yaml = h->second.yaml;
      yaml.replace(yaml.find('@'), 1, map);
      return yaml;
    };
    // The host alone loads.
    auto ok = load(render("", ""));
    ASSERT_TRUE(ok.ok()) << t.name << ": " << render("", "") << "\n" << all_errors(ok);
    for (const auto& k : t.keys) {
      const std::string yaml = render(k.key, "{zz_not_a_value: 1}");
      auto r = load(yaml);
      const std::string path = h->second.path.empty() ? k.key : h->second.path + "." + k.key;
      bool found = false;
      for (const auto& e : r.errors) {
        if (e.key == path || e.key.rfind(path + ".", 0) == 0 || e.key.rfind(path + "[", 0) == 0) found = true;
      }
      EXPECT_TRUE(found) << "a wrong value of " << path << " is not refused: is the key read?\n"
                         << yaml << "\n" << all_errors(r);
    }
  }
}

// Every environment override of the generated table is applied: a wrong value is refused
// at "env VAR", or, where any string is a valid value, the value lands in the config. A
// variable declared on a row but never applied (apply_env not called for its table) fails.
TEST_F(EveryKey, EveryVariableIsApplied) {
  const std::string yaml = "models:\n  - alias: m\n    provider: simulated\n";
  ASSERT_TRUE(load(yaml).ok());
  // Read by code and tested with it (config_test.cpp, hardening_test.cpp, models' tests).
  const std::set<std::string> by_code{"HOST", "PORT", "SLUICE_API_KEYS", "SLUICE_MODEL_<ALIAS>_API_KEY",
                                      "OPENAI_API_KEY", "ANTHROPIC_API_KEY"};
  const TableDoc* env = nullptr;
  for (const auto& t : reference_tables()) {
    if (t.variables) env = &t;
  }
  ASSERT_NE(env, nullptr);
  std::size_t checked = 0;
  for (const auto& k : env->keys) {
    if (by_code.count(k.key)) continue;
    testing::fake_env_vars().clear();
    const std::string any = "/tmp/sluice-env-check \x01";
    testing::fake_env_vars()[k.key] = any;
    auto r = load(yaml);
    bool refused = false;
    for (const auto& e : r.errors) refused = refused || e.key == "env " + k.key;
    if (!refused) {
      ASSERT_TRUE(r.ok()) << k.key << ": " << all_errors(r);
      const auto& c = *r.config;
      const std::string landed = k.key == "SLUICE_ACCESS_LOG"      ? c.access_log
                                 : k.key == "SLUICE_DATA_DIR"      ? c.data_dir
                                 : k.key == "SLUICE_KAFKA_BROKERS" ? c.events.brokers
                                                                   : std::string("(no check for this variable)");
      EXPECT_EQ(landed, any) << k.key << " is neither refused nor applied";
    }
    ++checked;
  }
  EXPECT_GE(checked, 11u);
}

}  // namespace
}  // namespace sluice::config
