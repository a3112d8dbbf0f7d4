#pragma once
// The vocabulary shared by both counting backends (memory and Redis): one request is
// tested against a list of counters, all or nothing.
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/reason.hpp"
#include "config/admission.hpp"

namespace sluice::limits {

enum class Kind : std::uint8_t {
  fixed_window,    // count per window aligned to the epoch
  sliding_window,  // the current window plus the previous one weighted by its overlap
  token_bucket,    // refills `limit` per `window_ms`, holds at most `extra`
  sliding_log,     // exact: the time of every request admitted in the last `window_ms`
  quota,           // token ledger per period: used + reserved must stay within limit
};

struct Check {
  Kind kind = Kind::fixed_window;
  // Counter key, without the window or period suffix. It points into storage that
  // outlives the request (the worker's plan cache, or the caller's in tests).
  std::string_view key;
  std::int64_t limit = 0;
  std::int64_t window_ms = 0;  // quota: period length; 0 = calendar month (UTC)
  std::int64_t cost = 1;       // requests: 1; quota: tokens reserved
  std::int64_t extra = 0;      // token_bucket: capacity; quota: reservation lifetime in ms
  std::int64_t lease = 0;      // Redis: extra units a worker would take in advance (0 = none)
  bool tokens = false;         // a token limit (OpenAI's *-tokens headers)
  config::DownPolicy on_redis_down = config::DownPolicy::open;
  const std::string* id = nullptr;  // the configured limit ("requests[0]")
  // Redis: the counter's slot in the worker's lease table (set by its plan cache), so a
  // request finds its leases without hashing the key; kNoSlot: looked up by key.
  std::uint32_t slot = kNoSlot;
  static constexpr std::uint32_t kNoSlot = ~0u;
};

struct CheckResult {
  std::int64_t remaining = 0;  // before this request: an admitted one takes `cost` from it
  std::int64_t reset_ms = 0;   // until the window ends / the bucket is full / the period ends
  std::int64_t period = 0;     // quota: the period the reservation was made in (Redis: also a window's index)
  std::int64_t leased = 0;     // Redis: units taken in advance for this worker to admit locally
};

struct Verdict {
  bool allowed = false;
  int denied = -1;             // index of the first check that refused
  std::int64_t retry_after_ms = 0;  // when every refusing check would pass again
  std::int64_t now_ms = 0;
  std::vector<CheckResult> results;  // one per check, in order
};

struct QuotaLease;  // leases.hpp

// A reservation to settle: the quota counter of one period, and what was reserved there.
struct Reserved {
  std::string key;             // counter key with its period suffix (empty when `lease` is set)
  std::int64_t amount = 0;     // what this request reserved
  // Served from a token lease (Redis): the settlement draws on the lease, which outlives
  // the request (it is given back only once all its requests settled).
  QuotaLease* lease = nullptr;
};

// The tightest limit of one kind, for the x-ratelimit-* headers.
struct HeaderLimit {
  bool set = false;
  std::int64_t limit = 0;
  std::int64_t remaining = 0;
  std::int64_t reset_ms = 0;
};

// Where a request's counting was done.
enum class Counted : std::uint8_t { none, local, redis };

struct Admission {
  Reason reason = Reason::ok;  // ok, rate_limited, token_limit_exceeded, quota_exceeded, limiter_unavailable
  std::string message;
  std::int64_t retry_after_ms = 0;
  HeaderLimit requests, tokens;
  Counted counted = Counted::none;
  // Token reservations to settle.
  std::string reservation_id;
  std::int64_t reserved_tokens = 0;
  boost::container::small_vector<Reserved, 1> reserved;  // (one quota: no allocation)
  // Refused by a token limit while the prompt's tokens were an upper bound (admit's
  // `bound`): not counted as a refusal; count the prompt exactly and ask again.
  bool recount = false;
  bool allowed() const { return reason == Reason::ok; }
};

// Months since 1970-01 of a Unix time in ms (UTC), and where month `m` starts.
std::int64_t month_index(std::int64_t unix_ms) noexcept;
std::int64_t month_start_ms(std::int64_t month) noexcept;

// The window or period a check falls in at `now_ms`, and when it ends.
struct Period {
  std::int64_t index = 0;
  std::int64_t ends_ms = 0;
};
Period period_of(const Check& c, std::int64_t now_ms) noexcept;

// OpenAI's reset format: "20ms", "1s", "6m0s", "1h2m3s".
std::string format_reset(std::int64_t ms);
void append_reset(std::string& out, std::int64_t ms);  // the same, appended
// The same, written at p (at most kMaxResetChars bytes); returns the end.
inline constexpr std::size_t kMaxResetChars = 32;
char* write_reset(char* p, std::int64_t ms);

}  // namespace sluice::limits
