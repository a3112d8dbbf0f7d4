#pragma once
// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it (Linux keeps 15
// characters; longer names are cut). Threads of the gateway are named "sluice-<role>".
namespace sluice {

void name_this_thread(const char* name) noexcept;

}  // namespace sluice
