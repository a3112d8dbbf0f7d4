#include "history/history.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "common/reason.hpp"
#include "common/thread_name.hpp"
#include "common/text.hpp"
#include "history/db.hpp"

namespace sluice::history {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kWriteStatementTimeout = std::chrono::seconds(10);
constexpr auto kReadStatementTimeout = std::chrono::seconds(30);
constexpr auto kRetentionEvery = std::chrono::hours(1);
constexpr std::int64_t kRetentionChunk = 10'000;  // rows deleted by one statement
constexpr auto kFinalFlush = std::chrono::seconds(2);
// A batch the database refuses this often for its content (Connection::refused_for_content,
// each time on a fresh connection) is dropped and counted, so that it cannot block the
// history forever. Other failures never drop a batch.
constexpr int kMaxBatchFailures = 5;

// True when `s` is plain ASCII without NUL: nearly always, and then copied as it is.
// Eight bytes at a time: a byte >= 0x80 sets its high bit; a zero byte (when no high bit is
// set) shows in (w - 0x01..01) & ~w.
bool plain_ascii(std::string_view s) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const char* p = s.data();
  std::size_t n = s.size();
  std::uint64_t bad = 0;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    bad |= (w | ((w - kOnes) & ~w)) & kHigh;
  }
  for (; n > 0; ++p, --n) bad |= static_cast<unsigned char>(*p) - 1u >= 0x7Fu;
  return bad == 0;
}

// Invalid UTF-8 and NUL bytes (possible in a client's path) would make PostgreSQL refuse
// the whole batch and make the JSON answers invalid: each bad byte becomes U+FFFD. Assigns
// into `out`, whose capacity a reused row keeps.
void assign_clean(std::string& out, std::string_view s) {
  if (plain_ascii(s)) {
    // clear + append: no aliasing check (s never points into out), and nothing to copy
    // for the many empty values.
    out.clear();
    if (!s.empty()) out.append(s.data(), s.size());
    return;
  }
  out.clear();
  out.reserve(s.size());
  append_clean_utf8(out, s);
}

double finite_or_null(double v) { return std::isfinite(v) ? v : -1; }

// Every field of `row` is assigned: rows are reused (their strings keep their capacity).
void fill_row(Row& row, const telemetry::RequestRecord& r) {
  row.unix_ms = r.unix_ms;
  assign_clean(row.request_id, r.request_id);
  assign_clean(row.method, r.method);
  assign_clean(row.path, r.path);
  assign_clean(row.key_name, r.key_name);
  assign_clean(row.tenant, r.tenant);
  assign_clean(row.tier, r.tier);
  assign_clean(row.alias, r.alias);
  assign_clean(row.model, r.model);
  assign_clean(row.provider, r.provider);
  assign_clean(row.backend, r.backend);
  row.status = r.status;
  const std::string_view reason = reason_code(r.reason);
  row.reason.assign(reason.data(), reason.size());
  assign_clean(row.error, r.error);
  row.upstream_status = r.upstream_status > 0 ? r.upstream_status : -1;
  row.stream = r.stream;
  row.client_cancelled = r.client_cancelled;
  row.wall_ms = std::max(0.0, finite_or_null(r.wall_ms));
  row.ttft_ms = finite_or_null(r.ttft_ms);
  row.tokens_per_s = finite_or_null(r.tokens_per_s);
  row.prompt_tokens = r.prompt_tokens;
  row.completion_tokens = r.completion_tokens;
  assign_clean(row.instance, r.instance);
  assign_clean(row.limiter, r.limiter);
  assign_clean(row.priority, r.priority);
  row.queue_ms = finite_or_null(r.queue_ms);
  row.reserved_tokens = r.reserved_tokens;
  row.temperature = finite_or_null(r.temperature);
  row.top_p = finite_or_null(r.top_p);
  row.max_tokens = r.max_tokens;
  row.num_ctx = r.num_ctx;
  row.num_gpu = r.num_gpu;
  row.num_batch = r.num_batch;
  assign_clean(row.cache, r.cache);
  row.saved_tokens = r.saved_tokens;
  assign_clean(row.guard, r.guard);
  assign_clean(row.client, r.client);
}

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// A value as JSON; booleans are stored as 0/1 and shown as false/true.
void append_value(std::string& out, const Value& v, bool boolean) {
  if (auto* n = std::get_if<std::int64_t>(&v)) {
    if (boolean) out += *n ? "true" : "false";
    else append_int(out, *n);
  } else if (auto* d = std::get_if<double>(&v)) {
    append_number(out, *d);
  } else if (auto* s = std::get_if<std::string>(&v)) {
    append_json_string(out, *s);
  } else {
    out += "null";
  }
}

