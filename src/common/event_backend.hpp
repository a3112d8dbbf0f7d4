#pragma once
// Which kernel interface drives the sockets and timers. Asio fixes it at compile time:
// epoll by default, io_uring in a build configured with -DSLUICE_IO_URING=ON (an
// experiment; docs/benchmarks.md, "Event backend").
namespace sluice::common {

// "io_uring" or "epoll": what this binary was built with (sluice_build_info says it).
const char* event_backend();

// Called first thing in main(). In the io_uring build, exits 1 with one line saying why
// when the kernel refuses io_uring (a seccomp profile such as Docker's and containerd's
// defaults, kernel.io_uring_disabled, an old kernel) instead of failing later inside Asio;
// in the epoll build, returns at once.
void ensure_event_backend();

}  // namespace sluice::common
