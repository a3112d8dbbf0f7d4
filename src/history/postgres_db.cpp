// PostgreSQL over libpq's asynchronous API, so every connect and statement has a client
// side deadline: a server that hangs (or a network that drops packets silently) costs
// the writer at most that long, never forever.
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <type_traits>

#include "history/db.hpp"

namespace sluice::history {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kClientMargin = std::chrono::seconds(5);  // beyond statement_timeout
constexpr Oid kBoolOid = 16, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kTextOid = 25, kFloat4Oid = 700,
              kFloat8Oid = 701, kNumericOid = 1700;

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
    content_ = false;
    if (!PQsendQuery(conn_, sql.c_str())) return last_error();
    return finish({});
  }

  std::string exec_long(const std::string& sql, std::chrono::milliseconds limit) override {
    const auto usual = timeout_;
    timeout_ = std::max(limit, usual);  // finish() waits timeout_ plus its margin
    auto e = exec(sql);
    timeout_ = usual;
    return e;
  }

  std::string query(const std::string& sql, const std::vector<Value>& params, const RowFn& on_row) override {
    content_ = false;
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

  // One COPY ... FROM STDIN per batch: a single statement, atomic by itself, that the
  // server neither parses nor plans per row (a multi-row INSERT with 33 parameters a row
  // cost the server 4x more per row, in parsing, analysis and planning). In the binary
  // format when the table's columns have the types of migration 1 (checked once per
  // connection), which the server reads cheapest; else in the text format, read by each
  // column's input function like the INSERT's parameters, so that a column whose type a
  // newer migration changed (a database "used as it is") still takes the rows.
  std::string insert(std::span<const Row> rows) override {
    content_ = false;
    if (rows.empty()) return "";
    const auto deadline = Clock::now() + timeout_ + kClientMargin;
    if (format_ == Format::unknown) {
      if (auto e = check_types(); !e.empty()) return e;
    }
    const bool binary = format_ == Format::binary;
    if (!PQsendQuery(conn_, copy_sql(binary).c_str())) return last_error();
    if (auto e = flush(deadline); !e.empty()) return e;
    if (auto e = wait_ready(deadline); !e.empty()) return e;
    PGresult* res = PQgetResult(conn_);
    const auto status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (status != PGRES_COPY_IN) {
      note_refusal(res);
      std::string e = res ? scrub_password(one_line(PQresultErrorMessage(res)), url_) : last_error();
      if (e.empty()) e = PQresStatus(status);
      PQclear(res);
      if (auto rest = finish({}); e.empty()) e = rest;
      return e;
    }
    PQclear(res);
    buf_.clear();
    // Binary: a signature, flags and an empty extension; each row its field count and
    // (length, bytes) per field; -1 at the end.
    if (binary) buf_.append("PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19);
    for (const Row& r : rows) {
      if (binary) append_binary_row(buf_, r);
      else append_copy_row(buf_, r);
      if (buf_.size() >= kCopyChunk) {
        if (auto e = put(buf_, deadline); !e.empty()) return e;
        buf_.clear();
      }
    }
    if (binary) put_be<std::int16_t>(buf_, -1);
    if (!buf_.empty()) {
      if (auto e = put(buf_, deadline); !e.empty()) return e;
    }
    if (buf_.capacity() > 4 * kCopyChunk) std::string().swap(buf_);  // after a backlog: give it back
    for (int rc; (rc = PQputCopyEnd(conn_, nullptr)) != 1;) {
      if (rc < 0) return last_error();
      if (!wait_socket(PQsocket(conn_), POLLOUT, deadline)) return "timed out sending rows";
      if (PQflush(conn_) < 0) return last_error();
    }
    return finish({});  // the COPY's own result: COMMAND_OK, or the error of a refused row
  }

 private:
  static constexpr std::size_t kCopyChunk = 256 * 1024;  // rows handed to libpq at a time

  enum class Format { unknown, binary, text };

  static const std::string& copy_sql(bool binary) {
    static const std::string text = [] {
      std::string s = "COPY requests (";
      bool first = true;
      for (const auto& c : columns()) {
        if (!first) s += ", ";
        s += c.name;
        first = false;
      }
      return s + ") FROM STDIN";
    }();
    static const std::string bin = text + " (FORMAT binary)";
    return binary ? bin : text;
  }

  // The type migration 1 gives each column (what the binary format must match exactly).
  static const std::vector<Oid>& expected_types() {
    static const std::vector<Oid> types = [] {
      std::vector<Oid> t;
      for (const auto& c : columns()) {
        if (c.name == "status" || c.name == "upstream_status") t.push_back(kInt4Oid);
        else if (std::holds_alternative<std::int64_t Row::*>(c.member)) t.push_back(kInt8Oid);
        else if (std::holds_alternative<double Row::*>(c.member)) t.push_back(kFloat8Oid);
        else if (std::holds_alternative<std::string Row::*>(c.member)) t.push_back(kTextOid);
        else t.push_back(kBoolOid);
      }
      return t;
    }();
    return types;
  }

  // Binary if every column has the type we encode; text otherwise.
  std::string check_types() {
    std::vector<std::pair<std::string, std::int64_t>> found;
    auto e = query(
        "SELECT attname::text, atttypid::bigint FROM pg_attribute WHERE attrelid = 'requests'::regclass "
        "AND attnum > 0 AND NOT attisdropped",
        {}, [&](std::vector<Value>& row) {
          const auto* name = std::get_if<std::string>(&row[0]);
          const auto* type = std::get_if<std::int64_t>(&row[1]);
          if (name && type) found.emplace_back(*name, *type);
        });
    if (!e.empty()) return e;
    bool all = true;
    const auto cols = columns();
    for (std::size_t i = 0; i < cols.size() && all; ++i) {
      bool same = false;
      for (const auto& [name, type] : found) same |= name == cols[i].name && type == expected_types()[i];
      all = same;
    }
    format_ = all ? Format::binary : Format::text;
    return "";
  }

  template <class T>
  static void put_be(std::string& out, T v) {
    using U = std::make_unsigned_t<T>;
    auto u = static_cast<U>(v);
    char b[sizeof(T)];
    for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i, u = static_cast<U>(u >> 8)) b[i] = static_cast<char>(u & 0xFF);
    out.append(b, sizeof(T));
  }

  static void append_binary_row(std::string& out, const Row& r) {
    const auto& types = expected_types();
    put_be<std::int16_t>(out, static_cast<std::int16_t>(types.size()));
    std::size_t i = 0;
    for_each_value(r, [&](const Column&, const auto& v) {
      using T = std::decay_t<decltype(v)>;
      const Oid type = types[i++];
      if constexpr (std::is_same_v<T, std::monostate>) {
        put_be<std::int32_t>(out, -1);
      } else if constexpr (std::is_same_v<T, std::string_view>) {
        put_be<std::int32_t>(out, static_cast<std::int32_t>(v.size()));
        out.append(v.data(), v.size());
      } else if constexpr (std::is_same_v<T, bool>) {
        put_be<std::int32_t>(out, 1);
        out += v ? '\1' : '\0';
      } else if constexpr (std::is_same_v<T, double>) {
        put_be<std::int32_t>(out, 8);
        put_be<std::uint64_t>(out, std::bit_cast<std::uint64_t>(v));
      } else if (type == kInt4Oid) {  // status codes: within int4 by far
        put_be<std::int32_t>(out, 4);
        put_be<std::int32_t>(out, static_cast<std::int32_t>(v));
      } else {
        put_be<std::int32_t>(out, 8);
        put_be<std::int64_t>(out, v);
      }
    });
  }

  // COPY's text format: tab between columns, \N for NULL, backslash escapes for the four
  // bytes that would end a column or a row (the text is valid UTF-8 without NUL already).
  static void append_copy_text(std::string& out, std::string_view s) {
    std::size_t from = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c != '\\' && c != '\t' && c != '\n' && c != '\r') continue;
      out.append(s.data() + from, i - from);
      out += '\\';
      out += c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : '\\';
      from = i + 1;
    }
    out.append(s.data() + from, s.size() - from);
  }

  static void append_copy_row(std::string& out, const Row& r) {
    char sep = 0;
    for_each_value(r, [&](const Column&, const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if (sep) out += sep;
      sep = '\t';
      if constexpr (std::is_same_v<T, std::monostate>) {
        out += "\\N";
      } else if constexpr (std::is_same_v<T, std::string_view>) {
        append_copy_text(out, v);
      } else if constexpr (std::is_same_v<T, bool>) {
        out += v ? 't' : 'f';
      } else {  // int64, or a finite double: the shortest text that reads back as the same value
        char num[32];
        const auto res = std::to_chars(num, num + sizeof num, v);
        out.append(num, res.ptr);
      }
    });
    out += '\n';
  }

  std::string flush(Clock::time_point deadline) {
    for (int rc; (rc = PQflush(conn_)) != 0;) {
      if (rc < 0) return last_error();
      if (!wait_socket(PQsocket(conn_), POLLIN | POLLOUT, deadline)) return "timed out sending a statement";
      if (!PQconsumeInput(conn_)) return last_error();
    }
    return "";
  }

  // Until a result can be read without blocking.
  std::string wait_ready(Clock::time_point deadline) {
    while (PQisBusy(conn_)) {
      if (!wait_socket(PQsocket(conn_), POLLIN, deadline)) return "timed out waiting for the database";
      if (!PQconsumeInput(conn_)) return last_error();
    }
    return "";
  }

  // Copy data into libpq's buffer (which grows as needed), sending what the socket takes.
  std::string put(const std::string& data, Clock::time_point deadline) {
    for (int rc; (rc = PQputCopyData(conn_, data.data(), static_cast<int>(data.size()))) != 1;) {
      if (rc < 0) return last_error();
      if (!wait_socket(PQsocket(conn_), POLLOUT, deadline)) return "timed out sending rows";
      if (PQflush(conn_) < 0) return last_error();
    }
    if (PQflush(conn_) < 0) return last_error();  // 1 (more left) is fine: the next put or the end sends it
    return "";
  }

  std::string last_error() const { return scrub_password(one_line(PQerrorMessage(conn_)), url_); }

  bool refused_for_content() const noexcept override { return content_; }

  // An error result: data exception (22xxx) or integrity constraint violation (23xxx)?
  void note_refusal(const PGresult* res) {
    const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    content_ = state && state[0] == '2' && (state[1] == '2' || state[1] == '3');
  }

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
        note_refusal(res);
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
  std::string buf_;  // COPY data being built (kept: its capacity serves the next batch)
  Format format_ = Format::unknown;  // of this connection's COPY, known at its first batch
  bool content_ = false;  // refused_for_content() of the last statement
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
