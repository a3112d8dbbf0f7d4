// Recording settings of the configuration (config/records.hpp): data_dir, history, events.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "config_fixture.hpp"

using namespace sluice::config;
using ::testing::HasSubstr;

namespace {

const std::string kBase =
    "models:\n"
    "  - alias: demo\n"
    "    provider: simulated\n";

class RecordsConfigTest : public sluice::config::testing::ConfigFixture {};

}  // namespace

TEST_F(RecordsConfigTest, Defaults) {
  auto r = load(kBase);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  const Config& c = *r.config;
  EXPECT_EQ(c.data_dir, "data");
  EXPECT_EQ(c.history.backend, HistoryBackend::sqlite);
  EXPECT_EQ(c.history.sqlite_path, "data/history.db");
  EXPECT_EQ(c.history.batch_rows, 1000u);
  EXPECT_EQ(c.history.flush_interval, Millis(1000));
  EXPECT_EQ(c.history.queue_size, 50000u);
  EXPECT_FALSE(c.events.enabled);
  EXPECT_EQ(c.events.topic, "sluice.requests");
  EXPECT_EQ(c.events.fallback_file, "data/events-fallback.jsonl");
}

TEST_F(RecordsConfigTest, PathsAreRelativeToTheConfigFile) {
  auto r = load(kBase + "data_dir: var\nhistory: {path: db/h.db}\nevents: {brokers: 'k1:9092,k2:9092', fallback_file: ev.jsonl}\n",
                "/etc/sluice");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->data_dir, "/etc/sluice/var");
  EXPECT_EQ(r.config->history.sqlite_path, "/etc/sluice/db/h.db");
  EXPECT_EQ(r.config->events.fallback_file, "/etc/sluice/ev.jsonl");
  EXPECT_TRUE(r.config->events.enabled);
  EXPECT_EQ(r.config->events.brokers, "k1:9092,k2:9092");
}

