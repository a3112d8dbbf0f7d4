// PostgreSQL over libpq's asynchronous API, so every connect and statement has a client
// side deadline: a server that hangs (or a network that drops packets silently) costs
// the writer at most that long, never forever.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "history/db.hpp"

namespace sluice::history {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kClientMargin = std::chrono::seconds(5);  // beyond statement_timeout
constexpr std::size_t kRowsPerStatement = 1000;          // 33 params a row; the limit is 65535
constexpr Oid kBoolOid = 16, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kFloat4Oid = 700, kFloat8Oid = 701,
              kNumericOid = 1700;

// libpq messages end in a newline and may span lines: one line for status and logs.
std::string one_line(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(c == '\n' || c == '\r' ? ' ' : c);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Waits until the socket is ready for `events` or the deadline passes.
bool wait_socket(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || fd < 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

std::string to_text(const Value& v) {
  char buf[32];
  std::to_chars_result r{buf, {}};
  if (auto* n = std::get_if<std::int64_t>(&v)) r = std::to_chars(buf, buf + sizeof buf, *n);
  else if (auto* d = std::get_if<double>(&v)) r = std::to_chars(buf, buf + sizeof buf, *d);
  else return std::get<std::string>(v);
  return std::string(buf, r.ptr);
}

Value from_text(const char* s, int len, Oid type) {
  const std::string_view text(s, static_cast<std::size_t>(len));
  switch (type) {
    case kBoolOid: return std::int64_t{text == "t" ? 1 : 0};
    case kInt2Oid:
    case kInt4Oid:
    case kInt8Oid: {
      std::int64_t n = 0;
      std::from_chars(text.data(), text.data() + text.size(), n);
      return n;
    }
    case kFloat4Oid:
    case kFloat8Oid:
    case kNumericOid: return std::strtod(s, nullptr);
    default: return std::string(text);
  }
}

class PgConnection final : public Connection {
 public:
  PgConnection(PGconn* conn, std::chrono::milliseconds timeout, std::string_view url)
      : conn_(conn), timeout_(timeout), url_(url) {}
  ~PgConnection() override { PQfinish(conn_); }

  Dialect dialect() const noexcept override { return Dialect::postgres; }

  std::string exec(const std::string& sql) override {
    if (!PQsendQuery(conn_, sql.c_str())) return last_error();
    return finish({});
  }

  std::string query(const std::string& sql, const std::vector<Value>& params, const RowFn& on_row) override {
    std::vector<std::string> texts;
    texts.reserve(params.size());
    std::vector<const char*> values;
    for (const Value& v : params) {
      if (std::holds_alternative<std::monostate>(v)) {
        values.push_back(nullptr);
      } else {
        values.push_back(texts.emplace_back(to_text(v)).c_str());
      }
    }
    if (!PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                           nullptr, 0)) {
      return last_error();
    }
    return finish(on_row);
  }

  std::string insert(std::span<const Row> rows) override {
    // One statement is atomic by itself; several need a transaction.
    const bool chunked = rows.size() > kRowsPerStatement;
    if (chunked) {
      if (auto e = exec("BEGIN"); !e.empty()) return e;
    }
    std::string e;
    for (std::size_t at = 0; at < rows.size() && e.empty(); at += kRowsPerStatement) {
      e = insert_statement(rows.subspan(at, std::min(kRowsPerStatement, rows.size() - at)));
    }
    if (chunked) {
      if (e.empty()) e = exec("COMMIT");
      else exec("ROLLBACK");
    }
    return e;
  }

 private:
  std::string insert_statement(std::span<const Row> rows) {
    std::string sql = "INSERT INTO requests (";
    bool first = true;
    for (const auto& c : columns()) {
      sql += (first ? "" : ", ") + std::string(c.name);
      first = false;
    }
    sql += ") VALUES ";
    std::vector<Value> params;
    params.reserve(rows.size() * columns().size());
    for (const Row& r : rows) {
      sql += params.empty() ? "(" : ", (";
      first = true;
      for (const auto& c : columns()) {
        params.push_back(value_of(r, c));
        sql += (first ? "" : ", ") + placeholder(Dialect::postgres, static_cast<int>(params.size()));
        first = false;
      }
      sql += ")";
    }
    return query(sql, params, {});
  }

  std::string last_error() const { return scrub_password(one_line(PQerrorMessage(conn_)), url_); }

  // Sends what is buffered, then collects every result before the deadline.
  std::string finish(const RowFn& on_row) {
    const auto deadline = Clock::now() + timeout_ + kClientMargin;
    for (int rc; (rc = PQflush(conn_)) != 0;) {
      if (rc < 0) return last_error();
      if (!wait_socket(PQsocket(conn_), POLLIN | POLLOUT, deadline)) return "timed out sending a statement";
      if (!PQconsumeInput(conn_)) return last_error();
    }
    std::string error;
    std::vector<Value> row;
    for (;;) {
      while (PQisBusy(conn_)) {
        if (!wait_socket(PQsocket(conn_), POLLIN, deadline)) return "timed out waiting for the database";
        if (!PQconsumeInput(conn_)) return last_error();
      }
      PGresult* res = PQgetResult(conn_);
      if (!res) break;
      const auto status = PQresultStatus(res);
      if (status == PGRES_TUPLES_OK && on_row) {
        const int rows = PQntuples(res), cols = PQnfields(res);
        for (int r = 0; r < rows; ++r) {
          row.assign(static_cast<std::size_t>(cols), Value{});
          for (int c = 0; c < cols; ++c) {
            if (!PQgetisnull(res, r, c)) {
              row[static_cast<std::size_t>(c)] = from_text(PQgetvalue(res, r, c), PQgetlength(res, r, c), PQftype(res, c));
            }
          }
          on_row(row);
        }
      } else if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK && error.empty()) {
        error = scrub_password(one_line(PQresultErrorMessage(res)), url_);
        if (error.empty()) error = PQresStatus(status);
      }
      PQclear(res);
    }
    return error;
  }

  PGconn* conn_;
  std::chrono::milliseconds timeout_;
  std::string url_;  // only to scrub its password from error messages
};

}  // namespace

