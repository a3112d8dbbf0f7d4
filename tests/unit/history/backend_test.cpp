// The same checks against both databases: a SQLite file in a temp dir, and a PostgreSQL
// server each test starts for itself. Rows are counted with an independent client (the
// sqlite3 C API, psql), not only through the code under test.
#include <boost/json.hpp>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "helpers.hpp"
#include "history/db.hpp"
#include "history/audit_table.hpp"
#include "history/control_table.hpp"
#include "history/responses.hpp"
#include "pg_server.hpp"

namespace sluice::history {
namespace {

using namespace std::chrono_literals;
using test::list_json;
using test::record;
using test::stats_json;
using test::wait_until;
namespace json = boost::json;

enum class Db { sqlite, postgres };
void PrintTo(Db db, std::ostream* os) { *os << (db == Db::sqlite ? "sqlite" : "postgres"); }

class HistoryTest : public ::testing::TestWithParam<Db> {
 protected:
  void SetUp() override {
    settings_.flush_interval = 20ms;
    settings_.retry_interval = 100ms;
    if (GetParam() == Db::sqlite) {
      settings_.backend = config::HistoryBackend::sqlite;
      settings_.sqlite_path = dir_.path() + "/not/yet/there/history.db";  // parents are created
    } else {
      pg_ = std::make_unique<test::PgServer>();
      const auto error = pg_->start();
      ASSERT_EQ(error, "");
      ASSERT_EQ(pg_->create_database("history"), "");
      settings_.backend = config::HistoryBackend::postgres;
      settings_.url = pg_->url("history");
    }
  }

  std::unique_ptr<History> make() {
    std::string error;
    auto h = History::create(settings_, &error);
    EXPECT_TRUE(h) << error;
    EXPECT_EQ(error, "");
    return h;
  }