bool is_bool_column(std::string_view name) {
  for (const auto& c : columns()) {
    if (c.name == name) return std::holds_alternative<bool Row::*>(c.member);
  }
  return false;
}

// WHERE clauses with their parameters, numbered in order for either dialect.
struct Where {
  Dialect dialect;
  std::string sql;
  std::vector<Value> params;
  void add(std::string_view column, std::string_view op, Value v) {
    params.push_back(std::move(v));
    sql += sql.empty() ? " WHERE " : " AND ";
    sql += std::string(column) + " " + std::string(op) + " " + placeholder(dialect, static_cast<int>(params.size()));
  }
  void add_filters(const std::string& model, const std::string& key, const std::string& tenant) {
    if (!model.empty()) add("model", "=", model);
    if (!key.empty()) add("key_name", "=", key);
    if (!tenant.empty()) add("tenant", "=", tenant);
  }
  // A number we computed, not client text: written inline.
  static std::string limit(std::int64_t n) { return " LIMIT " + std::to_string(n); }
};

double as_double(const Value& v, double null_value = -1) {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* n = std::get_if<std::int64_t>(&v)) return static_cast<double>(*n);
  return null_value;
}

// Nearest rank: the smallest value with at least p% of the values at or below it.
double percentile(const std::vector<double>& sorted, int p) {
  const std::size_t rank = (static_cast<std::size_t>(p) * sorted.size() + 99) / 100;
  return sorted[std::max<std::size_t>(rank, 1) - 1];
}

void append_distribution(std::string& out, std::string_view name, std::vector<double>& values) {
  out += ",\"";
  out += name;
  out += "\":";
  if (values.empty()) {
    out += "null";
    return;
  }
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  out += "{\"mean\":";
  append_number(out, std::round(sum / static_cast<double>(values.size()) * 1000) / 1000);
  out += ",\"p50\":";
  append_number(out, percentile(values, 50));
  out += ",\"p95\":";
  append_number(out, percentile(values, 95));
  out += '}';
}

}  // namespace

struct History::Impl {
  config::HistorySettings settings;

  mutable std::mutex mu;
  std::condition_variable wake;      // the writer: rows, flush requests, stop
  std::condition_variable progress;  // flush(): rows done
  // Rows wait in chunks of at most batch_rows, oldest first; a chunk is the batch the
  // writer takes whole (the front one: full, or older than flush_interval, or flushed).
  // Only the last chunk is ever partial. Written chunks come back as spares, and their
  // rows are filled again in place: in steady state queuing a row allocates nothing.
  struct Chunk {
    std::vector<Row> rows;       // rows[0, n) are queued
    std::size_t n = 0;
    Clock::time_point first_at;  // when rows[0] arrived: the oldest of the chunk
  };
  static constexpr std::size_t kSpareChunks = 2;
  std::deque<Chunk> queue;
  std::vector<Chunk> spare;
  std::size_t queued_rows = 0;  // in `queue`
  std::size_t in_flight = 0;  // rows of the batch being written
  std::uint64_t accepted = 0, done = 0;  // rows ever queued / written or given up
  int flush_waiters = 0;
  bool stopping = false;
  Status counters;  // queued is computed in status()
  std::thread writer;

  mutable std::mutex read_mu;  // one query at a time on the read connection
  mutable std::unique_ptr<Connection> reader;

  bool postgres() const { return settings.backend == config::HistoryBackend::postgres; }

  std::unique_ptr<Connection> open(bool read_only, std::string& error) const {
    if (!postgres()) return open_sqlite(settings.sqlite_path, read_only, error);
    return open_postgres(settings.url, settings.connect_timeout, read_only ? kReadStatementTimeout : kWriteStatementTimeout,
                         error);
  }

  void failed(std::string error) {
    std::lock_guard lk(mu);
    counters.up = false;
    counters.last_error = std::move(error);
  }

  // The batch is done (written or given up): its chunk becomes a spare. Under `mu`.
  void recycle(Chunk& batch) {
    in_flight = 0;
    batch.n = 0;
    if (spare.size() < kSpareChunks) spare.push_back(std::move(batch));
    batch = Chunk{};
  }

  static constexpr std::size_t kReserveRows = 1024;  // a new chunk's room, at most
  bool queue_row(const telemetry::RequestRecord& r);
  void run();
  Result read(const std::function<std::string(Connection&, std::string&)>& fn) const;
};