std::unique_ptr<Connection> open_postgres(const std::string& url, std::chrono::milliseconds connect_timeout,
                                          std::chrono::milliseconds statement_timeout, std::string& error) {
  // expand_dbname: the URL is read as a whole connection string.
  const char* keys[] = {"dbname", "fallback_application_name", nullptr};
  const char* values[] = {url.c_str(), "sluice", nullptr};
  PGconn* conn = PQconnectStartParams(keys, values, 1);
  if (!conn) {
    error = "out of memory";
    return nullptr;
  }
  const auto deadline = Clock::now() + connect_timeout;
  auto poll_status = PGRES_POLLING_WRITING;
  while (PQstatus(conn) != CONNECTION_BAD && poll_status != PGRES_POLLING_OK && poll_status != PGRES_POLLING_FAILED) {
    const short events = poll_status == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    if (!wait_socket(PQsocket(conn), events, deadline)) {
      error = "connect timed out after " + std::to_string(connect_timeout.count()) + " ms";
      PQfinish(conn);
      return nullptr;
    }
    poll_status = PQconnectPoll(conn);
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    error = scrub_password(one_line(PQerrorMessage(conn)), url);
    PQfinish(conn);
    return nullptr;
  }
  PQsetnonblocking(conn, 1);
  auto c = std::make_unique<PgConnection>(conn, statement_timeout, url);
  if (auto e = c->exec("SET statement_timeout = " + std::to_string(statement_timeout.count())); !e.empty()) {
    error = e;
    return nullptr;
  }
  return c;
}

}  // namespace sluice::history
