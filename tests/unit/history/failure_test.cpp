// Databases that are down, gone or silent: the history starts anyway, says why it is down,
// keeps the rows it can, and recovers by itself.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "helpers.hpp"
#include "history/db.hpp"
#include "pg_server.hpp"

namespace sluice::history {
namespace {

using namespace std::chrono_literals;
using test::record;
using test::wait_until;

TEST(HistoryCreate, BackendNoneIsNotAnError) {
  config::HistorySettings s;
  s.backend = config::HistoryBackend::none;
  std::string error;
  EXPECT_EQ(History::create(s, &error), nullptr);
  EXPECT_EQ(error, "");
}

TEST(HistoryCreate, SettingsThatCanNeverWorkAreErrors) {
  config::HistorySettings s;
  s.backend = config::HistoryBackend::sqlite;
  s.sqlite_path = "";
  std::string error;
  EXPECT_EQ(History::create(s, &error), nullptr);
  EXPECT_NE(error, "");

  s.backend = config::HistoryBackend::postgres;
  s.url = "not a url";
  error.clear();
  EXPECT_EQ(History::create(s, &error), nullptr);
  EXPECT_NE(error, "");

  s.url = "postgresql://u@127.0.0.1:1/db";
  s.queue_size = 0;
  error.clear();
  EXPECT_EQ(History::create(s, &error), nullptr);
  EXPECT_NE(error, "");
}

TEST(HistoryPassword, IsMaskedInTheTargetAndScrubbedFromErrors) {
  EXPECT_EQ(mask_postgres_url("postgresql://app:s3cr%40t@db.example:5432/sluice?sslmode=require&password=other"),
            "postgresql://app:***@db.example:5432/sluice?sslmode=require&password=***");
  EXPECT_EQ(mask_postgres_url("postgres://app@db/sluice"), "postgres://app@db/sluice");
  EXPECT_EQ(scrub_password("auth failed for s3cr@t and s3cr%40t", "postgresql://app:s3cr%40t@db/x"),
            "auth failed for *** and ***");
}

// Every parameter libpq reads a password from is masked: sslpassword (the client key's
// passphrase), and names written percent-encoded or in another case.
TEST(HistoryPassword, EveryPasswordParameterIsMasked) {
  EXPECT_EQ(mask_postgres_url("postgresql://db/x?sslpassword=keypass&sslmode=verify-full"),
            "postgresql://db/x?sslpassword=***&sslmode=verify-full");
  EXPECT_EQ(mask_postgres_url("postgresql://db/x?pass%77ord=hidden1&%73slpassword=hidden2"),
            "postgresql://db/x?pass%77ord=***&%73slpassword=***");
  EXPECT_EQ(mask_postgres_url("postgresql://db/x?PASSWORD=upper"), "postgresql://db/x?PASSWORD=***");
  EXPECT_EQ(mask_postgres_url("postgresql://db/x?passfile=/etc/pgpass&user=app"),
            "postgresql://db/x?passfile=/etc/pgpass&user=app");
  EXPECT_EQ(scrub_password("could not read key: keypass", "postgresql://db/x?sslpassword=keypass"),
            "could not read key: ***");
}

TEST(HistoryPostgres, UnreachableAtStartIsDownNotAnError) {
  config::HistorySettings s;
  s.backend = config::HistoryBackend::postgres;
  s.url = "postgresql://app:hunter2secret@127.0.0.1:" + std::to_string(test::PgServer::free_port()) + "/sluice";
  s.retry_interval = 50ms;
  std::string error;
  auto h = History::create(s, &error);
  ASSERT_TRUE(h) << error;
  EXPECT_EQ(h->status().target.find("hunter2secret"), std::string::npos);
  EXPECT_NE(h->status().target.find("***"), std::string::npos);
  ASSERT_TRUE(wait_until([&] { return !h->status().last_error.empty(); }));
  const auto st = h->status();
  EXPECT_FALSE(st.up);
  EXPECT_EQ(st.backend, "postgres");
  EXPECT_EQ(st.last_error.find("hunter2secret"), std::string::npos) << st.last_error;
  std::string json;
  append_json(json, st);
  const auto status = boost::json::parse(json);
  EXPECT_EQ(status.at("backend"), "postgres");
  EXPECT_EQ(status.at("up"), false);
  EXPECT_EQ(status.at("last_error").as_string(), st.last_error.c_str());
  EXPECT_EQ(status.at("target").as_string(), st.target.c_str());
  EXPECT_EQ(status.at("schema_version"), 0);
  h->consume(record(1000, "m", "k", 200, 1));
  EXPECT_EQ(h->status().queued, 1u);  // kept while down
  const auto r = h->list(ListQuery{});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.unavailable);
  EXPECT_EQ(r.error.find("hunter2secret"), std::string::npos) << r.error;
}

TEST(HistoryPostgres, ASilentServerCostsOnlyTheConnectTimeout) {
  // Accepts TCP (the kernel completes the handshake) but never answers a byte.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);

  config::HistorySettings s;
  s.backend = config::HistoryBackend::postgres;
  s.url = "postgresql://app@127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/sluice";
  s.connect_timeout = 200ms;
  s.retry_interval = 50ms;
  std::string error;
  auto h = History::create(s, &error);
  ASSERT_TRUE(h) << error;
  ASSERT_TRUE(wait_until([&] { return h->status().last_error.find("timed out") != std::string::npos; }))
      << h->status().last_error;
  EXPECT_FALSE(h->status().up);
  h.reset();  // the destructor returns although the server never answered
  ::close(fd);
}

TEST(HistorySQLite, AnUnusablePathIsDownNotAnError) {
  test::TempDir dir;
  std::ofstream(dir.path() + "/file") << "x";
  config::HistorySettings s;
  s.backend = config::HistoryBackend::sqlite;
  s.sqlite_path = dir.path() + "/file/history.db";  // its parent is a file
  s.retry_interval = 50ms;
  std::string error;
  auto h = History::create(s, &error);
  ASSERT_TRUE(h) << error;
  ASSERT_TRUE(wait_until([&] { return !h->status().last_error.empty(); }));
  EXPECT_FALSE(h->status().up);
  EXPECT_EQ(h->status().target, s.sqlite_path);
  h->consume(record(1000, "m", "k", 200, 1));
  EXPECT_FALSE(h->flush(100ms));
  StatsQuery q;
  q.until_ms = 1000;
  const auto r = h->stats(q);
  EXPECT_TRUE(r.unavailable);
}

// The drill: PostgreSQL stops while requests keep coming; the rows wait in the queue,
// the status says down and why; PostgreSQL returns on the same port and data; every row
// lands without restarting anything.
// A migration may run longer than a write may (it lifts the server's statement timeout to
// build an index over a large table): the client waits for it instead of giving up at the
// usual deadline (the statement timeout plus 5 s) while the server goes on holding locks.
TEST(HistoryPostgres, ALongStatementOnPurposeIsWaitedFor) {
  test::PgServer pg;
  ASSERT_EQ(pg.start(), "");
  std::string error;
  auto c = open_postgres(pg.url("postgres"), 2s, 1s, error);  // the usual deadline: 6 s
  ASSERT_TRUE(c) << error;
  EXPECT_NE(c->exec("SELECT pg_sleep(2)").find("statement timeout"), std::string::npos);  // the server's 1 s
  EXPECT_EQ(c->exec_long("BEGIN; SET LOCAL statement_timeout = 0; SELECT pg_sleep(6.5); COMMIT", 60s), "");
  EXPECT_NE(c->exec("SELECT pg_sleep(2)").find("statement timeout"), std::string::npos);  // as before
}

TEST(HistoryPostgres, OutageDrillLosesNoRows) {
  test::PgServer pg;
  ASSERT_EQ(pg.start(), "");
  ASSERT_EQ(pg.create_database("history"), "");
  config::HistorySettings s;
  s.backend = config::HistoryBackend::postgres;
  s.url = pg.url("history");
  s.batch_rows = 8;
  s.flush_interval = 20ms;
  s.retry_interval = 100ms;
  s.connect_timeout = 1000ms;
  std::string error;
  auto h = History::create(s, &error);
  ASSERT_TRUE(h) << error;
  auto count = [&] {
    auto out = pg.psql("history", "SELECT count(*) FROM requests");
    return out ? std::stoll(*out) : -1;
  };

  for (int i = 0; i < 20; ++i) h->consume(record(1000 + i, "m", "k", 200, 1));
  ASSERT_TRUE(h->flush(20s)) << h->status().last_error;
  EXPECT_EQ(count(), 20);
  ASSERT_TRUE(h->list(ListQuery{}).ok());  // the read connection is open now, and dies below

  pg.stop();
  for (int i = 0; i < 30; ++i) h->consume(record(2000 + i, "m", "k", 200, 1));
  ASSERT_TRUE(wait_until([&] { return !h->status().up; })) << "never noticed the outage";
  auto st = h->status();
  EXPECT_NE(st.last_error, "");
  EXPECT_EQ(st.queued, 30u);
  EXPECT_EQ(st.written, 20u);
  EXPECT_EQ(st.dropped, 0u);

  ASSERT_EQ(pg.start(), "");  // same port, same data
  ASSERT_TRUE(wait_until([&] { return h->status().written == 50; }, 60s)) << h->status().last_error;
  EXPECT_EQ(count(), 50);
  st = h->status();
  EXPECT_TRUE(st.up);
  EXPECT_EQ(st.queued, 0u);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_GE(st.reconnects, 1u);
  EXPECT_GE(st.write_errors, 1u);
  EXPECT_EQ(pg.psql("history", "SELECT count(DISTINCT request_id) FROM requests WHERE unix_ms >= 2000"), "30");
  const auto r = h->list(ListQuery{});  // on a fresh read connection, without an error first
  EXPECT_TRUE(r.ok()) << r.error;
}

}  // namespace
}  // namespace sluice::history
