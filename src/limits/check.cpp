#include "limits/check.hpp"

#include <charconv>

namespace sluice::limits {

// Howard Hinnant's civil-from-days / days-from-civil (public domain), on whole days.
std::int64_t month_index(std::int64_t unix_ms) noexcept {
  std::int64_t days = unix_ms >= 0 ? unix_ms / 86400000 : -((-unix_ms + 86399999) / 86400000);
  const std::int64_t z = days + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  std::int64_t y = yoe + era * 400;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
  return (y - 1970) * 12 + (m - 1);
}

std::int64_t month_start_ms(std::int64_t month) noexcept {
  std::int64_t y = 1970 + (month >= 0 ? month / 12 : -((-month + 11) / 12));
  const std::int64_t m = month - (y - 1970) * 12 + 1;  // 1..12
  if (m <= 2) --y;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;
  const std::int64_t mp = m > 2 ? m - 3 : m + 9;
  const std::int64_t doy = (153 * mp + 2) / 5;
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return (era * 146097 + doe - 719468) * 86400000;
}

Period period_of(const Check& c, std::int64_t now) noexcept {
  if (c.kind == Kind::token_bucket) return {};
  if (c.window_ms == 0) {
    const auto m = month_index(now);
    return {m, month_start_ms(m + 1)};
  }
  const auto i = now / c.window_ms;
  return {i, (i + 1) * c.window_ms};
}

char* write_reset(char* p, std::int64_t ms) {
  auto put = [&p](std::int64_t v, char unit) {
    p = std::to_chars(p, p + 20, v).ptr;  // (a 64-bit value always fits)
    *p++ = unit;
  };
  if (ms < 0) ms = 0;
  if (ms < 1000) {
    put(ms, 'm');
    *p++ = 's';
    return p;
  }
  std::int64_t s = ms / 1000 + (ms % 1000 != 0);
  if (s >= 3600) {
    put(s / 3600, 'h');
    s %= 3600;
    put(s / 60, 'm');
    s %= 60;
  } else if (s >= 60) {
    put(s / 60, 'm');
    s %= 60;
  }
  put(s, 's');
  return p;
}

void append_reset(std::string& out, std::int64_t ms) {
  char buf[kMaxResetChars];
  out.append(buf, write_reset(buf, ms));
}

std::string format_reset(std::int64_t ms) {
  std::string s;
  append_reset(s, ms);
  return s;
}

}  // namespace sluice::limits
