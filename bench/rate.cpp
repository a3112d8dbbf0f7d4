// An open-loop HTTP/1.1 load generator at a fixed rate (bench/latency.sh builds and runs
// it): request i is due at start + i / rate whatever happened to the ones before, and its
// latency is counted from that due time, not from when a connection was free to send it
// (so a stall is charged to every request it delayed, not hidden: no coordinated
// omission). One thread, epoll, CONNS keep-alive connections; a due request with no idle
// connection waits in a queue, its clock running.
//
//   rate --port P [--host 127.0.0.1] [--path /v1/chat/completions] [--key K] [--body JSON]
//        [--rate 1000] [--duration 10] [--conns 16]
//
// Prints one line: "BENCH requests=... sent=... duration_us=... p50_us=... p90_us=...
// p99_us=... p999_us=... max_us=... errors=... late=..." where errors counts non-200
// answers, broken connections and requests unanswered 5 s after the run, and late counts
// requests that waited for a connection. Exits 1 when it cannot connect.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <string_view>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  bool busy = false;
  Clock::time_point due;  // of the request in flight
  std::string in;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "rate: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

int connect_to(const char* host, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host, &a.sin_addr) != 1) fail("bad --host");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("connect");
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// The length of the complete response at the start of `b`, 0 if it is not all there yet,
// -1 if it cannot be parsed. Sets `status`.
long complete_length(std::string_view b, int& status) {
  size_t head_end = b.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return 0;
  if (b.size() < 12 || b.substr(0, 5) != "HTTP/") return -1;
  status = std::atoi(std::string(b.substr(9, 3)).c_str());
  std::string head(b.substr(0, head_end));
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t body = head_end + 4;
  if (size_t cl = head.find("\r\ncontent-length:"); cl != std::string::npos) {
    long n = std::atol(head.c_str() + cl + 17);
    return b.size() >= body + n ? static_cast<long>(body + n) : 0;
  }
  if (head.find("\r\ntransfer-encoding: chunked") == std::string::npos) return -1;
  size_t at = body;
  for (;;) {  // chunk-size CRLF data CRLF ... 0 CRLF CRLF
    size_t eol = b.find("\r\n", at);
    if (eol == std::string_view::npos) return 0;
    long n = std::strtol(std::string(b.substr(at, eol - at)).c_str(), nullptr, 16);
    if (n == 0) return b.size() >= eol + 4 ? static_cast<long>(eol + 4) : 0;
    at = eol + 2 + n + 2;
    if (b.size() < at) return 0;
  }
}

uint64_t pct(const std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t i = static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", path = "/v1/chat/completions", key;
  std::string body = R"({"model":"sluice-sim","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8})";
  int port = 0, conns = 16;
  double rate = 1000, duration = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--host") host = v;
    else if (a == "--port") port = std::atoi(v);
    else if (a == "--path") path = v;
    else if (a == "--key") key = v;
    else if (a == "--body") body = v;
    else if (a == "--rate") rate = std::atof(v);
    else if (a == "--duration") duration = std::atof(v);
    else if (a == "--conns") conns = std::atoi(v);
    else {
      std::fprintf(stderr, "rate: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (port <= 0 || rate <= 0 || duration <= 0 || conns <= 0) {
    std::fprintf(stderr, "rate: --port is required; --rate, --duration and --conns must be positive\n");
    return 2;
  }
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;

  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<Conn> cs(conns);
  std::vector<int> idle;
  for (int i = 0; i < conns; i++) {
    cs[i].fd = connect_to(host.c_str(), port);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = static_cast<uint32_t>(i);
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e) != 0) fail("epoll_ctl");
    idle.push_back(i);
  }

  const auto interval = std::chrono::duration<double>(1.0 / rate);
  const uint64_t total = static_cast<uint64_t>(rate * duration);
  std::vector<uint32_t> lat;
  lat.reserve(total);
  std::deque<Clock::time_point> waiting;  // due requests with no idle connection
  uint64_t sent = 0, errors = 0, late = 0, in_flight = 0;
  const Clock::time_point start = Clock::now();
  auto due_at = [&](uint64_t i) { return start + std::chrono::duration_cast<Clock::duration>(interval * double(i)); };

  auto send_on = [&](int i, Clock::time_point due) {
    Conn& c = cs[i];
    c.busy = true;
    c.due = due;
    in_flight++;
    // A few hundred bytes to an idle connection: the socket buffer takes them at once.
    if (::send(c.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) fail("send");
  };
  auto reopen = [&](int i) {
    ::close(cs[i].fd);
    cs[i].fd = connect_to(host.c_str(), port);
    cs[i].in.clear();
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u32 = static_cast<uint32_t>(i);
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e) != 0) fail("epoll_ctl");
  };
  auto freed = [&](int i) {
    cs[i].busy = false;
    in_flight--;
    if (!waiting.empty()) {
      send_on(i, waiting.front());
      waiting.pop_front();
    } else {
      idle.push_back(i);
    }
  };

  const Clock::time_point end_by = due_at(total) + std::chrono::seconds(5);
  epoll_event evs[64];
  char buf[65536];
  while (sent < total || in_flight > 0 || !waiting.empty()) {
    Clock::time_point now = Clock::now();
    if (now > end_by) break;
    while (sent < total && due_at(sent) <= now) {
      if (!idle.empty()) {
        int i = idle.back();
        idle.pop_back();
        send_on(i, due_at(sent));
      } else {
        waiting.push_back(due_at(sent));
        late++;
      }
      sent++;
    }
    // Sleep until the next request is due (epoll_pwait2: nanoseconds, where epoll_wait's
    // milliseconds would send late or spin).
    long long wait_ns = 100'000'000;
    if (sent < total) wait_ns = std::max<long long>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(due_at(sent) - Clock::now()).count());
    timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
    int n = ::epoll_pwait2(ep, evs, 64, &ts, nullptr);
    if (n < 0 && errno != EINTR) fail("epoll_wait");
    for (int k = 0; k < n; k++) {
      int i = static_cast<int>(evs[k].data.u32);
      Conn& c = cs[i];
      ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (c.busy) {
          errors++;
          reopen(i);
          freed(i);
        } else {
          reopen(i);
        }
        continue;
      }
      c.in.append(buf, static_cast<size_t>(r));
      int status = 0;
      long len = complete_length(c.in, status);
      if (len == 0) continue;
      Clock::time_point done = Clock::now();
      if (len < 0 || status != 200 || !c.busy) {
        errors++;
        reopen(i);
      } else {
        lat.push_back(static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(done - c.due).count()));
        c.in.erase(0, static_cast<size_t>(len));
      }
      if (c.busy) freed(i);
    }
  }
  errors += in_flight + waiting.size();
  double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  std::sort(lat.begin(), lat.end());
  std::printf("BENCH requests=%zu sent=%llu duration_us=%.0f p50_us=%llu p90_us=%llu p99_us=%llu p999_us=%llu max_us=%llu errors=%llu late=%llu\n",
              lat.size(), static_cast<unsigned long long>(sent), elapsed, static_cast<unsigned long long>(pct(lat, 50)),
              static_cast<unsigned long long>(pct(lat, 90)), static_cast<unsigned long long>(pct(lat, 99)),
              static_cast<unsigned long long>(pct(lat, 99.9)), static_cast<unsigned long long>(lat.empty() ? 0 : lat.back()),
              static_cast<unsigned long long>(errors), static_cast<unsigned long long>(late));
  return 0;
}
