// Query strings of GET /history and GET /history/stats -> typed queries. Every error
// names the parameter, so a client can fix its request without reading the docs.
#include <array>
#include <charconv>
#include <chrono>
#include <vector>

#include "common/text.hpp"
#include "history/db.hpp"
#include "history/audit_table.hpp"
#include "history/history.hpp"

namespace sluice::history {
namespace {

using std::chrono::milliseconds;

constexpr std::array<std::pair<std::string_view, std::string_view>, 16> kGroups{{
    {"model", "model"},     {"tier", "tier"},       {"tenant", "tenant"},         {"key", "key_name"},
    {"provider", "provider"}, {"backend", "backend"}, {"status", "status"},       {"reason", "reason"},
    {"stream", "stream"},   {"num_ctx", "num_ctx"}, {"num_gpu", "num_gpu"},       {"num_batch", "num_batch"},
    {"temperature", "temperature"}, {"top_p", "top_p"}, {"max_tokens", "max_tokens"}, {"cache", "cache"},
}};

using Param = QueryParam;

// A value quoted for an error message, cut short: it is the client's text (a byte that
// is not UTF-8 shows as U+FFFD, so that the JSON answer stays valid).
std::string quoted(std::string_view v) {
  std::string out = "\"";
  append_clean_utf8(out, v.substr(0, 64));
  return out + (v.size() > 64 ? "...\"" : "\"");
}

// key=value pairs; empty values count as not given; a parameter may appear once.
std::optional<std::vector<Param>> split(std::string_view qs, std::span<const std::string_view> allowed, std::string& error) {
  if (qs.starts_with('?')) qs.remove_prefix(1);
  std::vector<Param> out;
  while (!qs.empty()) {
    const auto amp = qs.find('&');
    const std::string_view part = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view{} : qs.substr(amp + 1);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    Param p;
    if (!percent_decode(part.substr(0, eq), p.name, true) ||
        (eq != std::string_view::npos && !percent_decode(part.substr(eq + 1), p.value, true))) {
      error = "malformed percent-encoding in " + quoted(part);
      return std::nullopt;
    }
    bool known = false;
    for (auto a : allowed) known |= a == p.name;
    if (!known) {
      error = "unknown parameter " + quoted(p.name) + " (expected one of:";
      for (auto a : allowed) error += " " + std::string(a);
      error += ")";
      return std::nullopt;
    }
    // Filters are compared with stored text, which is always UTF-8 (PostgreSQL would
    // refuse the query itself).
    if (!valid_utf8(p.value)) {
      error = p.name + ": not valid UTF-8 once percent-decoded";
      return std::nullopt;
    }
    for (const auto& q : out) {
      if (q.name == p.name) {
        error = "parameter " + p.name + " is given twice";
        return std::nullopt;
      }
    }
    if (!p.value.empty()) out.push_back(std::move(p));
  }
  return out;
}

bool parse_int(std::string_view s, std::int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

bool digits(std::string_view s, std::size_t at, std::size_t n, int& out) {
  if (at + n > s.size()) return false;
  out = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

// "2026-11-29", "2026-11-29T20:00:00Z", "2026-11-29T20:00:00.250Z" (UTC only).
bool parse_iso8601(std::string_view s, std::int64_t& ms) {
  int y, mo, d, h = 0, mi = 0, sec = 0, frac_ms = 0;
  if (!digits(s, 0, 4, y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' || !digits(s, 8, 2, d)) {
    return false;
  }
  const std::chrono::year_month_day date{std::chrono::year{y}, std::chrono::month{static_cast<unsigned>(mo)},
                                         std::chrono::day{static_cast<unsigned>(d)}};
  if (!date.ok()) return false;
  if (s.size() > 10) {
    if ((s[10] != 'T' && s[10] != ' ') || !digits(s, 11, 2, h) || s.size() < 20 || s[13] != ':' || !digits(s, 14, 2, mi) ||
        s[16] != ':' || !digits(s, 17, 2, sec) || h > 23 || mi > 59 || sec > 60) {
      return false;
    }
    std::size_t at = 19;
    if (s[at] == '.') {
      int scale = 100;
      for (++at; at < s.size() && s[at] >= '0' && s[at] <= '9'; ++at, scale /= 10) frac_ms += (s[at] - '0') * scale;
    }
    if (at + 1 != s.size() || s[at] != 'Z') return false;
  }
  const auto days = std::chrono::sys_days(date).time_since_epoch().count();
  ms = ((days * 24 + h) * 60 + mi) * 60'000LL + sec * 1000LL + frac_ms;
  return true;
}

// Unix seconds, unix milliseconds (from 1e11 on: seconds that large are year 5138), or ISO-8601.
bool parse_time(const Param& p, std::int64_t& ms, std::string& error) {
  std::int64_t n = 0;
  if (parse_int(p.value, n)) {
    ms = n >= 100'000'000'000LL ? n : n * 1000;
    return true;
  }
  if (parse_iso8601(p.value, ms)) return true;
  error = p.name + ": expected unix seconds, unix milliseconds or an ISO-8601 UTC time like 2026-11-29T20:00:00Z, got " +
          quoted(p.value);
  return false;
}

bool parse_bounded(const Param& p, std::int64_t min, std::int64_t max, std::int64_t& out, std::string& error) {
  if (parse_int(p.value, out) && out >= min && out <= max) return true;
  error = p.name + ": expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
          quoted(p.value);
  return false;
}

bool check_range(std::int64_t since, std::int64_t until, std::string& error) {
  if (since == 0 || until == 0 || since < until) return true;
  error = "since: must be before until";
  return false;
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<std::vector<QueryParam>> parse_query_params(std::string_view query_string,
                                                          std::span<const std::string_view> allowed,
                                                          std::string& error) {
  return split(query_string, allowed, error);
}

bool parse_time_param(const QueryParam& p, std::int64_t& ms, std::string& error) { return parse_time(p, ms, error); }

std::string usage_sql(Dialect d) {
  // Settlement's rule (src/filters/rate_limits.cpp, charged_tokens): a request that answered
  // 200 or relayed output is charged its prompt and completion tokens, anything else
  // nothing; one charge is at most 99,999,999,999,999 (WorkerLimiter::kMaxCharge). The
  // stored counts are what was charged (NULL: unknown, i.e. 0).
  const std::string least = d == Dialect::postgres ? "LEAST(" : "MIN(";
  auto at_most = [&](const std::string& e) { return least + e + ", 99999999999999)"; };
  const std::string charged =
      at_most(at_most("COALESCE(prompt_tokens, 0)") + " + " + at_most("COALESCE(completion_tokens, 0)"));
  // Only rows that reserved tokens: a request no token quota applied to, or that was
  // refused, charged nothing. (The rows of a key and a time window: the (key_name, unix_ms)
  // and (unix_ms) indexes.)
  return "SELECT key_name, tenant, tier, alias, CAST(SUM(CASE WHEN status = 200 OR completion_tokens > 0 THEN " + charged +
         " ELSE 0 END) AS BIGINT), COUNT(*) FROM requests WHERE unix_ms >= " + placeholder(d, 1) +
         " AND unix_ms < " + placeholder(d, 2) +
         " AND reserved_tokens IS NOT NULL AND key_name IS NOT NULL AND alias IS NOT NULL"
         " GROUP BY key_name, tenant, tier, alias";
}

std::string_view group_column(std::string_view group_by) {
  for (const auto& [name, column] : kGroups) {
    if (name == group_by) return column;
  }
  return "";
}

std::string_view group_by_names() {
  static const std::string names = [] {
    std::string s;
    for (const auto& g : kGroups) s += (s.empty() ? "" : ", ") + std::string(g.first);
    return s;
  }();
  return names;
}

std::optional<AuditQuery> parse_audit_query(std::string_view query_string, std::string& error) {
  static constexpr std::string_view kAllowed[] = {"since", "until", "actor", "action", "target", "limit"};
  const auto params = split(query_string, kAllowed, error);
  if (!params) return std::nullopt;
  AuditQuery q;
  for (const Param& p : *params) {
    std::int64_t n = 0;
    bool ok = true;
    if (p.name == "actor") q.actor = p.value;
    else if (p.name == "action") q.action = p.value;
    else if (p.name == "target") q.target = p.value;
    else if (p.name == "since") ok = parse_time(p, q.since_ms, error);
    else if (p.name == "until") ok = parse_time(p, q.until_ms, error);
    else if (p.name == "limit") ok = parse_bounded(p, 1, 1000, n, error), q.limit = static_cast<int>(n);
    if (!ok) return std::nullopt;
  }
  if (!check_range(q.since_ms, q.until_ms, error)) return std::nullopt;
  return q;
}

std::optional<ListQuery> parse_list_query(std::string_view query_string, std::string& error) {
  static constexpr std::string_view kAllowed[] = {"model", "key", "tenant", "status", "since", "until", "limit", "before_id"};
  const auto params = split(query_string, kAllowed, error);
  if (!params) return std::nullopt;
  ListQuery q;
  for (const Param& p : *params) {
    std::int64_t n = 0;
    bool ok = true;
    if (p.name == "model") q.model = p.value;
    else if (p.name == "key") q.key = p.value;
    else if (p.name == "tenant") q.tenant = p.value;
    else if (p.name == "since") ok = parse_time(p, q.since_ms, error);
    else if (p.name == "until") ok = parse_time(p, q.until_ms, error);
    else if (p.name == "limit") ok = parse_bounded(p, 1, 1000, n, error), q.limit = static_cast<int>(n);
    else if (p.name == "before_id") ok = parse_bounded(p, 1, INT64_MAX, q.before_id, error);
    else if (p.name == "status") {
      const std::string_view v = p.value;
      if (v.size() == 3 && v[0] >= '1' && v[0] <= '5' && (v.substr(1) == "xx" || v.substr(1) == "XX")) {
        q.status_class = v[0] - '0';
      } else if (parse_int(v, n) && n >= 100 && n <= 599) {
        q.status = static_cast<int>(n);
      } else {
        error = "status: expected an HTTP status (100-599) or a class like 5xx, got " + quoted(v);
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
  }
  if (!check_range(q.since_ms, q.until_ms, error)) return std::nullopt;
  return q;
}

std::optional<StatsQuery> parse_stats_query(std::string_view query_string, std::string& error, std::int64_t now_ms) {
  static constexpr std::string_view kAllowed[] = {"since", "until", "window", "group_by", "model", "key", "tenant"};
  const auto params = split(query_string, kAllowed, error);
  if (!params) return std::nullopt;
  StatsQuery q;
  std::int64_t window_ms = 0;
  for (const Param& p : *params) {
    bool ok = true;
    if (p.name == "model") q.model = p.value;
    else if (p.name == "key") q.key = p.value;
    else if (p.name == "tenant") q.tenant = p.value;
    else if (p.name == "since") ok = parse_time(p, q.since_ms, error);
    else if (p.name == "until") ok = parse_time(p, q.until_ms, error);
    else if (p.name == "group_by") {
      if (p.value != "none" && group_column(p.value).empty()) {
        error = "group_by: expected none or one of " + std::string(group_by_names()) + ", got " + quoted(p.value);
        ok = false;
      } else if (p.value != "none") {
        q.group_by = p.value;
      }
    } else if (p.name == "window") {
      // <n><unit>: 15m, 1h, 24h, 7d, 90s.
      const char unit = p.value.back();
      const std::int64_t unit_ms =
          unit == 's' ? 1000 : unit == 'm' ? 60'000 : unit == 'h' ? 3'600'000 : unit == 'd' ? 86'400'000 : 0;
      std::int64_t n = 0;
      if (unit_ms == 0 || !parse_int(std::string_view(p.value).substr(0, p.value.size() - 1), n) || n <= 0 ||
          n > 3650LL * 86'400'000 / unit_ms) {
        error = "window: expected a duration like 15m, 1h, 24h or 7d, got " + quoted(p.value);
        ok = false;
      } else {
        // Only once n is known in range: from_chars may have stored a prefix of a bad value
        // (9223372036854775807 of "9223372036854775807xs"), and n * unit_ms would overflow.
        window_ms = n * unit_ms;
      }
    }
    if (!ok) return std::nullopt;
  }
  if (window_ms && q.since_ms) {
    error = "window: give either window or since, not both";
    return std::nullopt;
  }
  if (q.until_ms == 0) q.until_ms = now_ms ? now_ms : now_unix_ms();
  if (q.since_ms == 0) q.since_ms = q.until_ms - (window_ms ? window_ms : 3'600'000);
  if (!check_range(q.since_ms, q.until_ms, error)) return std::nullopt;
  return q;
}

}  // namespace sluice::history
