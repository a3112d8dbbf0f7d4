#pragma once
// The wall clock in Unix milliseconds (records, audit rows, the live registry).
#include <chrono>
#include <cstdint>

namespace sluice {

inline std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice
