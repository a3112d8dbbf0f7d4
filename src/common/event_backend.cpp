#include "common/event_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>

#ifdef BOOST_ASIO_HAS_IO_URING
#include <liburing.h>
#endif

namespace sluice::common {

#ifdef BOOST_ASIO_HAS_IO_URING

const char* event_backend() { return "io_uring"; }

namespace {

// Why io_uring is unusable here, "" when it is usable.
std::string io_uring_unusable() {
  // The size Asio asks for (io_uring_service::ring_size): where rings are charged to
  // RLIMIT_MEMLOCK, a small ring could pass where Asio's would not.
  io_uring ring{};
  if (const int r = ::io_uring_queue_init(16384, &ring, 0); r < 0) {
    return std::string("io_uring_setup failed: ") + std::strerror(-r);
  }
  std::string missing;
  if (io_uring_probe* probe = ::io_uring_get_probe_ring(&ring)) {
    // The operations Asio's io_uring backend submits for sockets and timers.
    static constexpr std::pair<int, const char*> kOps[] = {
        {IORING_OP_RECVMSG, "recvmsg"},   {IORING_OP_SENDMSG, "sendmsg"},
        {IORING_OP_ACCEPT, "accept"},     {IORING_OP_CONNECT, "connect"},
        {IORING_OP_POLL_ADD, "poll_add"}, {IORING_OP_TIMEOUT, "timeout"},
        {IORING_OP_TIMEOUT_REMOVE, "timeout_remove"}, {IORING_OP_ASYNC_CANCEL, "async_cancel"},
        {IORING_OP_NOP, "nop"}};
    for (const auto& [op, name] : kOps) {
      if (!::io_uring_opcode_supported(probe, op)) missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
    ::io_uring_free_probe(probe);
  } else {
    missing = "the operation probe (a kernel older than 5.6)";
  }
  ::io_uring_queue_exit(&ring);
  return missing.empty() ? std::string() : "the kernel lacks io_uring " + missing;
}

}  // namespace

void ensure_event_backend() {
  if (const std::string why = io_uring_unusable(); !why.empty()) {
    std::cerr << "sluice: this build runs on io_uring, which is unusable here (" << why
              << "); use a build configured without -DSLUICE_IO_URING=ON\n";
    std::exit(1);
  }
}

#else

const char* event_backend() { return "epoll"; }
void ensure_event_backend() {}

#endif

}  // namespace sluice::common
