// The key tables are the one declaration of each configuration key: the reference in
// docs/configuration.md must be what they generate, and every declared key must be read
// (a wrong value of it refused at its own path), so a key cannot be accepted and ignored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
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
      {"admin", {"{admin: @, " + route + "}", "admin", {}}},
      {"keys[]", {"{keys: [@], " + route + "}", "keys[0]", {{"name", "a"}, {"key", "sk-test-0123456789abcdef"}}}},
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
  };
}

class EveryKey : public ConfigFixture {};

TEST_F(EveryKey, HostsAreValidAndEveryDeclaredKeyIsRead) {
  const auto all = hosts();
  for (const auto& t : reference_tables()) {
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

}  // namespace
}  // namespace sluice::config
