// Config checks that keep `check-config` and `serve` in agreement, and the loader fast on
// hostile files: listen hosts, key secret length, the connection keys, many empty values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config/config.hpp"
#include "config_fixture.hpp"

using namespace sluice::config;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using HardeningTest = sluice::config::testing::ConfigFixture;
using sluice::config::testing::fake_env_vars;

const char* kRoute =
    "models:\n"
    "  - alias: demo\n"
    "    provider: simulated\n";

// ---- listen hosts -------------------------------------------------------------------------

TEST_F(HardeningTest, ListenHostMustBeAnAddressLiteral) {
  for (const char* bad : {"example.com:8080", "999.1.1.1:80", "1.2.3:80", "my-host:80", "[example]:80", "[::g]:80"}) {
    auto r = load(std::string("listen: \"") + bad + "\"\n" + kRoute);
    ASSERT_FALSE(r.ok()) << bad;
    const auto e = error_at(r, "listen");
    EXPECT_EQ(e.line, 1) << bad;
    EXPECT_THAT(e.message, HasSubstr("must be an IP address")) << bad;
  }
}

TEST_F(HardeningTest, ListenAcceptsAddressesAndLocalhost) {
  struct Case {
    const char* listen;
    const char* host;
  };
  for (auto [listen, host] : {Case{"127.0.0.1:80", "127.0.0.1"}, Case{"0.0.0.0:8080", "0.0.0.0"},
                              Case{"[::1]:8080", "::1"}, Case{"[::]:0", "::"}, Case{"localhost:8080", "127.0.0.1"}}) {
    auto r = load(std::string("listen: \"") + listen + "\"\n" + kRoute);
    ASSERT_TRUE(r.ok()) << listen << "\n" << all_errors(r);
    EXPECT_EQ(r.config->listen_host, host);
  }
}

TEST_F(HardeningTest, ListenHostFromTheEnvironmentIsCheckedToo) {
  fake_env_vars()["SLUICE_LISTEN"] = "example.com:9000";
  auto r = load(kRoute);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "env SLUICE_LISTEN").message, HasSubstr("must be an IP address"));

  fake_env_vars().clear();
  fake_env_vars()["HOST"] = "example.com";
  r = load(kRoute);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "env HOST").message, HasSubstr("must be an IP address"));

  fake_env_vars()["HOST"] = "localhost";
  r = load(kRoute);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->listen_host, "127.0.0.1");
}

// ---- key secrets ------------------------------------------------------------------------------

TEST_F(HardeningTest, ShortKeySecretIsRefusedNamingTheKey) {
  auto r = load(std::string(kRoute) +
                "keys:\n"
                "  - {name: ok-app, key: sk-0123456789abcdef}\n"
                "  - name: tiny-app\n"
                "    key: x\n");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u) << all_errors(r);
  const auto e = error_at(r, "keys[1].key");
  EXPECT_EQ(e.line, 7);
  EXPECT_THAT(e.message, HasSubstr("'tiny-app'"));
  EXPECT_THAT(e.message, HasSubstr("at least 16"));
  EXPECT_THAT(e.to_string(), Not(HasSubstr(": x")));
}

TEST_F(HardeningTest, SixteenCharactersAreEnough) {
  auto r = load(std::string(kRoute) + "keys:\n  - {name: app, key: '0123456789abcdef'}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  r = load(std::string(kRoute) + "keys:\n  - {name: app, key: '0123456789abcde'}\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "keys[0].key").message, Not(HasSubstr("0123456789abcde")));
}

TEST_F(HardeningTest, ShortKeySecretFromEnvironmentNeverShowsTheSecret) {
  fake_env_vars()["APP_KEY"] = "sk-short";
  fake_env_vars()["SLUICE_API_KEYS"] = "ci:abc123";
  auto r = load(std::string(kRoute) + "keys:\n  - {name: env-app, key_env: APP_KEY}\n");
  ASSERT_FALSE(r.ok());
  const auto a = error_at(r, "keys[0].key_env");
  EXPECT_THAT(a.message, HasSubstr("'env-app'"));
  EXPECT_THAT(a.message, HasSubstr("too short"));
  EXPECT_THAT(a.message, Not(HasSubstr("sk-short")));
  const auto b = error_at(r, "env SLUICE_API_KEYS");
  EXPECT_THAT(b.message, HasSubstr("'ci'"));
  EXPECT_THAT(b.message, HasSubstr("too short"));
  EXPECT_THAT(b.message, Not(HasSubstr("abc123")));
}

