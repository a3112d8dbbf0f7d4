#pragma once
// The Lua scripts Redis runs for admission: one call decides a request against every
// counter that applies, on Redis's clock, all or nothing.
#include <string>
#include <string_view>

namespace sluice::limits {

// KEYS[i]: counter key of check i (no window suffix).
// ARGV[1]: the admission's id (it also names its quota reservations and sliding-log
// entries); then 6 per check: kind (fw|sw|sl|tb|tq), limit, window ms (tq: period, 0 =
// calendar month), cost, extra (tb: capacity; tq: reservation lifetime), lease (units to
// take in advance when the counter is far from its limit; 0 = none).
// Returns {denied (1-based, 0 = admitted), retry_after_ms, now_ms,
//          then per check: remaining, reset_ms, period, leased}.
// An admitted call leaves a record, "<tag>:a:<id>", kept 60 s (<tag>: KEYS[1] up to its
// hash tag, "sluice:{t:acme}"): what it took. A call the gateway gave up (a timeout: it
// may still run when Redis resumes) is voided by a 'v' settlement, which gives that back,
// or, when it comes first, leaves a record that makes the late call do nothing (it
// returns {-1}). See docs/limits.md, "Redis timeouts".
extern const std::string kAdmitScript;

// Settles a batch. KEYS[i]: quota counter with its period suffix. ARGV[1]: how long a
// counter recreated by a late settlement is kept (ms); ARGV[2]: the batch's id (a batch
// sent again after a timeout finds "<tag>:s:<id>", kept 10 min, and does nothing); then
// 3 per key: "<op>:<id>", amount, tokens actually used, where op is
//   r  a request's reservation (amount = what it reserved): released;
//   c  a request served from lease <id> (amount = the lease's size): its usage leaves
//      the lease's holding;
//   x  lease <id> given back (amount = its size; used = 0): the rest of it is released;
//   u  usage only: a request counted in memory while Redis was unreachable;
//   v  admission <id> given up (KEYS[i]: its first counter key, no suffix): voided.
// Every entry but 'v' charges its usage.
extern const std::string kSettleScript;

// Reads quota counters (changes nothing). KEYS[i]: quota counter with its period suffix.
// Returns 2 per key: its `used` and `reserved` as Redis holds them ("" when the field is
// missing: both are for a counter that does not exist).
extern const std::string_view kLedgerScript;

}  // namespace sluice::limits