void History::Impl::run() {
  std::unique_ptr<Connection> conn;
  Chunk batch;  // batch.n == 0: none taken
  int batch_failures = 0;
  bool connected_before = false;
  Clock::time_point next_connect{}, next_retention{};
  for (;;) {
    {
      std::unique_lock lk(mu);
      for (;;) {
        if (stopping) return;
        const auto now = Clock::now();
        if (batch.n == 0 && !queue.empty() &&
            (queue.front().n >= settings.batch_rows || flush_waiters > 0 ||
             queue.front().first_at + settings.flush_interval <= now)) {
          batch = std::move(queue.front());
          queue.pop_front();
          queued_rows -= batch.n;
          in_flight = batch.n;
        }
        const bool retention_due = settings.retention_days > 0 && now >= next_retention;
        if (!conn ? now >= next_connect : batch.n > 0 || retention_due) break;
        auto until = Clock::time_point::max();
        if (!conn) until = next_connect;
        else if (settings.retention_days > 0) until = next_retention;
        if (batch.n == 0 && !queue.empty()) until = std::min(until, queue.front().first_at + settings.flush_interval);
        if (until == Clock::time_point::max()) wake.wait(lk);
        else wake.wait_until(lk, until);
      }
    }
    if (!conn) {  // (re)connect; migrations run on every connect, they are idempotent
      std::string error;
      int version = 0;
      conn = open(false, error);
      if (conn) error = migrate(*conn, version);
      if (!error.empty()) {
        conn.reset();
        next_connect = Clock::now() + settings.retry_interval;
        failed(std::move(error));
        continue;
      }
      std::lock_guard lk(mu);
      counters.up = true;
      counters.schema_version = version;
      if (connected_before) ++counters.reconnects;
      connected_before = true;
      continue;
    }
    if (batch.n > 0) {
      if (auto error = conn->insert(std::span<const Row>(batch.rows.data(), batch.n)); !error.empty()) {
        // Only a refusal of the rows themselves counts against the batch: a database that
        // is down, full, slow or locked gets the same batch until it takes it (new rows
        // wait in the bounded queue meanwhile).
        const bool content = conn->refused_for_content();
        conn.reset();  // a failed connection is replaced, the same batch retried
        next_connect = Clock::now() + settings.retry_interval;
        std::lock_guard lk(mu);
        ++counters.write_errors;
        counters.up = false;
        counters.last_error = std::move(error);
        if (content && ++batch_failures >= kMaxBatchFailures) {
          counters.last_error = "dropped a batch of " + std::to_string(batch.n) + " rows after " +
                                std::to_string(batch_failures) + " refusals of its rows: " + counters.last_error;
          counters.dropped += batch.n;
          done += batch.n;
          recycle(batch);
          batch_failures = 0;
          progress.notify_all();
        }
        continue;
      }
      std::lock_guard lk(mu);
      counters.up = true;
      counters.written += batch.n;
      ++counters.batches;
      done += batch.n;
      recycle(batch);
      batch_failures = 0;
      progress.notify_all();
    }
    if (settings.retention_days > 0 && Clock::now() >= next_retention) {
      next_retention = Clock::now() + kRetentionEvery;
      const std::int64_t cutoff =
          std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count() -
          std::int64_t{settings.retention_days} * 86'400'000;
      // A chunk at a time, the writer's batches in between: a backlog of old rows (when
      // retention is first turned on) never holds the writer longer than one chunk, nor
      // runs into the write's statement timeout.
      std::int64_t deleted = 0;
      if (auto error = conn->query("DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE unix_ms < " +
                                       placeholder(conn->dialect(), 1) + " LIMIT " + std::to_string(kRetentionChunk) +
                                       ") RETURNING id",
                                   {cutoff}, [&](std::vector<Value>&) { ++deleted; });
          !error.empty()) {
        conn.reset();
        next_connect = Clock::now() + settings.retry_interval;
        failed("retention: " + error);
      } else if (deleted == kRetentionChunk) {
        next_retention = Clock::now();  // more to delete: the next chunk after the next batch
      }
    }
  }
}