TEST_F(RecordsConfigTest, AUrlSelectsPostgres) {
  auto r = load(kBase + "history:\n  url: postgresql://gw:secret@db:5432/sluice\n  batch_rows: 50\n  flush_interval: 250ms\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->history.backend, HistoryBackend::postgres);
  EXPECT_EQ(r.config->history.batch_rows, 50u);
  EXPECT_EQ(r.config->history.flush_interval, Millis(250));
  // An explicit backend wins over the URL.
  r = load(kBase + "history: {backend: none, url: 'postgres://db/sluice'}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->history.backend, HistoryBackend::none);
}

TEST_F(RecordsConfigTest, BadValuesAreRefusedWithTheirKey) {
  auto r = load(kBase + "history:\n  backend: mongo\n  url: mysql://db\n  batch_rows: 0\n" +
                "events:\n  topic: 'bad topic'\n  brokers: k:9092\n  linger: 50ms\n  delivery_timeout: 10ms\n" + "data_dir: ''\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(error_at(r, "history.backend").message, HasSubstr("sqlite, postgres or none"));
  EXPECT_THAT(error_at(r, "history.url").message, HasSubstr("postgres://"));
  EXPECT_EQ(error_at(r, "history.batch_rows").line, 7);
  EXPECT_THAT(error_at(r, "events.topic").message, HasSubstr("[a-zA-Z0-9._-]"));
  EXPECT_THAT(error_at(r, "events.delivery_timeout").message, HasSubstr("longer than events.linger"));
  EXPECT_THAT(error_at(r, "data_dir").message, HasSubstr("must not be empty"));
  r = load(kBase + "history: {backend: postgres}\n");
  EXPECT_THAT(error_at(r, "history.url").message, HasSubstr("needs a URL"));
  r = load(kBase + "history: {shard: 3}\n");
  EXPECT_FALSE(r.ok());
}

TEST_F(RecordsConfigTest, EventCompressionIsOffUnlessChosen) {
  auto r = load(kBase + "events: {brokers: 'k:9092'}\n");
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->events.compression, "none");
  for (const char* c : {"lz4", "zstd", "gzip", "snappy", "none"}) {
    r = load(kBase + "events: {brokers: 'k:9092', compression: " + c + "}\n");
    ASSERT_TRUE(r.ok()) << c << ": " << all_errors(r);
    EXPECT_EQ(r.config->events.compression, c);
  }
  r = load(kBase + "events: {brokers: 'k:9092', compression: brotli}\n");
  EXPECT_THAT(error_at(r, "events.compression").message, HasSubstr("none, lz4, snappy, gzip or zstd"));
}

TEST_F(RecordsConfigTest, EnvironmentOverrides) {
  auto& env = sluice::config::testing::fake_env_vars();
  env["SLUICE_DATABASE_URL"] = "postgres://gw@db/sluice";
  env["SLUICE_KAFKA_BROKERS"] = "127.0.0.1:9092";
  env["SLUICE_KAFKA_TOPIC"] = "llm.events";
  env["SLUICE_DATA_DIR"] = "/var/lib/sluice";
  auto r = load(kBase);
  ASSERT_TRUE(r.ok()) << all_errors(r);
  EXPECT_EQ(r.config->history.backend, HistoryBackend::postgres);
  EXPECT_EQ(r.config->history.url, "postgres://gw@db/sluice");
  EXPECT_TRUE(r.config->events.enabled);
  EXPECT_EQ(r.config->events.topic, "llm.events");
  EXPECT_EQ(r.config->events.fallback_file, "/var/lib/sluice/events-fallback.jsonl");
  env.clear();
  env["SLUICE_DATABASE_URL"] = "mysql://db";
  env["SLUICE_HISTORY_BACKEND"] = "oracle";
  r = load(kBase);
  EXPECT_THAT(error_at(r, "env SLUICE_DATABASE_URL").message, HasSubstr("postgres://"));
  EXPECT_THAT(error_at(r, "env SLUICE_HISTORY_BACKEND").message, HasSubstr("sqlite, postgres or none"));
}

TEST_F(RecordsConfigTest, TheKeyStoreNeedsTheDatabaseAndALongSecret) {
  auto off = load(kBase);
  ASSERT_TRUE(off.ok()) << all_errors(off);
  EXPECT_FALSE(off.config->key_store.enabled);
  EXPECT_EQ(off.config->key_store.poll, Millis(1000));

  auto on = load(kBase + "key_store: {enabled: true, secret: 0123456789abcdef, poll: 250ms}\n");
  ASSERT_TRUE(on.ok()) << all_errors(on);
  EXPECT_TRUE(on.config->key_store.enabled);
  EXPECT_EQ(on.config->key_store.secret, "0123456789abcdef");
  EXPECT_EQ(on.config->key_store.poll, Millis(250));

  auto short_secret = load(kBase + "key_store: {enabled: true, secret: short}\n");
  ASSERT_FALSE(short_secret.ok());
  EXPECT_THAT(error_at(short_secret, "key_store.secret").message, HasSubstr("at least 16"));
  EXPECT_THAT(all_errors(short_secret), ::testing::Not(HasSubstr("short ")));

  auto no_db = load(kBase + "history: {backend: none}\nkey_store: {enabled: true, secret: 0123456789abcdef}\n");
  ASSERT_FALSE(no_db.ok());
  EXPECT_THAT(error_at(no_db, "key_store.enabled").message, HasSubstr("history"));

  auto fast = load(kBase + "key_store: {poll: 10ms}\n");
  ASSERT_FALSE(fast.ok());
  error_at(fast, "key_store.poll");

  sluice::config::testing::fake_env_vars()["SLUICE_KEY_STORE_SECRET"] = "from-the-environment-0";
  auto env = load(kBase + "key_store: {enabled: true}\n");
  ASSERT_TRUE(env.ok()) << all_errors(env);
  EXPECT_EQ(env.config->key_store.secret, "from-the-environment-0");
}
