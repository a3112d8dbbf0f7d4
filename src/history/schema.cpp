// The table, its migrations, and what both backends share (columns, URL masking).
#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>

#include "common/text.hpp"
#include "history/db.hpp"

namespace sluice::history {

std::span<const Column> columns() {
  static const std::array<Column, 37> kColumns{{
      {"unix_ms", &Row::unix_ms, false},
      {"request_id", &Row::request_id, false},
      {"method", &Row::method, false},
      {"path", &Row::path, false},
      {"key_name", &Row::key_name, true},
      {"tenant", &Row::tenant, true},
      {"tier", &Row::tier, true},
      {"alias", &Row::alias, true},
      {"model", &Row::model, true},
      {"provider", &Row::provider, true},
      {"backend", &Row::backend, true},
      {"status", &Row::status, false},
      {"reason", &Row::reason, false},
      {"error", &Row::error, true},
      {"upstream_status", &Row::upstream_status, true},
      {"stream", &Row::stream, false},
      {"client_cancelled", &Row::client_cancelled, false},
      {"wall_ms", &Row::wall_ms, false},
      {"ttft_ms", &Row::ttft_ms, true},
      {"tokens_per_s", &Row::tokens_per_s, true},
      {"prompt_tokens", &Row::prompt_tokens, true},
      {"completion_tokens", &Row::completion_tokens, true},
      {"instance", &Row::instance, true},
      {"limiter", &Row::limiter, true},
      {"priority", &Row::priority, true},
      {"queue_ms", &Row::queue_ms, true},
      {"reserved_tokens", &Row::reserved_tokens, true},
      {"temperature", &Row::temperature, true},
      {"top_p", &Row::top_p, true},
      {"max_tokens", &Row::max_tokens, true},
      {"num_ctx", &Row::num_ctx, true},
      {"num_gpu", &Row::num_gpu, true, true},  // -1: every layer on the GPU
      {"num_batch", &Row::num_batch, true},
      {"cache", &Row::cache, true},
      {"saved_tokens", &Row::saved_tokens, true},
      {"guard", &Row::guard, true},
      {"client", &Row::client, true},
  }};
  return kColumns;
}

std::string placeholder(Dialect d, int n) { return (d == Dialect::sqlite ? "?" : "$") + std::to_string(n); }

namespace {

// How long the client waits for one migration (migration 2 builds an index over the whole
// table): the writer waits with it, rows queue meanwhile.
constexpr auto kMigrationLimit = std::chrono::hours(1);

// Migrations are frozen text: a later change is a new migration, never an edit. The
// types are spelled so that SQLite and PostgreSQL read them alike (SQLite maps BIGINT to
// INTEGER, DOUBLE PRECISION to REAL and keeps BOOLEAN as 0/1); only the id differs.
constexpr std::string_view kMigration1 = R"(
CREATE TABLE requests (
  id {id},
  unix_ms BIGINT NOT NULL,
  request_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  key_name TEXT,
  tenant TEXT,
  tier TEXT,
  alias TEXT,
  model TEXT,
  provider TEXT,
  backend TEXT,
  status INTEGER NOT NULL,
  reason TEXT NOT NULL,
  error TEXT,
  upstream_status INTEGER,
  stream BOOLEAN NOT NULL,
  client_cancelled BOOLEAN NOT NULL,
  wall_ms DOUBLE PRECISION NOT NULL,
  ttft_ms DOUBLE PRECISION,
  tokens_per_s DOUBLE PRECISION,
  prompt_tokens BIGINT,
  completion_tokens BIGINT,
  instance TEXT,
  limiter TEXT,
  priority TEXT,
  queue_ms DOUBLE PRECISION,
  reserved_tokens BIGINT,
  temperature DOUBLE PRECISION,
  top_p DOUBLE PRECISION,
  max_tokens BIGINT,
  num_ctx BIGINT,
  num_gpu BIGINT,
  num_batch BIGINT
);
CREATE INDEX requests_unix_ms ON requests (unix_ms);
CREATE INDEX requests_key_name_unix_ms ON requests (key_name, unix_ms);
)";

// Migration 2, PostgreSQL only: what the server spends per row written. The time index
// becomes a BRIN index instead of a b-tree insert per row: rows arrive in time order, so
// each block range's min/max of unix_ms is tight. A row landing in an unsummarized range
// (the table's last one) costs the index only a look-up; autosummarize has autovacuum
// summarize a range once the next one starts. The build summarizes the last range too,
// partial as it is, and every row landing there would then widen its summary (an index
// update, WAL-logged, per row) until it is full: it is desummarized. The statement
// timeout is lifted for this transaction only: building the index on a large table takes
// longer than a write may.
constexpr std::string_view kMigration2Postgres = R"(
SET LOCAL statement_timeout = 0;
DROP INDEX IF EXISTS requests_unix_ms;
CREATE INDEX requests_unix_ms_brin ON requests USING brin (unix_ms) WITH (autosummarize = on);
SELECT brin_desummarize_range('requests_unix_ms_brin',
                              GREATEST(pg_relation_size('requests') / current_setting('block_size')::bigint - 1, 0));
)";