Result History::Impl::read(const std::function<std::string(Connection&, std::string&)>& fn) const {
  Result result;
  std::lock_guard lk(read_mu);
  const bool reused = reader != nullptr;
  if (!reader) reader = open(true, result.error);
  if (reader) result.error = fn(*reader, result.body);
  if (!result.error.empty() && reused) {  // it may have died since (a database restart): once more
    result.error.clear();
    result.body.clear();
    reader = open(true, result.error);
    if (reader) result.error = fn(*reader, result.body);
  }
  if (!result.error.empty()) {
    reader.reset();  // the next query opens a fresh one
    result.body.clear();
    result.unavailable = true;
    result.error = "history database unavailable: " + result.error;
  }
  return result;
}

std::unique_ptr<History> History::create(const config::HistorySettings& settings, std::string* error) {
  auto fail = [&](std::string e) -> std::unique_ptr<History> {
    if (error) *error = std::move(e);
    return nullptr;
  };
  if (settings.backend == config::HistoryBackend::none) return nullptr;
  if (settings.batch_rows == 0 || settings.queue_size == 0) return fail("history: batch_rows and queue_size must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->settings = settings;
  impl->settings.retry_interval = std::max(settings.retry_interval, milliseconds(1));
  auto& target = impl->counters.target;
  if (settings.backend == config::HistoryBackend::postgres) {
    target = mask_postgres_url(settings.url);
    if (!settings.url.starts_with("postgres://") && !settings.url.starts_with("postgresql://")) {
      return fail("history: expected a postgres:// or postgresql:// URL");
    }
  } else {
    if (settings.sqlite_path.empty()) return fail("history: the SQLite path is empty");
    target = settings.sqlite_path;
  }
  impl->counters.backend = std::string(config::to_string(settings.backend));
  std::unique_ptr<History> h(new History(std::move(impl)));
  h->impl_->writer = std::thread([i = h->impl_.get()] {
    name_this_thread("sluice-history");
    i->run();
  });
  return h;
}

History::History(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

History::~History() {
  flush(kFinalFlush);
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->writer.join();
}

// Queues one row; true when the writer needs to hear of it (its interval starts with the
// first row, or a batch is full). Under `mu`.
bool History::Impl::queue_row(const telemetry::RequestRecord& r) {
  if (queued_rows + in_flight >= settings.queue_size) {
    ++counters.dropped;
    return false;
  }
  if (queue.empty() || queue.back().n >= settings.batch_rows) {
    Chunk chunk;
    if (!spare.empty()) {
      chunk = std::move(spare.back());
      spare.pop_back();
    } else {
      // Room for the batch at once: growing would move every row already in it.
      chunk.rows.reserve(std::min<std::size_t>(settings.batch_rows, kReserveRows));
    }
    chunk.first_at = Clock::now();
    queue.push_back(std::move(chunk));
  }
  auto& chunk = queue.back();
  if (chunk.n == chunk.rows.size()) chunk.rows.emplace_back();
  // Copied in place, into a row whose strings have room already (a spare's): a few
  // hundred instructions under the lock, no allocation.
  fill_row(chunk.rows[chunk.n++], r);
  ++queued_rows;
  ++accepted;
  return queued_rows == 1 || chunk.n == settings.batch_rows;
}

void History::consume(const telemetry::RequestRecord& r) { consume_batch(std::span(&r, 1), {}); }

void History::consume_batch(std::span<const telemetry::RequestRecord> records, std::span<const std::string_view>) {
  auto& i = *impl_;
  bool wake = false;
  {
    std::lock_guard lk(i.mu);
    for (const auto& r : records) wake |= i.queue_row(r);
  }
  if (wake) i.wake.notify_one();
}

bool History::flush(milliseconds max_wait) {
  auto& i = *impl_;
  std::unique_lock lk(i.mu);
  const std::uint64_t target = i.accepted;
  if (i.done >= target) return true;
  ++i.flush_waiters;
  i.wake.notify_one();
  const bool ok = i.progress.wait_for(lk, max_wait, [&] { return i.done >= target; });
  --i.flush_waiters;
  return ok;
}

Status History::status() const {
  std::lock_guard lk(impl_->mu);
  Status s = impl_->counters;
  s.queued = impl_->queued_rows + impl_->in_flight;
  return s;
}

void append_json(std::string& out, const Status& s) {
  out += "{\"backend\":";
  append_json_string(out, s.backend);
  out += ",\"target\":";
  append_json_string(out, s.target);
  out += s.up ? ",\"up\":true" : ",\"up\":false";
  const std::pair<std::string_view, std::uint64_t> counts[] = {
      {"queued", s.queued},   {"written", s.written},     {"dropped", s.dropped},
      {"write_errors", s.write_errors}, {"batches", s.batches}, {"reconnects", s.reconnects}};
  for (const auto& [name, n] : counts) {
    out += ",\"";
    out += name;
    out += "\":";
    append_int(out, static_cast<std::int64_t>(n));
  }
  out += ",\"last_error\":";
  append_json_string(out, s.last_error);
  out += ",\"schema_version\":";
  append_int(out, s.schema_version);
  out += '}';
}

Result History::list(const ListQuery& q) const {
  if (q.limit < 1 || q.limit > 1000) return {"", "limit: expected an integer from 1 to 1000", false};
  return impl_->read([&](Connection& c, std::string& body) {
    Where w{c.dialect(), {}, {}};
    w.add_filters(q.model, q.key, q.tenant);
    if (q.status) w.add("status", "=", std::int64_t{q.status});
    if (q.status_class) {
      w.add("status", ">=", std::int64_t{q.status_class * 100});
      w.add("status", "<", std::int64_t{q.status_class * 100 + 100});
    }
    if (q.since_ms) w.add("unix_ms", ">=", q.since_ms);
    if (q.until_ms) w.add("unix_ms", "<", q.until_ms);
    if (q.before_id) w.add("id", "<", q.before_id);
    std::string sql = "SELECT id";
    for (const auto& col : columns()) sql += ", " + std::string(col.name);
    sql += " FROM requests" + w.sql + " ORDER BY id DESC" + w.limit(q.limit + 1);

    body = "{\"object\":\"list\",\"data\":[";
    int rows = 0;
    std::int64_t last_id = 0;
    const auto cols = columns();
    auto error = c.query(sql, w.params, [&](std::vector<Value>& row) {
      if (++rows > q.limit) return;  // the extra row only says there is more
      if (rows > 1) body += ',';
      last_id = std::get_if<std::int64_t>(&row[0]) ? std::get<std::int64_t>(row[0]) : 0;
      body += "{\"id\":";
      append_value(body, row[0], false);
      if (auto* ms = std::get_if<std::int64_t>(&row[1])) {
        body += ",\"time\":";
        body += '"';
        append_iso8601(body, *ms);
        body += '"';
      }
      for (std::size_t k = 0; k < cols.size(); ++k) {
        body += ",\"";
        body += cols[k].name;
        body += "\":";
        append_value(body, row[k + 1], std::holds_alternative<bool Row::*>(cols[k].member));
      }
      body += '}';
    });
    body += "],\"has_more\":";
    if (rows > q.limit) {
      body += "true,\"next_before_id\":";
      append_int(body, last_id);
    } else {
      body += "false,\"next_before_id\":null";
    }
    body += '}';
    return error;
  });
}

Result History::stats(const StatsQuery& q) const {
  const std::string_view group = q.group_by.empty() ? std::string_view{} : group_column(q.group_by);
  if (!q.group_by.empty() && group.empty()) {
    return {"", "group_by: expected one of " + std::string(group_by_names()), false};
  }
  if (q.since_ms >= q.until_ms) return {"", "since: must be before until", false};
  return impl_->read([&](Connection& c, std::string& body) {
    Where w{c.dialect(), {}, {}};
    w.add("unix_ms", ">=", q.since_ms);
    w.add("unix_ms", "<", q.until_ms);
    w.add_filters(q.model, q.key, q.tenant);
    // Percentiles need every value: rows are read (newest first, at most max_rows) and
    // aggregated here, the same way for both databases. PostgreSQL's time index is a
    // BRIN index (migration 2): it finds the window's rows, but not in time order, so they
    // are read first in no order (all a window of at most max_rows rows needs, without a
    // sort); only a window with more rows is read again, the newest written first: by id,
    // whose index gives that order without sorting the window.
    const std::string select = "SELECT " + (group.empty() ? std::string("NULL") : std::string(group)) +
                               ", status, wall_ms, ttft_ms, tokens_per_s, prompt_tokens, completion_tokens FROM requests" +
                               w.sql;
    const std::string limit = w.limit(static_cast<std::int64_t>(q.max_rows) + 1);
    struct Group {
      std::uint64_t count = 0, errors = 0, tps_count = 0;
      std::int64_t prompt_tokens = 0, completion_tokens = 0;
      double tps_sum = 0;
      std::vector<double> wall, ttft;
    };
    std::map<Value, Group> groups;
    std::size_t rows = 0;
    const auto aggregate = [&](std::vector<Value>& row) {
      if (++rows > q.max_rows) return;
      auto& g = groups[std::move(row[0])];
      ++g.count;
      if (as_double(row[1]) >= 400) ++g.errors;
      g.wall.push_back(as_double(row[2], 0));
      if (const double ttft = as_double(row[3]); ttft >= 0) g.ttft.push_back(ttft);
      if (const double tps = as_double(row[4]); tps >= 0) g.tps_sum += tps, ++g.tps_count;
      if (auto* n = std::get_if<std::int64_t>(&row[5])) g.prompt_tokens += *n;
      if (auto* n = std::get_if<std::int64_t>(&row[6])) g.completion_tokens += *n;
    };
    std::string error;
    if (c.dialect() == Dialect::postgres) {
      error = c.query(select + limit, w.params, aggregate);
      if (error.empty() && rows > q.max_rows) {  // more than max_rows: the newest of them
        groups.clear();
        rows = 0;
        error = c.query(select + " ORDER BY id DESC" + limit, w.params, aggregate);
      }
    } else {
      error = c.query(select + " ORDER BY unix_ms DESC" + limit, w.params, aggregate);
    }
    if (!error.empty()) return error;
    std::vector<std::pair<const Value*, Group*>> order;
    for (auto& [key, g] : groups) order.emplace_back(&key, &g);
    std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.second->count > b.second->count; });

    body = "{\"window\":{\"since_ms\":";
    append_int(body, q.since_ms);
    body += ",\"until_ms\":";
    append_int(body, q.until_ms);
    body += "},\"group_by\":";
    if (q.group_by.empty()) body += "null";
    else append_json_string(body, q.group_by);
    body += ",\"rows\":";
    append_int(body, static_cast<std::int64_t>(std::min(rows, q.max_rows)));
    body += rows > q.max_rows ? ",\"truncated\":true" : ",\"truncated\":false";
    body += ",\"groups\":[";
    const bool boolean = is_bool_column(group);
    for (std::size_t k = 0; k < order.size(); ++k) {
      auto& [key, g] = order[k];
      body += k ? ",{\"key\":" : "{\"key\":";
      append_value(body, *key, boolean);
      body += ",\"count\":";
      append_int(body, static_cast<std::int64_t>(g->count));
      body += ",\"errors\":";
      append_int(body, static_cast<std::int64_t>(g->errors));
      append_distribution(body, "wall_ms", g->wall);
      append_distribution(body, "ttft_ms", g->ttft);
      body += ",\"tokens_per_s\":";
      if (g->tps_count == 0) {
        body += "null";
      } else {
        body += "{\"mean\":";
        append_number(body, std::round(g->tps_sum / static_cast<double>(g->tps_count) * 1000) / 1000);
        body += '}';
      }
      body += ",\"prompt_tokens\":";
      append_int(body, g->prompt_tokens);
      body += ",\"completion_tokens\":";
      append_int(body, g->completion_tokens);
      body += '}';
    }
    body += "]}";
    return std::string();
  });
}

