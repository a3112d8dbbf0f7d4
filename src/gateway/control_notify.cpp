#include "gateway/control_notify.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "store/redis.hpp"

namespace sluice::gateway {

namespace {

using Ms = std::chrono::milliseconds;
constexpr Ms kIo{500};  // connect, and each command's answer

std::string command(const std::vector<std::string>& args) {
  std::string out;
  store::append_resp_command(out, args);
  return out;
}

// Waits until fd is ready for `events` or `timeout` passes.
bool ready(int fd, short events, Ms timeout) {
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
}

bool send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    if (!ready(fd, POLLOUT, kIo)) return false;
    const auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads until `count` complete replies arrived (each ends in \r\n; a bulk or an array of
// bulks counted by its lines), or fails. Enough for AUTH (+OK), SUBSCRIBE's confirmation
// (an array of three) and PUBLISH (:n); a -ERR fails.
bool read_replies(int fd, int lines) {
  std::string buf;
  char chunk[512];
  while (lines > 0) {
    if (!ready(fd, POLLIN, kIo)) return false;
    const auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t pos;
    while (lines > 0 && (pos = buf.find("\r\n")) != std::string::npos) {
      if (buf[0] == '-') return false;
      buf.erase(0, pos + 2);
      --lines;
    }
  }
  return true;
}

int connect_plain(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (auto* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      fd = -1;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (!ready(fd, POLLOUT, kIo) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  return fd;
}

// SENTINEL get-master-addr-by-name's answer: *2 $n host $m port (five lines), or *-1.
bool read_master(int fd, std::string& host, std::uint16_t& port, std::chrono::steady_clock::time_point until) {
  std::string buf;
  char chunk[512];
  std::vector<std::string> lines;
  while (lines.size() < 5) {
    if (std::chrono::steady_clock::now() >= until || !ready(fd, POLLIN, kIo)) return false;
    const auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0 || buf.size() > 4096) return false;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t pos;
    while (lines.size() < 5 && (pos = buf.find("\r\n")) != std::string::npos) {
      lines.push_back(buf.substr(0, pos));
      buf.erase(0, pos + 2);
      if (lines.size() == 1 && lines[0] != "*2") return false;  // *-1 (unknown), -ERR...
    }
  }
  // Two bulk strings: $<len> then the bytes, each length as announced.
  auto bulk = [&](std::size_t i) { return lines[i].size() > 1 && lines[i][0] == '$' && lines[i].substr(1) == std::to_string(lines[i + 1].size()); };
  if (!bulk(1) || !bulk(3)) return false;
  host = lines[2];
  const auto [end, ec] = std::from_chars(lines[4].data(), lines[4].data() + lines[4].size(), port);
  return !host.empty() && ec == std::errc() && end == lines[4].data() + lines[4].size() && port != 0;
}

// The server to talk to: the endpoint's, the master a sentinel names, or the first
// cluster node that answers.
int connect_to(const RedisEndpoint& ep) {
  std::string host = ep.host;
  std::uint16_t port = ep.port;
  if (!ep.sentinels.empty()) {
    // At most 2 s over all sentinels: this runs on the poll thread and on the query
    // thread (a publish), which others wait behind.
    const auto until = std::chrono::steady_clock::now() + 4 * kIo;
    bool named = false;
    for (const auto& sentinel : ep.sentinels) {
      if (std::chrono::steady_clock::now() >= until) break;
      const int sfd = connect_plain(sentinel.host, sentinel.port);
      if (sfd < 0) continue;
      named = send_all(sfd, command({"SENTINEL", "get-master-addr-by-name", ep.master})) &&
              read_master(sfd, host, port, until);
      ::close(sfd);
      if (named) break;
    }
    if (!named) return -1;
  }
  int fd = -1;
  if (!ep.cluster.empty()) {
    // A cluster carries a publication to every node: any one that answers will do.
    for (const auto& node : ep.cluster) {
      if ((fd = connect_plain(node.host, node.port)) >= 0) break;
    }
  } else {
    fd = connect_plain(host, port);
  }
  if (fd >= 0 && !ep.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!ep.username.empty()) auth.push_back(ep.username);
    auth.push_back(ep.password);
    if (!send_all(fd, command(auth)) || !read_replies(fd, 1)) {
      ::close(fd);
      fd = -1;
    }
  }
  return fd;
}

}  // namespace

ControlNotify::ControlNotify(RedisEndpoint ep, std::string channel)
    : ep_(std::move(ep)), channel_(std::move(channel)), wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

ControlNotify::~ControlNotify() {
  drop();
  if (wake_ >= 0) ::close(wake_);
}

void ControlNotify::drop() {
  if (sub_ >= 0) ::close(sub_);
  sub_ = -1;
}

bool ControlNotify::subscribe() {
  sub_ = connect_to(ep_);
  if (sub_ < 0) return false;
  // The confirmation: *3, $9, subscribe, $n, channel, :1 (six lines).
  if (!send_all(sub_, command({"SUBSCRIBE", channel_})) || !read_replies(sub_, 6)) {
    drop();
    return false;
  }
  return true;
}

bool ControlNotify::wait(Ms timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  if (sub_ < 0 && !subscribe()) {
    // Redis unreachable: wait out the timeout (or a stop), then try again next time.
    pollfd w{wake_, POLLIN, 0};
    ::poll(&w, 1, static_cast<int>(timeout.count()));
    return false;
  }
  pollfd p[2] = {{sub_, POLLIN, 0}, {wake_, POLLIN, 0}};
  const auto left = std::chrono::duration_cast<Ms>(until - std::chrono::steady_clock::now());
  int r;
  do r = ::poll(p, 2, static_cast<int>(std::max<Ms>(left, Ms{0}).count()));
  while (r < 0 && errno == EINTR);
  if (r <= 0 || (p[1].revents & POLLIN)) return false;
  // A message (or the connection's end): what it says does not matter; read it all.
  char chunk[4096];
  ssize_t n;
  bool got = false;
  while ((n = ::recv(sub_, chunk, sizeof chunk, MSG_DONTWAIT)) > 0) got = true;
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) drop();  // subscribed again next time
  return got;
}

void ControlNotify::stop() {
  const std::uint64_t one = 1;
  if (wake_ >= 0 && ::write(wake_, &one, sizeof one) < 0) {
    // (Only full at 2^64 - 1 writes: a stop was already signalled.)
  }
}

void ControlNotify::publish() const {
  const int fd = connect_to(ep_);
  if (fd < 0) return;
  if (send_all(fd, command({"PUBLISH", channel_, "changed"}))) read_replies(fd, 1);
  ::close(fd);
}

}  // namespace sluice::gateway