  // SELECT count(*) ... through a client of its own; -1 on failure.
  std::int64_t raw_count(const std::string& sql) {
    if (GetParam() == Db::postgres) {
      auto out = pg_->psql("history", sql);
      EXPECT_TRUE(out) << sql << ": " << pg_->last_error();
      return out ? std::stoll(*out) : -1;
    }
    sqlite3* db = nullptr;
    sqlite3_stmt* stmt = nullptr;
    std::int64_t n = -1;
    // A reader can meet the writer's lock (a WAL checkpoint, the retention's batches): wait
    // for it as the gateway's own connections do, instead of reading "database is locked".
    if (sqlite3_open_v2(settings_.sqlite_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
        sqlite3_busy_timeout(db, 5000) == SQLITE_OK && sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
      n = sqlite3_column_int64(stmt, 0);
    }
    EXPECT_GE(n, 0) << sql << ": " << sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    sqlite3_close_v2(db);
    return n;
  }

  // One statement through a client of its own (psql, the sqlite3 C API).
  void raw_exec(const std::string& sql) {
    if (GetParam() == Db::postgres) {
      EXPECT_TRUE(pg_->psql("history", sql)) << sql << ": " << pg_->last_error();
      return;
    }
    sqlite3* db = nullptr;
    char* msg = nullptr;
    ASSERT_EQ(sqlite3_open_v2(settings_.sqlite_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << sql << ": " << (msg ? msg : "");
    sqlite3_free(msg);
    sqlite3_close_v2(db);
  }

  // A trigger that makes every insert into requests fail: with a constraint violation
  // (the rows' fault) or with an error that says nothing against them (PostgreSQL: disk
  // full; SQLite: an error raised while running the statement).
  void refuse_inserts(bool for_content) {
    if (GetParam() == Db::postgres) {
      raw_exec(std::string("CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ") +
               "RAISE EXCEPTION 'refused by the test' USING ERRCODE = '" +
               (for_content ? "check_violation" : "disk_full") + "'; END $$");
      raw_exec("CREATE TRIGGER refuse BEFORE INSERT ON requests FOR EACH ROW EXECUTE FUNCTION refuse()");
    } else {
      raw_exec(std::string("CREATE TRIGGER refuse BEFORE INSERT ON requests BEGIN ") +
               (for_content ? "SELECT RAISE(ABORT, 'refused by the test')" : "SELECT json('{')") + "; END");
    }
  }
  void accept_inserts() {
    raw_exec(GetParam() == Db::postgres ? "DROP TRIGGER refuse ON requests" : "DROP TRIGGER refuse");
  }

  // The database as a sluice of schema version 1 left it: only migration 1 applied, and
  // one row per given time written.
  void make_version_1(std::initializer_list<std::int64_t> times) {
    std::string error;
    std::unique_ptr<Connection> c;
    if (GetParam() == Db::postgres) {
      c = open_postgres(settings_.url, 2s, 10s, error);
    } else {
      std::filesystem::create_directories(std::filesystem::path(settings_.sqlite_path).parent_path());
      c = open_sqlite(settings_.sqlite_path, false, error);
    }
    ASSERT_TRUE(c) << error;
    int version = 0;
    ASSERT_EQ(migrate(*c, version, 1), "");
    ASSERT_EQ(version, 1);
    // In the columns of version 1 (this build's rows have more).
    for (std::int64_t t : times) {
      const std::string ts = std::to_string(t);
      ASSERT_EQ(c->exec("INSERT INTO requests (unix_ms, request_id, method, path, key_name, model, status, reason, "
                        "stream, client_cancelled, wall_ms) VALUES (" + ts + ", 'v1-" + ts +
                        "', 'POST', '/v1/chat/completions', 'k', 'm-old', 200, 'ok', false, false, 2)"),
                "");
    }
  }

  test::TempDir dir_;
  std::unique_ptr<test::PgServer> pg_;
  config::HistorySettings settings_;
};

TEST_P(HistoryTest, RowsLandAfterFlushWithEveryField) {
  auto h = make();
  ASSERT_TRUE(h);
  auto full = record(1'764'446'400'123, "llama3", "team-a", 429, 12.5, 3.25);
  full.path = "/v1/chat/completions?q=\xff\xfe";  // not UTF-8: stored with U+FFFD instead
  full.reason = Reason::rate_limited;
  full.error = "too many requests";
  full.stream = true;
  full.tokens_per_s = 41.5;
  full.prompt_tokens = 12;
  full.completion_tokens = 34;
  full.limiter = "redis";
  full.priority = "high";
  full.queue_ms = 1.5;
  full.reserved_tokens = 512;
  full.temperature = 0.7;
  full.max_tokens = 256;
  full.num_ctx = 8192;
  full.num_gpu = 1;
  full.num_batch = 64;
  full.upstream_status = 200;
  h->consume(full);
  telemetry::RequestRecord bare;  // everything optional left unset
  bare.unix_ms = 1'764'446'400'124;
  bare.request_id = "bare";
  bare.method = "GET";
  bare.path = "/v1/models";
  bare.status = 401;
  bare.reason = Reason::missing_key;
  h->consume(bare);

  ASSERT_TRUE(h->flush(20s));
  const auto st = h->status();
  EXPECT_TRUE(st.up) << st.last_error;
  EXPECT_EQ(st.written, 2u);
  EXPECT_EQ(st.queued, 0u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_EQ(st.schema_version, kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 2);

  const auto body = list_json(*h, "");
  ASSERT_TRUE(body.is_object());
  const auto& data = body.at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  const auto& b = data[0].as_object();  // newest id first
  EXPECT_EQ(b.at("request_id"), "bare");
  EXPECT_EQ(b.at("reason"), "missing_api_key");
  for (const char* null_field : {"key_name", "tenant", "model", "error", "upstream_status", "ttft_ms", "tokens_per_s",
                                 "prompt_tokens", "limiter", "queue_ms", "temperature", "top_p", "max_tokens", "num_ctx"}) {
    EXPECT_TRUE(b.at(null_field).is_null()) << null_field;
  }
  EXPECT_EQ(b.at("stream"), false);

  const auto& f = data[1].as_object();
  EXPECT_EQ(f.at("unix_ms"), 1'764'446'400'123);
  EXPECT_EQ(f.at("time"), "2025-11-29T20:00:00.123Z");
  EXPECT_EQ(f.at("request_id"), "req-1764446400123");
  EXPECT_EQ(f.at("method"), "POST");
  EXPECT_EQ(f.at("path"), "/v1/chat/completions?q=\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(f.at("key_name"), "team-a");
  EXPECT_EQ(f.at("tenant"), "alpha");
  EXPECT_EQ(f.at("tier"), "standard");
  EXPECT_EQ(f.at("alias"), "llama3");
  EXPECT_EQ(f.at("model"), "llama3");
  EXPECT_EQ(f.at("provider"), "ollama");
  EXPECT_EQ(f.at("backend"), "127.0.0.1:11434");
  EXPECT_EQ(f.at("status"), 429);
  EXPECT_EQ(f.at("reason"), "rate_limit_exceeded");
  EXPECT_EQ(f.at("error"), "too many requests");
  EXPECT_EQ(f.at("upstream_status"), 200);
  EXPECT_EQ(f.at("stream"), true);
  EXPECT_EQ(f.at("client_cancelled"), false);
  EXPECT_EQ(f.at("wall_ms").to_number<double>(), 12.5);
  EXPECT_EQ(f.at("ttft_ms").to_number<double>(), 3.25);
  EXPECT_EQ(f.at("tokens_per_s").to_number<double>(), 41.5);
  EXPECT_EQ(f.at("prompt_tokens"), 12);
  EXPECT_EQ(f.at("completion_tokens"), 34);
  EXPECT_EQ(f.at("instance"), "test");
  EXPECT_EQ(f.at("limiter"), "redis");
  EXPECT_EQ(f.at("priority"), "high");
  EXPECT_EQ(f.at("queue_ms").to_number<double>(), 1.5);
  EXPECT_EQ(f.at("reserved_tokens"), 512);
  EXPECT_EQ(f.at("temperature").to_number<double>(), 0.7);
  EXPECT_TRUE(f.at("top_p").is_null());
  EXPECT_EQ(f.at("max_tokens"), 256);
  EXPECT_EQ(f.at("num_ctx"), 8192);
  EXPECT_EQ(f.at("num_gpu"), 1);
  EXPECT_EQ(f.at("num_batch"), 64);
  EXPECT_EQ(body.at("has_more"), false);
  EXPECT_TRUE(body.at("next_before_id").is_null());
}

// Every byte that a row format treats specially (COPY's text format: tab, newline, CR,
// backslash, its \N) and values at the edges of their types come back as they went in.
telemetry::RequestRecord awkward_record(std::int64_t unix_ms) {
  auto r = record(unix_ms, "llama3", "team-a", 429, 0.001, 1e-9);
  r.request_id = "req\\N";
  r.path = "/v1/chat/completions?q=caf\xC3\xA9&t=\xE2\x82\xAC";
  r.error = "tab\there\nnew line\\back\rcr \\N end";
  r.tokens_per_s = 123.456789012345;
  r.temperature = 0.1;
  r.top_p = 1e300;
  r.completion_tokens = 5'000'000'000;
  r.max_tokens = 0;
  r.upstream_status = 502;
  r.client_cancelled = true;
  return r;
}

void expect_awkward(const json::object& f, std::int64_t unix_ms) {
  EXPECT_EQ(f.at("unix_ms"), unix_ms);
  EXPECT_EQ(f.at("request_id"), "req\\N");
  EXPECT_EQ(f.at("path"), "/v1/chat/completions?q=caf\xC3\xA9&t=\xE2\x82\xAC");
  EXPECT_EQ(f.at("error"), "tab\there\nnew line\\back\rcr \\N end");
  EXPECT_EQ(f.at("status"), 429);
  EXPECT_EQ(f.at("upstream_status"), 502);
  EXPECT_EQ(f.at("client_cancelled"), true);
  EXPECT_EQ(f.at("stream"), false);
  EXPECT_EQ(f.at("wall_ms").to_number<double>(), 0.001);
  EXPECT_EQ(f.at("ttft_ms").to_number<double>(), 1e-9);
  EXPECT_EQ(f.at("tokens_per_s").to_number<double>(), 123.456789012345);
  EXPECT_EQ(f.at("temperature").to_number<double>(), 0.1);
  EXPECT_EQ(f.at("top_p").to_number<double>(), 1e300);
  EXPECT_EQ(f.at("completion_tokens"), 5'000'000'000);
  EXPECT_EQ(f.at("max_tokens"), 0);
  EXPECT_TRUE(f.at("prompt_tokens").is_null());
  EXPECT_TRUE(f.at("num_ctx").is_null());
}

TEST_P(HistoryTest, AwkwardTextAndNumbersComeBackExactly) {
  auto h = make();
  ASSERT_TRUE(h);
  h->consume(awkward_record(1'764'446'400'500));
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  EXPECT_EQ(h->status().written, 1u);
  const auto body = list_json(*h, "");
  ASSERT_TRUE(body.is_object());
  ASSERT_EQ(body.at("data").as_array().size(), 1u);
  expect_awkward(body.at("data").at(0).as_object(), 1'764'446'400'500);
}

// A newer sluice may migrate the shared table, and this one keeps writing to it "as it is"
// (docs/history.md): rows still land when a column's type is no longer migration 1's,
// here through the text format (the binary one must match the types exactly).
TEST_P(HistoryTest, RowsLandWhenANewerMigrationChangedAColumnType) {
  if (GetParam() != Db::postgres) GTEST_SKIP() << "SQLite columns have no fixed type";
  auto h = make();
  ASSERT_TRUE(h);
  h->consume(record(1000, "m", "k", 200, 1));
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  ASSERT_TRUE(pg_->psql("history", "ALTER TABLE requests ALTER COLUMN status TYPE bigint, "
                                   "ALTER COLUMN wall_ms TYPE numeric"))
      << pg_->last_error();
  h->consume(awkward_record(2000));  // the writer's connection predates the change
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  const auto st = h->status();
  EXPECT_TRUE(st.up) << st.last_error;
  EXPECT_EQ(st.written, 2u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 2);
  const auto body = list_json(*h, "limit=1");
  ASSERT_TRUE(body.is_object());
  expect_awkward(body.at("data").at(0).as_object(), 2000);
}

TEST_P(HistoryTest, BatchesWhenBatchRowsAreQueued) {
  settings_.batch_rows = 10;
  settings_.flush_interval = std::chrono::hours(1);  // only the count can start a batch
  auto h = make();
  ASSERT_TRUE(h);
  for (int i = 0; i < 25; ++i) h->consume(record(1000 + i, "m", "k", 200, 1));
  ASSERT_TRUE(wait_until([&] { return h->status().written == 20; })) << h->status().last_error;
  auto st = h->status();
  EXPECT_EQ(st.batches, 2u);
  EXPECT_EQ(st.queued, 5u);  // fewer than batch_rows: they wait for the interval (or a flush)
  ASSERT_TRUE(h->flush(20s));
  st = h->status();
  EXPECT_EQ(st.written, 25u);
  EXPECT_EQ(st.batches, 3u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 25);
}

// A row of /history (JSON) holds what `r` recorded; NULL where the record has nothing.
void expect_row_is(const json::object& o, const telemetry::RequestRecord& r) {
  auto nullable_int = [](std::int64_t v) { return v < 0 ? json::value(nullptr) : json::value(v); };
  auto nullable_double = [](double v) { return v < 0 ? json::value(nullptr) : json::value(v); };
  auto nullable_text = [](std::string_view v) { return v.empty() ? json::value(nullptr) : json::value(v); };
  EXPECT_EQ(o.at("request_id"), json::value(r.request_id));
  EXPECT_EQ(o.at("model"), json::value(r.model));
  EXPECT_EQ(o.at("key_name"), json::value(r.key_name));
  EXPECT_EQ(o.at("status").to_number<std::int64_t>(), r.status);
  EXPECT_EQ(o.at("wall_ms").to_number<double>(), r.wall_ms);
  EXPECT_EQ(o.at("error"), nullable_text(r.error));
  EXPECT_EQ(o.at("stream"), json::value(r.stream));
  EXPECT_EQ(o.at("upstream_status"), nullable_int(r.upstream_status));
  EXPECT_EQ(o.at("ttft_ms"), nullable_double(r.ttft_ms));
  EXPECT_EQ(o.at("prompt_tokens"), nullable_int(r.prompt_tokens));
  EXPECT_EQ(o.at("completion_tokens"), nullable_int(r.completion_tokens));
  EXPECT_EQ(o.at("temperature"), nullable_double(r.temperature));
  EXPECT_EQ(o.at("max_tokens"), nullable_int(r.max_tokens));
  EXPECT_EQ(o.at("num_ctx"), nullable_int(r.num_ctx));
  EXPECT_EQ(o.at("limiter"), nullable_text(r.limiter));
}

// Hands the history `batches` batches of `rows` records (make(i), i = 0, 1...; record i
// has unix_ms 1000 + i), one consume_batch each as the access log does, waiting for each
// to be written at its first try; then every row of /history must hold what its record did.
template <class Make>
void write_batches_and_check(History& h, int batches, int rows, const Make& make) {
  std::vector<telemetry::RequestRecord> batch;
  for (int b = 0; b < batches; ++b) {
    batch.clear();
    for (int i = 0; i < rows; ++i) batch.push_back(make(b * rows + i));
    const std::vector<std::string_view> json(batch.size());
    h.consume_batch(batch, json);
    ASSERT_TRUE(wait_until([&] { return h.status().written == static_cast<std::uint64_t>((b + 1) * rows); }))
        << h.status().last_error;
  }
  EXPECT_EQ(h.status().write_errors, 0u) << h.status().last_error;
  const auto body = list_json(h, "limit=1000");
  ASSERT_TRUE(body.is_object());
  const auto& data = body.at("data").as_array();
  ASSERT_EQ(data.size(), static_cast<std::size_t>(batches * rows));
  for (const auto& row : data) {
    const auto& o = row.as_object();
    const int i = static_cast<int>(o.at("unix_ms").to_number<std::int64_t>() - 1000);
    SCOPED_TRACE("row " + std::to_string(i));
    expect_row_is(o, make(i));
  }
}

// Batches of 77 rows go through statements of several sizes (SQLite: 32, 32, 8, 4, 1),
// whose parameters keep what the previous step bound: every value, NULL or not, must
// still land in its own row, batch after batch. Handed over with consume_batch, as the
// access log does.
TEST_P(HistoryTest, EveryValueOfEveryBatchLandsInItsRow) {
  settings_.batch_rows = 77;
  settings_.flush_interval = std::chrono::hours(1);
  auto h = make();
  ASSERT_TRUE(h);
  constexpr int kRows = 77;
  auto make_record = [](int i) {
    auto r = record(1000 + i, i % 3 ? "m-a" : "m-b", i % 4 ? "team-a" : "team-b", i % 5 ? 200 : 500, 1 + i % 2);
    if (i % 2) r.error = "e" + std::to_string(i);
    r.stream = i % 3 == 0;
    r.upstream_status = i % 4 ? 200 : -1;
    r.ttft_ms = i % 3 ? 0.5 : -1;
    r.prompt_tokens = i % 6 < 3 ? 10 : -1;
    r.completion_tokens = i % 7 == 0 ? -1 : i % 2;
    r.temperature = i % 2 ? 0.7 : -1;
    r.max_tokens = i % 8 < 4 ? 64 : -1;
    r.num_ctx = i == 40 ? 8192 : -1;
    r.limiter = i % 5 == 1 ? "redis" : "";
    return r;
  };
  write_batches_and_check(*h, 2, kRows, make_record);
  EXPECT_EQ(h->status().batches, 2u);
}

// SQLite leaves out of a batch's INSERT the columns that are NULL in all its rows, with
// statements kept per set of such columns (a few, the least recently used replaced): six
// batches with six different sets, then the first set again, must each land whole.
TEST_P(HistoryTest, BatchesWithDifferentAllNullColumnsEachLandWhole) {
  settings_.batch_rows = 20;
  settings_.flush_interval = std::chrono::hours(1);
  auto h = make();
  ASSERT_TRUE(h);
  constexpr int kRows = 20, kBatches = 7;
  auto make_record = [](int i) {
    const int pattern = (i / kRows) % 6;  // batch 6 repeats batch 0's
    auto r = record(1000 + i, "m-a", "team-a", 200, 1);
    if (pattern == 1 || (pattern == 2 && i % 2)) r.error = "e" + std::to_string(i);
    if (pattern == 2 || pattern == 3) r.temperature = 0.1 + 0.25 * (i % 4);
    if (pattern == 3 && i % 3 == 0) r.num_ctx = 4096;
    if (pattern == 4) r.limiter = "redis";
    r.upstream_status = pattern == 0 ? -1 : pattern >= 4 && i % 2 ? -1 : 200;
    if (pattern != 5) r.ttft_ms = 0.5;
    if (pattern == 5) r.max_tokens = i;
    return r;
  };
  write_batches_and_check(*h, kBatches, kRows, make_record);
}

TEST_P(HistoryTest, BatchesWhenTheFlushIntervalPasses) {
  settings_.batch_rows = 1000;
  settings_.flush_interval = 100ms;
  auto h = make();
  ASSERT_TRUE(h);
  for (int i = 0; i < 3; ++i) h->consume(record(1000 + i, "m", "k", 200, 1));
  // No flush() call: only the interval can write these.
  ASSERT_TRUE(wait_until([&] { return h->status().written == 3; })) << h->status().last_error;
  EXPECT_EQ(h->status().batches, 1u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 3);
}

TEST_P(HistoryTest, AFullQueueDropsAndCounts) {
  settings_.queue_size = 5;
  settings_.batch_rows = 1000;
  settings_.flush_interval = std::chrono::hours(1);  // nothing leaves the queue until flush()
  auto h = make();
  ASSERT_TRUE(h);
  for (int i = 0; i < 8; ++i) h->consume(record(1000 + i, "m", "k", 200, 1));
  auto st = h->status();
  EXPECT_EQ(st.queued, 5u);
  EXPECT_EQ(st.dropped, 3u);
  ASSERT_TRUE(h->flush(20s));
  st = h->status();
  EXPECT_EQ(st.written, 5u);
  EXPECT_EQ(st.dropped, 3u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 5);
}

// A database that keeps failing the writes for a reason that is not in the rows (a full
// disk, a timeout, a lock) gets the same batch again until it takes it; only a batch the
// database refuses for its content is dropped, after 5 refusals.
TEST_P(HistoryTest, OnlyABatchRefusedForItsContentIsDropped) {
  settings_.retry_interval = 20ms;
  auto h = make();
  ASSERT_TRUE(h);
  ASSERT_TRUE(wait_until([&] { return h->status().up; }));  // migrated: the table is there
  refuse_inserts(false);
  h->consume(record(2000, "m", "k", 200, 1));
  h->consume(record(2001, "m", "k", 200, 1));
  ASSERT_TRUE(wait_until([&] { return h->status().write_errors >= 12; }))
      << "write errors: " << h->status().write_errors << ", last error: " << h->status().last_error;
  auto st = h->status();
  EXPECT_EQ(st.dropped, 0u) << st.last_error;
  EXPECT_FALSE(st.up);
  EXPECT_NE(st.last_error.find(GetParam() == Db::postgres ? "refused by the test" : "malformed JSON"), std::string::npos)
      << st.last_error;
  accept_inserts();
  ASSERT_TRUE(h->flush(20s));
  st = h->status();
  EXPECT_EQ(st.written, 2u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_TRUE(st.up);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 2);

  refuse_inserts(true);
  const auto errors_before = st.write_errors;
  h->consume(record(2002, "m", "k", 200, 1));
  ASSERT_TRUE(wait_until([&] { return h->status().dropped == 1; })) << h->status().last_error;
  st = h->status();
  EXPECT_EQ(st.write_errors - errors_before, 5u);
  EXPECT_NE(st.last_error.find("dropped a batch of 1 rows after 5 refusals of its rows"), std::string::npos)
      << st.last_error;
  accept_inserts();
  h->consume(record(2003, "m", "k", 200, 1));
  ASSERT_TRUE(h->flush(20s));
  EXPECT_EQ(h->status().written, 3u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 3);
}

TEST_P(HistoryTest, MigrationsAreAppliedOnce) {
  {
    auto h = make();
    ASSERT_TRUE(h);
    h->consume(record(1000, "m", "k", 200, 1));
    ASSERT_TRUE(h->flush(20s));
  }
  auto h = make();  // a second start on the same database
  ASSERT_TRUE(h);
  ASSERT_TRUE(wait_until([&] { return h->status().up; })) << h->status().last_error;
  EXPECT_EQ(h->status().schema_version, kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations"), kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations WHERE version = 1"), 1);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations WHERE version = 2"), 1);
  h->consume(record(2000, "m", "k", 200, 1));
  ASSERT_TRUE(h->flush(20s));
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 2);
}

TEST_P(HistoryTest, ListFiltersPagesAndTimeRanges) {
  auto h = make();
  ASSERT_TRUE(h);
  const std::int64_t base = 1'764'446'400'000;
  struct Input {
    std::int64_t unix_ms;
    std::string model, key;
    int status;
  };
  std::vector<Input> inputs;
  for (int i = 0; i < 30; ++i) {
    inputs.push_back({base + i * 1000, i % 3 == 0 ? "m-a" : "m-b", i % 2 ? "team-a" : "team-b",
                      i % 5 == 0 ? 500 : i % 7 == 0 ? 429 : 200});
    h->consume(record(inputs.back().unix_ms, inputs.back().model == "m-a" ? "m-a" : "m-b",
                      inputs.back().key == "team-a" ? "team-a" : "team-b", inputs.back().status, 1));
  }
  ASSERT_TRUE(h->flush(20s));

  // The unix_ms of every row a query answers (following the pages), newest first.
  auto fetch_all = [&](const std::string& qs, int* pages = nullptr) {
    std::vector<std::int64_t> out;
    std::string cursor;
    for (int page = 1; page <= 100; ++page) {
      const auto body = list_json(*h, qs + cursor);
      if (!body.is_object()) break;
      for (const auto& row : body.at("data").as_array()) out.push_back(row.at("unix_ms").to_number<std::int64_t>());
      if (pages) *pages = page;
      if (!body.at("has_more").as_bool()) {
        EXPECT_TRUE(body.at("next_before_id").is_null());
        break;
      }
      cursor = "&before_id=" + std::to_string(body.at("next_before_id").to_number<std::int64_t>());
    }
    return out;
  };
  auto expected = [&](const std::function<bool(const Input&)>& keep) {
    std::vector<std::int64_t> out;
    for (auto it = inputs.rbegin(); it != inputs.rend(); ++it) {
      if (keep(*it)) out.push_back(it->unix_ms);
    }
    return out;
  };

  EXPECT_EQ(fetch_all("limit=1000"), expected([](auto&) { return true; }));
  EXPECT_EQ(fetch_all("model=m-a"), expected([](auto& r) { return r.model == "m-a"; }));
  EXPECT_EQ(fetch_all("key=team-a"), expected([](auto& r) { return r.key == "team-a"; }));
  EXPECT_EQ(fetch_all("tenant=beta"), expected([](auto& r) { return r.key == "team-b"; }));
  EXPECT_EQ(fetch_all("status=429"), expected([](auto& r) { return r.status == 429; }));
  EXPECT_EQ(fetch_all("status=5xx"), expected([](auto& r) { return r.status >= 500; }));
  EXPECT_EQ(fetch_all("status=2xx&model=m-b&key=team-a"),
            expected([](auto& r) { return r.status == 200 && r.model == "m-b" && r.key == "team-a"; }));
  EXPECT_EQ(fetch_all("since=" + std::to_string(base + 10'000) + "&until=" + std::to_string(base + 20'000)),
            expected([&](auto& r) { return r.unix_ms >= base + 10'000 && r.unix_ms < base + 20'000; }));
  // The same range in ISO-8601: base is 2025-11-29T20:00:00Z.
  EXPECT_EQ(fetch_all("since=2025-11-29T20:00:10Z&until=2025-11-29T20:00:20.000Z"),
            expected([&](auto& r) { return r.unix_ms >= base + 10'000 && r.unix_ms < base + 20'000; }));

  int pages = 0;
  const auto paged = fetch_all("limit=7&model=m-b", &pages);
  const auto want = expected([](auto& r) { return r.model == "m-b"; });
  EXPECT_EQ(paged, want);
  EXPECT_EQ(pages, static_cast<int>((want.size() + 6) / 7));
  EXPECT_EQ(std::set<std::int64_t>(paged.begin(), paged.end()).size(), paged.size());
}

// Nearest rank, written independently of the library: the ceil(p/100 * n)-th smallest.
double nearest_rank(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

TEST_P(HistoryTest, StatsPercentilesMatchTheInputs) {
  auto h = make();
  ASSERT_TRUE(h);
  const std::int64_t base = test::now_ms() - 600'000;
  struct Expected {
    std::vector<double> wall, ttft, tps;
    int count = 0, errors = 0;
    std::int64_t prompt = 0, completion = 0;
  };
  std::map<std::string, Expected> want;
  // m-a: 23 rows, wall 7, 14, ... in a scrambled order; m-b: 6 rows; ttft and tokens on some.
  for (int i = 0; i < 29; ++i) {
    const bool a = i < 23;
    const std::string model = a ? "m-a" : "m-b";
    const double wall = a ? ((i * 11) % 23 + 1) * 7.0 : std::vector<double>{5, 1, 300, 2, 4, 100}[i - 23];
    const double ttft = i % 3 == 0 ? -1 : wall / 4;
    const int status = i % 4 == 0 ? 502 : i % 9 == 0 ? 429 : 200;
    auto r = record(base + i * 1000, a ? "m-a" : "m-b", "team-a", status, wall, ttft);
    r.stream = i % 2 == 0;
    if (i % 5 != 0) {
      r.tokens_per_s = 10.0 + i;
      r.prompt_tokens = i;
      r.completion_tokens = 2 * i;
    }
    h->consume(r);
    auto& e = want[model];
    ++e.count;
    e.errors += status >= 400;
    e.wall.push_back(wall);
    if (ttft >= 0) e.ttft.push_back(ttft);
    if (i % 5 != 0) {
      e.tps.push_back(10.0 + i);
      e.prompt += i;
      e.completion += 2 * i;
    }
  }
  h->consume(record(base - 7'200'000, "m-a", "team-a", 200, 99999));  // outside the window
  ASSERT_TRUE(h->flush(20s));

  StatsQuery q;
  q.since_ms = base - 1;
  q.until_ms = base + 3'600'000;
  q.group_by = "model";
  const auto body = stats_json(*h, q);
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body.at("group_by"), "model");
  EXPECT_EQ(body.at("truncated"), false);
  EXPECT_EQ(body.at("rows"), 29);
  const auto& groups = body.at("groups").as_array();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].at("key"), "m-a");  // the bigger group first
  for (const auto& g : groups) {
    const auto& e = want[std::string(g.at("key").as_string())];
    SCOPED_TRACE(std::string(g.at("key").as_string()));
    EXPECT_EQ(g.at("count"), e.count);
    EXPECT_EQ(g.at("errors"), e.errors);
    EXPECT_NEAR(g.at("wall_ms").at("mean").to_number<double>(), mean(e.wall), 0.001);
    EXPECT_EQ(g.at("wall_ms").at("p50").to_number<double>(), nearest_rank(e.wall, 50));
    EXPECT_EQ(g.at("wall_ms").at("p95").to_number<double>(), nearest_rank(e.wall, 95));
    EXPECT_NEAR(g.at("ttft_ms").at("mean").to_number<double>(), mean(e.ttft), 0.001);
    EXPECT_EQ(g.at("ttft_ms").at("p50").to_number<double>(), nearest_rank(e.ttft, 50));
    EXPECT_EQ(g.at("ttft_ms").at("p95").to_number<double>(), nearest_rank(e.ttft, 95));
    EXPECT_NEAR(g.at("tokens_per_s").at("mean").to_number<double>(), mean(e.tps), 0.001);
    EXPECT_EQ(g.at("prompt_tokens"), e.prompt);
    EXPECT_EQ(g.at("completion_tokens"), e.completion);
  }
  // Sanity of the oracle itself on the m-b values {1, 2, 4, 5, 100, 300}: p50 is the 3rd.
  EXPECT_EQ(nearest_rank(want["m-b"].wall, 50), 4);
  EXPECT_EQ(nearest_rank(want["m-b"].wall, 95), 300);

  q.group_by = "stream";
  const auto by_stream = stats_json(*h, q);
  ASSERT_TRUE(by_stream.is_object());
  ASSERT_EQ(by_stream.at("groups").as_array().size(), 2u);
  for (const auto& g : by_stream.at("groups").as_array()) {
    ASSERT_TRUE(g.at("key").is_bool());
    EXPECT_EQ(g.at("count"), g.at("key").as_bool() ? 15 : 14);
  }

  q.group_by = "";
  q.model = "m-b";
  const auto filtered = stats_json(*h, q);
  ASSERT_TRUE(filtered.is_object());
  ASSERT_EQ(filtered.at("groups").as_array().size(), 1u);
  EXPECT_TRUE(filtered.at("groups").at(0).at("key").is_null());
  EXPECT_EQ(filtered.at("groups").at(0).at("count"), 6);

  q.model.clear();
  q.max_rows = 5;
  const auto truncated = stats_json(*h, q);
  ASSERT_TRUE(truncated.is_object());
  EXPECT_EQ(truncated.at("truncated"), true);
  EXPECT_EQ(truncated.at("rows"), 5);
  EXPECT_EQ(truncated.at("groups").at(0).at("count"), 5);
}

// What the token quotas were charged, per key, tenant, tier and alias, over a time range:
// only rows that reserved tokens, each by settlement's rule (prompt + completion when the
// answer was 200 or output was relayed, else 0; an absurd count at most 99,999,999,999,999).
TEST_P(HistoryTest, UsageSumsWhatTheQuotasWereChargedPerKeyAndAlias) {
  auto h = make();
  ASSERT_TRUE(h);
  const std::int64_t base = test::now_ms() - 600'000;
  auto row = [&](std::int64_t at, std::string_view alias, std::string_view key, int status, std::int64_t prompt,
                 std::int64_t completion, bool reserved = true) {
    auto r = record(at, alias, key, status, 10);
    const std::string model = "real-" + std::string(alias);  // (the record holds views: kept until consumed)
    r.model = model;  // the upstream's model: not what limits count by
    r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    if (reserved) r.reserved_tokens = 500;
    h->consume(r);
  };
  row(base, "a", "team-a", 200, 10, 5);             // 15
  row(base + 1, "a", "team-a", 200, 7, -1);         // 7: the completion unknown
  row(base + 2, "a", "team-a", 499, 4, 3);          // 7: a client that left mid-stream pays what it got
  row(base + 3, "a", "team-a", 502, 9, 0);          // 0: failed before any output
  row(base + 4, "a", "team-a", 200, 50, 50, false); // no reservation: no quota applied
  row(base + 5, "b", "team-a", 200, 1, 2);          // 3, under alias b
  row(base + 6, "a", "team-b", 200, 100'000'000'000'000, 100'000'000'000'000);  // at most one charge's maximum
  row(base + 7, "a", "team-a", 200, 1000, 1000);   // at the range's end: outside
  row(base - 1, "a", "team-a", 200, 1000, 1000);   // before it: outside
  ASSERT_TRUE(h->flush(20s));

  std::vector<std::vector<Usage>> out;
  const UsageQuery ranges[] = {{base, base + 7}, {base + 5, base + 100'000}, {base + 100'000, base + 200'000}};
  const auto res = h->usage(ranges, out);
  ASSERT_TRUE(res.ok()) << res.error;
  ASSERT_EQ(out.size(), 3u);
  std::map<std::pair<std::string, std::string>, Usage> got;
  for (const auto& u : out[0]) got[{u.key_name, u.alias}] = u;
  ASSERT_EQ(got.size(), 3u);
  const auto& aa = got[{"team-a", "a"}];
  EXPECT_EQ(aa.tokens, 15 + 7 + 7);
  EXPECT_EQ(aa.requests, 4);
  EXPECT_EQ(aa.tenant, "alpha");
  EXPECT_EQ(aa.tier, "standard");
  const auto& ab = got[{"team-a", "b"}];
  EXPECT_EQ(ab.tokens, 3);
  EXPECT_EQ(ab.requests, 1);
  const auto& ba = got[{"team-b", "a"}];
  EXPECT_EQ(ba.tokens, 99'999'999'999'999);
  EXPECT_EQ(ba.tenant, "beta");

  // The second range: b's row, team-b's and the one at base + 7; the third: nothing.
  std::int64_t second = 0;
  for (const auto& u : out[1]) second += u.tokens;
  EXPECT_EQ(second, 3 + 99'999'999'999'999 + 2000);
  EXPECT_TRUE(out[2].empty());
  const UsageQuery empty[] = {{base, base}};
  EXPECT_FALSE(h->usage(empty, out).ok());  // an empty range is refused
}

// A database made by an older sluice (schema version 1: only migration 1 applied, rows
// in it) is migrated to 2 at the next start, keeps its rows, takes new ones (PostgreSQL:
// still in COPY's binary format, the column types being migration 1's) and answers both
// queries over old and new rows alike.
TEST_P(HistoryTest, AVersion1DatabaseIsMigratedAndKeepsWorking) {
  constexpr std::int64_t t0 = 1'764'446'400'000;  // unix ms
  make_version_1({t0, t0 + 1000, t0 + 2000});
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations"), 1);
  if (GetParam() == Db::postgres) {
    EXPECT_EQ(raw_count("SELECT count(*) FROM pg_indexes WHERE indexname = 'requests_unix_ms'"), 1);
  }

  auto h = make();
  ASSERT_TRUE(h);
  ASSERT_TRUE(wait_until([&] { return h->status().up; })) << h->status().last_error;
  EXPECT_EQ(h->status().schema_version, kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations"), kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations WHERE version = 2"), 1);
  if (GetParam() == Db::postgres) {
    EXPECT_EQ(raw_count("SELECT count(*) FROM pg_indexes WHERE indexname = 'requests_unix_ms'"), 0);
    EXPECT_EQ(raw_count("SELECT count(*) FROM pg_indexes WHERE indexname = 'requests_unix_ms_brin' "
                        "AND indexdef LIKE '%USING brin (unix_ms)%'"),
              1);
    EXPECT_EQ(raw_count("SELECT count(*) FROM pg_indexes WHERE indexname IN "
                        "('requests_pkey', 'requests_key_name_unix_ms')"),
              2);
    // The column types are still migration 1's: what the binary COPY checks.
    EXPECT_EQ(raw_count("SELECT count(*) FROM information_schema.columns WHERE table_name = 'requests' AND "
                        "((column_name IN ('status', 'upstream_status') AND data_type <> 'integer') OR "
                        "(column_name = 'unix_ms' AND data_type <> 'bigint') OR "
                        "(column_name = 'wall_ms' AND data_type <> 'double precision'))"),
              0);
  }

  h->consume(awkward_record(t0 + 10'000));
  h->consume(record(t0 + 10'001, "m-new", "k", 200, 4));
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  EXPECT_EQ(h->status().written, 2u);
  EXPECT_EQ(h->status().write_errors, 0u);
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 5);

  const auto page = list_json(*h, "limit=2");
  ASSERT_TRUE(page.is_object());
  ASSERT_EQ(page.at("data").as_array().size(), 2u);
  EXPECT_EQ(page.at("data").at(0).at("unix_ms"), t0 + 10'001);
  expect_awkward(page.at("data").at(1).as_object(), t0 + 10'000);
  const auto old_rows = list_json(*h, "until=" + std::to_string(t0 + 5000) + "&limit=10");
  ASSERT_TRUE(old_rows.is_object());
  ASSERT_EQ(old_rows.at("data").as_array().size(), 3u);
  EXPECT_EQ(old_rows.at("data").at(0).at("unix_ms"), t0 + 2000);
  const auto key_rows = list_json(*h, "key=k&since=" + std::to_string(t0 + 1000) + "&until=" + std::to_string(t0 + 10'001));
  ASSERT_TRUE(key_rows.is_object());
  EXPECT_EQ(key_rows.at("data").as_array().size(), 2u);  // t0 + 1000 and t0 + 2000 (+10000 is team-a's)

  StatsQuery q;
  q.since_ms = t0;
  q.until_ms = t0 + 20'000;
  const auto stats = stats_json(*h, q);
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats.at("rows"), 5);
  EXPECT_EQ(stats.at("groups").at(0).at("count"), 5);
}

// Instances starting together on a version-1 database: one migrates, the others wait for
// it (SQLite: BEGIN IMMEDIATE; PostgreSQL: the advisory lock) and find version 2 applied.
TEST_P(HistoryTest, InstancesStartingTogetherMigrateOnce) {
  make_version_1({1000});
  std::vector<std::unique_ptr<History>> instances;
  for (int i = 0; i < 4; ++i) instances.push_back(make());
  for (auto& h : instances) {
    ASSERT_TRUE(h);
    ASSERT_TRUE(wait_until([&] { return h->status().up; })) << h->status().last_error;
    EXPECT_EQ(h->status().schema_version, kSchemaVersion);
  }
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations"), kSchemaVersion);
  EXPECT_EQ(raw_count("SELECT count(*) FROM schema_migrations WHERE version = 2"), 1);
  for (int i = 0; i < 4; ++i) instances[static_cast<std::size_t>(i)]->consume(record(2000 + i, "m", "k", 200, 1));
  for (auto& h : instances) ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests"), 5);
}

// More rows in the window than max_rows: the newest are read (PostgreSQL reads the window
// unordered first, then again newest first when it holds more than max_rows).
TEST_P(HistoryTest, TruncatedStatsKeepTheNewestRows) {
  auto h = make();
  ASSERT_TRUE(h);
  for (int i = 0; i < 20; ++i) h->consume(record(1000 + i, "m", "k", 200, i));
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  StatsQuery q;
  q.since_ms = 1000;
  q.until_ms = 2000;
  q.max_rows = 5;
  const auto stats = stats_json(*h, q);
  ASSERT_TRUE(stats.is_object());
  EXPECT_EQ(stats.at("truncated"), true);
  EXPECT_EQ(stats.at("rows"), 5);
  const auto& wall = stats.at("groups").at(0).at("wall_ms");
  EXPECT_EQ(wall.at("mean").to_number<double>(), 17.0);  // rows 15..19
  EXPECT_EQ(wall.at("p50").to_number<double>(), 17.0);
  q.max_rows = 20;  // exactly the window: not truncated, every row
  const auto all = stats_json(*h, q);
  ASSERT_TRUE(all.is_object());
  EXPECT_EQ(all.at("truncated"), false);
  EXPECT_EQ(all.at("rows"), 20);
  EXPECT_EQ(all.at("groups").at(0).at("wall_ms").at("mean").to_number<double>(), 9.5);
}

// Retention deletes in chunks of 10,000 rows (a first run over a large backlog must not
// hold the writer, nor run into the write's statement timeout): 25,002 old rows take three.
TEST_P(HistoryTest, RetentionDeletesOldRows) {
  const std::int64_t now = test::now_ms();
  {
    auto h = make();
    ASSERT_TRUE(h);
    h->consume(record(now - 3 * 86'400'000LL, "m", "k", 200, 1));  // 3 days old
    h->consume(record(now - 2 * 86'400'000LL, "m", "k", 200, 1));
    for (int i = 0; i < 25'000; ++i) h->consume(record(now - 2 * 86'400'000LL + i, "m", "k", 200, 1));
    h->consume(record(now - 60'000, "m", "k", 200, 1));
    ASSERT_TRUE(h->flush(60s));
    ASSERT_EQ(h->status().dropped, 0u);
  }
  settings_.retention_days = 1;
  auto h = make();  // retention runs once connected, then hourly
  ASSERT_TRUE(h);
  // 25,000 rows deleted in batches: a loaded machine (ctest -j2 beside other suites) has
  // taken longer than the default 20 s wait.
  ASSERT_TRUE(wait_until([&] { return raw_count("SELECT count(*) FROM requests") == 1; }, std::chrono::seconds(90)))
      << raw_count("SELECT count(*) FROM requests") << " rows; " << h->status().last_error;
  EXPECT_EQ(raw_count("SELECT count(*) FROM requests WHERE unix_ms = " + std::to_string(now - 60'000)), 1);
}

// Stored responses of the Responses API (responses.store: database), in their own table.
TEST_P(HistoryTest, StoredResponsesAreKeptByTenantUntilTheyExpire) {
  std::string error;
  auto t = ResponseTable::create(settings_, &error);
  ASSERT_TRUE(t) << error;
  const std::int64_t now = 1'764'446'400'000;
  ASSERT_TRUE(t->put("acme", "resp_1", {"{\"id\":\"resp_1\"}", "[1]", 3, 2}, now + 60'000, now)) << t->error();
  EXPECT_TRUE(t->up());
  auto got = t->get("acme", "resp_1", now);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->response, "{\"id\":\"resp_1\"}");
  EXPECT_EQ((*got)->items, "[1]");
  EXPECT_EQ((*got)->input_from, 3);
  EXPECT_EQ((*got)->input_count, 2);
  // Another tenant does not find it; nor does anyone once it expired.
  auto theirs = t->get("other", "resp_1", now);
  ASSERT_TRUE(theirs);
  EXPECT_FALSE(*theirs);
  EXPECT_FALSE(t->get("acme", "resp_1", now + 60'000).value());
  // Written again: replaced.
  ASSERT_TRUE(t->put("acme", "resp_1", {"{}", "[2]", 0, 1}, now + 120'000, now));
  EXPECT_EQ(t->get("acme", "resp_1", now + 60'000).value()->items, "[2]");
  EXPECT_EQ(raw_count("SELECT count(*) FROM responses"), 1);
  // Erased: the tenant's only.
  EXPECT_EQ(t->erase("other", "resp_1"), std::optional<bool>(false));
  EXPECT_EQ(t->erase("acme", "resp_1"), std::optional<bool>(true));
  EXPECT_EQ(t->erase("acme", "resp_1"), std::optional<bool>(false));
  // Expired rows are swept by the writes.
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(t->put("acme", "old_" + std::to_string(i), {"{}", "[]", 0, 0}, now - 1, now));
  EXPECT_LT(raw_count("SELECT count(*) FROM responses"), 200);
  // The history's own writer shares the schema.
  auto h = make();
  ASSERT_TRUE(wait_until([&] { return h->status().up; })) << h->status().last_error;
  EXPECT_EQ(h->status().schema_version, kSchemaVersion);
}

// The key store's table (key_store): every field kept, names and digests unique, the
// version bumped by each write that changed a row and by nothing else.
TEST_P(HistoryTest, TheControlTableKeepsKeysAndDrainsAndCountsItsChanges) {
  std::string error;
  auto t = ControlTable::create(settings_, &error);
  ASSERT_TRUE(t) << error;
  const auto v0 = t->version();
  ASSERT_TRUE(v0) << t->error();
  KeyRow r;
  r.name = "team-a";
  r.digest = std::string(64, 'a');
  r.masked = "sk-***abcd";
  r.tenant = "acme";
  r.tier = "gold";
  r.models = {"demo", "other"};
  r.role = "viewer";
  r.max_in_flight = 3;
  r.priority = "premium";
  r.guardrails = "strict";
  r.expires_ms = 1'900'000'000'000;
  r.budget_tokens = 5'000'000;
  r.budget_per = "month";
  r.created_ms = r.updated_ms = 1'800'000'000'000;
  r.created_by = "admin";
  ASSERT_EQ(t->insert(r), ControlTable::Write::ok) << t->error();
  EXPECT_EQ(t->version(), *v0 + 1);
  EXPECT_EQ(t->insert(r), ControlTable::Write::exists) << "the same name";
  KeyRow same_digest = r;
  same_digest.name = "team-b";
  EXPECT_EQ(t->insert(same_digest), ControlTable::Write::exists) << "the same digest";
  EXPECT_EQ(t->version(), *v0 + 1) << "a write that changed nothing is not a change";

  auto st = t->read();
  ASSERT_TRUE(st) << t->error();
  EXPECT_EQ(st->version, *v0 + 1);
  ASSERT_EQ(st->keys.size(), 1u);
  const KeyRow got = st->keys.front();
  EXPECT_EQ(got.name, "team-a");
  EXPECT_EQ(got.digest, r.digest);
  EXPECT_EQ(got.models, r.models);
  EXPECT_EQ(got.role, "viewer");
  EXPECT_EQ(got.max_in_flight, 3);
  EXPECT_EQ(got.priority, "premium");
  EXPECT_EQ(got.max_priority, "");
  EXPECT_EQ(got.guardrails, "strict");
  EXPECT_EQ(got.expires_ms, r.expires_ms);
  EXPECT_TRUE(got.enabled);
  EXPECT_EQ(got.created_by, "admin");
  EXPECT_EQ(got.old_until_ms, -1);
  EXPECT_EQ(got.budget_tokens, 5'000'000);
  EXPECT_EQ(got.budget_per, "month");

  KeyRow changed = got;
  changed.budget_tokens = -1;  // the budget removed
  changed.budget_per.clear();
  changed.enabled = false;
  changed.old_digest = r.digest;
  changed.digest = std::string(64, 'b');
  changed.old_until_ms = 1'800'000'100'000;
  changed.expires_ms = -1;
  changed.created_by = "someone else";  // not changed by an update
  changed.updated_ms = 1'800'000'000'500;
  ASSERT_EQ(t->update(changed), ControlTable::Write::ok) << t->error();
  // A change made on the row as it was before: refused, nothing written.
  KeyRow stale = got;
  stale.tier = "stale";
  EXPECT_EQ(t->update(stale), ControlTable::Write::conflict);
  st = t->read();
  ASSERT_TRUE(st && st->keys.size() == 1u);
  const auto& rows = st->keys;
  EXPECT_FALSE(rows.front().enabled);
  EXPECT_EQ(rows.front().digest, std::string(64, 'b'));
  EXPECT_EQ(rows.front().old_digest, r.digest);
  EXPECT_EQ(rows.front().old_until_ms, 1'800'000'100'000);
  EXPECT_EQ(rows.front().expires_ms, -1);
  EXPECT_EQ(rows.front().budget_tokens, -1);
  EXPECT_EQ(rows.front().budget_per, "");
  EXPECT_EQ(rows.front().created_by, "admin");
  EXPECT_EQ(rows.front().tier, "gold") << "the stale change was not written";
  EXPECT_EQ(rows.front().revision, got.revision + 1);
  EXPECT_EQ(st->version, *v0 + 2);
  // Use reported: last_used_ms only ever rises, and it is not a change of the keys.
  const auto before_touch = t->version();
  ASSERT_TRUE(t->touch({{"team-a", 5000}, {"nobody", 7000}})) << t->error();
  ASSERT_TRUE(t->touch({{"team-a", 1000}}));
  st = t->read();
  ASSERT_TRUE(st && st->keys.size() == 1u);
  EXPECT_EQ(st->keys.front().last_used_ms, 5000);
  EXPECT_EQ(t->version(), before_touch);
  EXPECT_EQ(st->keys.front().revision, got.revision + 1) << "nor a revision";
  KeyRow nobody = changed;
  nobody.name = "nobody";
  EXPECT_EQ(t->update(nobody), ControlTable::Write::not_found);
  EXPECT_EQ(t->erase("nobody"), ControlTable::Write::not_found);
  EXPECT_EQ(t->erase("team-a"), ControlTable::Write::ok);
  EXPECT_EQ(t->version(), *v0 + 3);
  EXPECT_EQ(raw_count("SELECT count(*) FROM api_keys"), 0);

  // Drained backends, counted alike.
  ASSERT_EQ(t->drain({"10.0.0.5:8000", "admin", 1'800'000'000'000}), ControlTable::Write::ok) << t->error();
  EXPECT_EQ(t->drain({"10.0.0.5:8000", "other", 1}), ControlTable::Write::exists);
  st = t->read();
  ASSERT_TRUE(st && st->drains.size() == 1u);
  EXPECT_EQ(st->drains.front().name, "10.0.0.5:8000");
  EXPECT_EQ(st->drains.front().by, "admin");
  EXPECT_EQ(st->drains.front().since_ms, 1'800'000'000'000);
  EXPECT_EQ(st->version, *v0 + 4);
  EXPECT_EQ(t->undrain("10.0.0.5:8000"), ControlTable::Write::ok);
  EXPECT_EQ(t->undrain("10.0.0.5:8000"), ControlTable::Write::not_found);
  EXPECT_EQ(t->version(), *v0 + 5);

  // Canary weights: set, replaced, cleared.
  ASSERT_EQ(t->set_canary({"m", 12.5, "admin", 1}), ControlTable::Write::ok) << t->error();
  ASSERT_EQ(t->set_canary({"m", 50, "admin", 2}), ControlTable::Write::ok);
  st = t->read();
  ASSERT_TRUE(st && st->canaries.size() == 1u);
  EXPECT_EQ(st->canaries.front().alias, "m");
  EXPECT_DOUBLE_EQ(st->canaries.front().weight, 50);
  EXPECT_EQ(st->canaries.front().since_ms, 2);
  EXPECT_EQ(t->clear_canary("m"), ControlTable::Write::ok);
  EXPECT_EQ(t->clear_canary("m"), ControlTable::Write::not_found);
  EXPECT_EQ(t->version(), *v0 + 8);
}

TEST_P(HistoryTest, TheAuditTableKeepsChangesNewestFirstAndFiltersThem) {
  auto t = AuditTable::create(settings_);
  ASSERT_TRUE(t);
  auto row = [](std::int64_t ms, std::string actor, std::string action, std::string target) {
    return AuditRow{ms, "gw-a", "req-" + std::to_string(ms), std::move(actor), std::move(action), std::move(target), 200,
                    R"({"body":{"weight":5}})"};
  };
  ASSERT_TRUE(t->write(row(1000, "admin", "backend.drain", "a")));
  ASSERT_TRUE(t->write(row(2000, "ops", "key.create", "team-a")));
  ASSERT_TRUE(t->write(row(3000, "admin", "route.canary", "m")));
  EXPECT_EQ(t->pending(), 0u);
  auto all = t->list({});
  ASSERT_TRUE(all.ok()) << all.error;
  auto v = boost::json::parse(all.body).as_object().at("audit").as_array();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].at("action"), "route.canary");
  EXPECT_EQ(v[2].at("target"), "a");
  EXPECT_EQ(v[0].at("detail").at("body").at("weight"), 5);
  EXPECT_EQ(v[1].at("request_id"), "req-2000");
  AuditQuery q;
  q.actor = "admin";
  q.since_ms = 2000;
  auto some = t->list(q);
  v = boost::json::parse(some.body).as_object().at("audit").as_array();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].at("target"), "m");
  q = {};
  q.limit = 2;
  q.action = "key.create";
  v = boost::json::parse(t->list(q).body).as_object().at("audit").as_array();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].at("actor"), "ops");
}

TEST(AuditTable, RowsWaitWhileTheDatabaseIsDownAndTheOldestAreDroppedPastTheBound) {
  config::HistorySettings s;
  s.backend = config::HistoryBackend::sqlite;
  s.sqlite_path = "/proc/sluice-no-such-dir/history.db";
  s.retry_interval = 0ms;
  auto t = AuditTable::create(s);
  ASSERT_TRUE(t);
  for (std::size_t i = 0; i < AuditTable::kMaxPending + 3; ++i) {
    EXPECT_FALSE(t->write(AuditRow{static_cast<std::int64_t>(i), "gw", "r", "admin", "key.delete", "k", 200, "{}"}));
  }
  EXPECT_EQ(t->pending(), AuditTable::kMaxPending);
  EXPECT_EQ(t->dropped(), 3u);
  auto res = t->list({});
  EXPECT_FALSE(res.ok());
  EXPECT_TRUE(res.unavailable);
  s.backend = config::HistoryBackend::none;
  EXPECT_FALSE(AuditTable::create(s));
}

TEST(AuditQueries, AreReadStrictly) {
  std::string error;
  auto q = parse_audit_query("since=1800000000&actor=admin&action=key.create&target=a%20b&limit=5", error);
  ASSERT_TRUE(q) << error;
  EXPECT_EQ(q->since_ms, 1'800'000'000'000);
  EXPECT_EQ(q->target, "a b");
  EXPECT_EQ(q->limit, 5);
  EXPECT_FALSE(parse_audit_query("limit=0", error));
  EXPECT_NE(error.find("limit"), std::string::npos);
  EXPECT_FALSE(parse_audit_query("colour=red", error));
  EXPECT_NE(error.find("colour"), std::string::npos);
}

TEST(ResponseTable, ADatabaseThatCannotBeOpenedFailsEachCallAndSaysWhy) {
  config::HistorySettings s;
  s.backend = config::HistoryBackend::sqlite;
  s.sqlite_path = "/proc/sluice-no-such-dir/history.db";
  s.retry_interval = 0ms;
  std::string error;
  auto t = ResponseTable::create(s, &error);
  ASSERT_TRUE(t) << error;
  EXPECT_FALSE(t->get("a", "b", 0));
  EXPECT_FALSE(t->put("a", "b", {}, 1, 0));
  EXPECT_FALSE(t->erase("a", "b"));
  EXPECT_FALSE(t->up());
  EXPECT_NE(t->error(), "");
  s.backend = config::HistoryBackend::none;
  EXPECT_FALSE(ResponseTable::create(s, &error));
  EXPECT_NE(error.find("records.history"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, HistoryTest, ::testing::Values(Db::sqlite, Db::postgres),
                         [](const auto& info) { return info.param == Db::sqlite ? "SQLite" : "PostgreSQL"; });

}  // namespace
}  // namespace sluice::history
