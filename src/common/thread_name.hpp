#pragma once
// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it (Linux keeps 15
// characters; longer names are cut). Threads of the gateway are named "sluice-<role>".
namespace sluice {

void name_this_thread(const char* name) noexcept;

// Gives the calling thread a lower CPU priority (nice +10, this thread only): for the
// access log's writer, whose batches run for hundreds of microseconds at a time; at the
// same priority, a batch that takes the core a request's worker was about to run on
// delays that request by as much (measured: the one-connection p99 in docs/benchmarks.md,
// "Latency at light load"). It still gets the CPU whenever the workers leave it, and a
// share when they do not (at saturation it kept up: no line lost). A thread that holds a
// lock the workers take must hold it only briefly (a preempted holder stalls them).
// (The history and events writers keep their priority: their rows cost more, and at
// saturation a tenth of a core might not keep up.)
void lower_this_thread_priority() noexcept;

}  // namespace sluice