// SQLite has no BRIN: its b-trees stay; version 2 is recorded so that both databases
// count their schema alike.
constexpr std::string_view kMigration2Sqlite = "SELECT 1";

// Migration 3: stored responses of the Responses API (responses.store: database), by
// tenant; expired rows are deleted by the writes (history/responses.cpp).
constexpr std::string_view kMigration3 = R"(
CREATE TABLE responses (
  tenant TEXT NOT NULL,
  id TEXT NOT NULL,
  expires_ms BIGINT NOT NULL,
  response TEXT NOT NULL,
  items TEXT NOT NULL,
  input_from BIGINT NOT NULL,
  input_count BIGINT NOT NULL,
  PRIMARY KEY (tenant, id)
);
CREATE INDEX responses_expires_ms ON responses (expires_ms);
)";

// Migration 4: the response cache's outcome (hit, miss, refresh, bypass, coalesced),
// what a hit saved, and what the guardrails found. Nullable: rows written before stay as
// they are.
constexpr std::string_view kMigration4 = R"(
ALTER TABLE requests ADD COLUMN cache TEXT;
ALTER TABLE requests ADD COLUMN saved_tokens BIGINT;
ALTER TABLE requests ADD COLUMN guard TEXT;
)";

// Migration 5: the fleet's runtime state (history/control_table.cpp): the key store's keys
// by name, found by the HMAC of their secret (never the secret); the backends operators
// drained and the canary weights they set; and one change counter, control_version (one row, bumped by every write in the
// same transaction), which every instance polls.
constexpr std::string_view kMigration5 = R"(
CREATE TABLE api_keys (
  name TEXT PRIMARY KEY,
  digest TEXT NOT NULL UNIQUE,
  masked TEXT NOT NULL,
  tenant TEXT NOT NULL,
  tier TEXT NOT NULL,
  models TEXT NOT NULL,
  role TEXT NOT NULL,
  max_in_flight BIGINT NOT NULL,
  priority TEXT,
  max_priority TEXT,
  guardrails TEXT,
  expires_ms BIGINT,
  enabled INTEGER NOT NULL,
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL,
  created_by TEXT,
  old_digest TEXT,
  old_until_ms BIGINT,
  revision BIGINT NOT NULL,
  last_used_ms BIGINT
);
CREATE TABLE backend_drains (
  name TEXT PRIMARY KEY,
  drained_by TEXT,
  since_ms BIGINT NOT NULL
);
CREATE TABLE canary_weights (
  alias TEXT PRIMARY KEY,
  weight DOUBLE PRECISION NOT NULL,
  set_by TEXT,
  since_ms BIGINT NOT NULL
);
CREATE TABLE control_version (id INTEGER PRIMARY KEY, version BIGINT NOT NULL);
INSERT INTO control_version (id, version) VALUES (1, 0);
)";

// Migration 6: the audit trail (history/audit_table.cpp): every change an operator made
// through /admin/ (who, what, on which thing, from which instance), kept apart from the
// requests so that retention and usage queries never touch it.
constexpr std::string_view kMigration6 = R"(
CREATE TABLE audit (
  unix_ms BIGINT NOT NULL,
  instance TEXT NOT NULL,
  request_id TEXT NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  status INTEGER NOT NULL,
  detail TEXT NOT NULL
);
CREATE INDEX audit_unix_ms ON audit (unix_ms);
)";

// Migration 7: a stored key's own token budget (tokens per period; none when null).
constexpr std::string_view kMigration7 = R"(
ALTER TABLE api_keys ADD COLUMN budget_tokens BIGINT;
ALTER TABLE api_keys ADD COLUMN budget_per TEXT;
)";

// Migration 8: the client's address (trusted_proxies: through X-Forwarded-For).
constexpr std::string_view kMigration8 = R"(
ALTER TABLE requests ADD COLUMN client TEXT;
)";