Result History::usage(std::span<const UsageQuery> ranges, std::vector<std::vector<Usage>>& out) const {
  out.assign(ranges.size(), {});
  for (const auto& q : ranges) {
    if (q.since_ms >= q.until_ms) return {"", "since: must be before until", false};
  }
  return impl_->read([&](Connection& c, std::string&) {
    out.assign(ranges.size(), {});  // (a retry on a fresh connection starts over)
    const bool pg = c.dialect() == Dialect::postgres;
    // One snapshot for every range (SQLite in WAL mode: a read transaction).
    if (auto e = c.exec(pg ? "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY" : "BEGIN"); !e.empty()) return e;
    auto text = [](Value& v) {
      return std::holds_alternative<std::string>(v) ? std::move(std::get<std::string>(v)) : std::string();
    };
    const std::string sql = usage_sql(c.dialect());
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      auto error = c.query(sql, {ranges[i].since_ms, ranges[i].until_ms}, [&](std::vector<Value>& row) {
        Usage u;
        u.key_name = text(row[0]);
        u.tenant = text(row[1]);
        u.tier = text(row[2]);
        u.alias = text(row[3]);
        if (auto* n = std::get_if<std::int64_t>(&row[4])) u.tokens = *n;
        if (auto* n = std::get_if<std::int64_t>(&row[5])) u.requests = *n;
        out[i].push_back(std::move(u));
      });
      if (!error.empty()) {
        c.exec("ROLLBACK");  // (the connection is dropped after a failure anyway)
        return error;
      }
    }
    return c.exec("COMMIT");
  });
}

}  // namespace sluice::history