TEST_F(HardeningTest, ProviderCredentialsHaveNoMinimum) {
  auto r = load(
      "models:\n"
      "  - alias: up\n"
      "    provider: openai\n"
      "    base_url: http://127.0.0.1:9/v1\n"
      "    api_key: x\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
}

// ---- connection keys ----------------------------------------------------------------------

TEST_F(HardeningTest, ConnectionCapAndFirstByteTimeout) {
  auto r = load(kRoute);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->max_connections, 0u);  // auto
  EXPECT_EQ(r.config->timeouts.client_first_byte, Millis(10000));
  EXPECT_THAT(describe(*r.config), HasSubstr("connections auto"));

  r = load(std::string(kRoute) + "limits: {max_connections: 20}\ntimeouts: {client_first_byte: 2s}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->max_connections, 20u);
  EXPECT_EQ(r.config->timeouts.client_first_byte, Millis(2000));
  EXPECT_THAT(describe(*r.config), HasSubstr("client_first_byte 2s"));

  r = load(std::string(kRoute) + "limits:\n  max_connections: -1\ntimeouts:\n  client_first_byte: 0s\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_at(r, "limits.max_connections").line, 5);
  EXPECT_EQ(error_at(r, "timeouts.client_first_byte").line, 7);
}

// ---- many empty values ------------------------------------------------------------------
// Each empty value used to be looked up in a list of all the empty values seen so far
// (the line of its key): quadratic in their number. These documents load in linear time;
// the results say every value was seen and reported at its own line.

TEST_F(HardeningTest, ManyEmptyValuesInAMapAreEachReportedAtTheirLine) {
  constexpr int kN = 20000;
  std::string yaml = std::string(kRoute) + "params:\n";
  for (int i = 0; i < kN; ++i) yaml += "  k" + std::to_string(i) + ":\n";
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), static_cast<std::size_t>(kN));
  for (int i = 0; i < kN; i += 997) {
    EXPECT_EQ(r.errors[i].key, "params.k" + std::to_string(i));
    EXPECT_EQ(r.errors[i].line, 5 + i);
  }
  EXPECT_EQ(r.errors.back().line, 4 + kN);
}

TEST_F(HardeningTest, ManyEmptyTopLevelKeysAndListItems) {
  constexpr int kN = 20000;
  std::string yaml = std::string(kRoute) + "keys:\n";
  for (int i = 0; i < kN; ++i) yaml += "  -\n";
  for (int i = 0; i < kN; ++i) yaml += "k" + std::to_string(i) + ":\n";
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), static_cast<std::size_t>(2 * kN)) << r.errors[0].to_string();
  std::size_t items = 0, unknown = 0;
  for (const auto& e : r.errors) {
    if (e.key.rfind("keys[", 0) == 0) ++items;
    if (e.key.rfind("k", 0) == 0 && e.message.find("unknown key") != std::string::npos) ++unknown;
  }
  EXPECT_EQ(items, static_cast<std::size_t>(kN));
  EXPECT_EQ(unknown, static_cast<std::size_t>(kN));
  EXPECT_EQ(error_at(r, "k0").line, 5 + kN);
  EXPECT_EQ(error_at(r, "k" + std::to_string(kN - 1)).line, 4 + 2 * kN);
}

TEST_F(HardeningTest, ManyKeysWithEmptyFieldsAreReportedAtTheirFieldsLines) {
  constexpr int kN = 10000;
  std::string yaml = std::string(kRoute) + "keys:\n";
  for (int i = 0; i < kN; ++i) yaml += "  - name:\n    key:\n";
  auto r = load(yaml);
  ASSERT_FALSE(r.ok());
  // Per key: its name is not a string, and its secret is not a string.
  ASSERT_EQ(r.errors.size(), static_cast<std::size_t>(2 * kN)) << r.errors[0].to_string();
  for (int i = 0; i < kN; i += 499) {
    EXPECT_EQ(error_at(r, "keys[" + std::to_string(i) + "].name").line, 5 + 2 * i);
    EXPECT_EQ(error_at(r, "keys[" + std::to_string(i) + "].key").line, 6 + 2 * i);
  }
}

}  // namespace