std::string migration_sql(Dialect d, int version) {
  if (version == 8) return std::string(kMigration8);
  if (version == 7) return std::string(kMigration7);
  if (version == 6) return std::string(kMigration6);
  if (version == 5) return std::string(kMigration5);
  if (version == 4) return std::string(kMigration4);
  if (version == 3) return std::string(kMigration3);
  if (version == 2) return std::string(d == Dialect::sqlite ? kMigration2Sqlite : kMigration2Postgres);
  if (version != 1) return "";
  std::string sql(kMigration1);
  const std::string_view id = d == Dialect::sqlite ? "INTEGER PRIMARY KEY"
                                                   : "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY";
  sql.replace(sql.find("{id}"), 4, id);
  return sql;
}

std::string migrate_locked(Connection& c, int& version, int up_to) {
  if (auto e = c.exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)");
      !e.empty()) {
    return e;
  }
  std::int64_t current = 0;
  auto e = c.query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", {}, [&](std::vector<Value>& row) {
    if (auto* v = std::get_if<std::int64_t>(&row[0])) current = *v;
  });
  if (!e.empty()) return e;
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (int v = static_cast<int>(current) + 1; v <= up_to; ++v) {
    if (e = c.exec_long(migration_sql(c.dialect(), v), kMigrationLimit); !e.empty()) {
      return "migration " + std::to_string(v) + ": " + e;
    }
    const std::string insert = "INSERT INTO schema_migrations (version, applied_ms) VALUES (" +
                               placeholder(c.dialect(), 1) + ", " + placeholder(c.dialect(), 2) + ")";
    if (e = c.query(insert, {std::int64_t{v}, now_ms}, {}); !e.empty()) return e;
    current = v;
  }
  version = static_cast<int>(current);  // may be newer than ours: a newer sluice migrated
  return "";
}

}  // namespace

std::string migrate(Connection& c, int& version, int up_to) {
  // One migrator at a time: SQLite takes the write lock at BEGIN IMMEDIATE; PostgreSQL
  // instances starting together serialize on an advisory lock held until COMMIT.
  const bool pg = c.dialect() == Dialect::postgres;
  auto e = c.exec(pg ? "BEGIN; SELECT pg_advisory_xact_lock(7372610001)" : "BEGIN IMMEDIATE");
  if (e.empty()) e = migrate_locked(c, version, up_to);
  if (e.empty()) e = c.exec("COMMIT");
  if (!e.empty()) c.exec("ROLLBACK");
  return e;
}

namespace {

// Whether a URL query parameter's name is one libpq reads a secret from. libpq decodes the
// name first (`pass%77ord` is `password`); any case is masked, to be safe.
bool secret_param(std::string_view raw_name) {
  std::string name;
  if (!percent_decode(raw_name, name, false)) name = std::string(raw_name);
  for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name == "password" || name == "sslpassword";
}

// Where the passwords are in a postgres URL: [begin, end) ranges of the raw text.
std::vector<std::pair<std::size_t, std::size_t>> password_ranges(std::string_view url) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return out;
  const std::size_t auth = scheme + 3;
  const std::size_t auth_end = std::min(url.find_first_of("/?#", auth), url.size());
  const auto at = url.substr(0, auth_end).rfind('@');
  if (at != std::string_view::npos && at >= auth) {
    const auto colon = url.substr(0, at).find(':', auth);
    if (colon != std::string_view::npos) out.emplace_back(colon + 1, at);
  }
  const auto q = url.find('?');
  if (q != std::string_view::npos) {
    for (std::size_t pos = q + 1; pos < url.size();) {
      const std::size_t end = std::min(url.find('&', pos), url.size());
      const std::string_view param = url.substr(pos, end - pos);
      const auto eq = param.find('=');
      if (eq != std::string_view::npos && secret_param(param.substr(0, eq))) out.emplace_back(pos + eq + 1, end);
      pos = end + 1;
    }
  }
  return out;
}

}  // namespace

std::string mask_postgres_url(std::string_view url) {
  if (url.find("://") == std::string_view::npos) return "";
  std::string out(url);
  const auto ranges = password_ranges(url);
  for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) out.replace(it->first, it->second - it->first, "***");
  return out;
}

std::string scrub_password(std::string text, std::string_view url) {
  for (const auto& [begin, end] : password_ranges(url)) {
    const std::string_view raw = url.substr(begin, end - begin);
    std::string decoded;
    percent_decode(raw, decoded, false);
    for (const std::string& secret : {std::string(raw), decoded}) {
      if (secret.empty()) continue;
      for (auto p = text.find(secret); p != std::string::npos; p = text.find(secret, p + 3)) {
        text.replace(p, secret.size(), "***");
      }
    }
  }
  return text;
}

}  // namespace sluice::history
