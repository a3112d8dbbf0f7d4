// A client of N concurrent streaming chat completions started together (bench/streams.sh
// builds and runs it). One thread, epoll, non-blocking sockets: a stream costs it a few
// system calls, so with thousands of streams the time to first token it reports is the
// proxy's and the upstream's, not the client's (it reports its own CPU time to show it).
//
//   streams --port P [--host 127.0.0.1] [--path /v1/chat/completions] [--key K]
//           (or --url http://HOST:PORT/PATH)
//           [--model sluice-sim] [--n 1000] [--max-tokens 50] [--timeout-ms 60000]
//           [--warmup 20] [--rss-pid PID[,PID...]] [--label NAME]
//
// Per run: streams ok / with errors, TTFT percentiles (from just before connect() to the
// first `data:` event), and for the processes given with --rss-pid the resident memory
// (VmRSS summed over them): idle (after the warm-up streams), when every stream has had its
// first token (all open at once), and the highest value sampled every 10 ms. Prints one
// JSON line: the fields the node client it replaces printed, plus client_cpu_ms and
// client_cpu_to_all_first_ms (its CPU time until every stream had its first token: well
// below sample_at_ms, it did not set the time to first token), and proxy_cpu_ms and
// proxy_cpu_to_all_first_ms (the CPU time of the --rss-pid processes over the batch and
// until every stream had its first token; /proc/PID/stat, 10 ms ticks). Exit code 0 even when
// streams fail (the caller reads `errors`); 2 on bad arguments.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <string_view>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string host = "127.0.0.1", path = "/v1/chat/completions", key, model = "sluice-sim", label;
  int port = 0, n = 1000, max_tokens = 50, timeout_ms = 60000, warmup = 20;
  std::vector<int> rss_pids;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "streams: %s\n", why);
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view k = argv[i];
    if (i + 1 >= argc) usage("every option takes a value");
    const char* v = argv[++i];
    if (k == "--url") {  // http://HOST:PORT/PATH
      std::string_view u = v;
      if (!u.starts_with("http://")) usage("--url must be http://HOST:PORT/PATH");
      u.remove_prefix(7);
      const auto slash = u.find('/');
      const auto hostport = u.substr(0, slash);
      const auto colon = hostport.rfind(':');
      if (colon == std::string_view::npos) usage("--url needs a port");
      a.host = std::string(hostport.substr(0, colon));
      a.port = std::atoi(std::string(hostport.substr(colon + 1)).c_str());
      a.path = slash == std::string_view::npos ? "/" : std::string(u.substr(slash));
    } else if (k == "--host") a.host = v;
    else if (k == "--port") a.port = std::atoi(v);
    else if (k == "--path") a.path = v;
    else if (k == "--key") a.key = v;
    else if (k == "--model") a.model = v;
    else if (k == "--label") a.label = v;
    else if (k == "--n") a.n = std::atoi(v);
    else if (k == "--max-tokens") a.max_tokens = std::atoi(v);
    else if (k == "--timeout-ms") a.timeout_ms = std::atoi(v);
    else if (k == "--warmup") a.warmup = std::atoi(v);
    else if (k == "--rss-pid") {
      for (const char* p = v; *p;) {
        char* end;
        long pid = std::strtol(p, &end, 10);
        if (end == p || pid <= 0) usage("--rss-pid takes pids separated by commas");
        a.rss_pids.push_back(static_cast<int>(pid));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      usage("unknown option");
    }
  }
  if (a.port <= 0 || a.n <= 0 || a.max_tokens <= 0 || a.timeout_ms <= 0 || a.warmup < 0) {
    usage("--port is required; --n, --max-tokens and --timeout-ms must be > 0");
  }
  return a;
}

// /proc/PID/WHAT, open for reading (null when it is not).
FILE* proc_file(int pid, const char* what) {
  char name[64];
  std::snprintf(name, sizeof name, "/proc/%d/%s", pid, what);
  return std::fopen(name, "r");
}

// Sum of VmRSS (kB) over the pids; -1 when one is unreadable.
long rss_kb(const std::vector<int>& pids) {
  if (pids.empty()) return -1;
  long sum = 0;
  for (int pid : pids) {
    FILE* f = proc_file(pid, "status");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "VmRSS:", 6) == 0) {
        kb = std::atol(line + 6);
        break;
      }
    }
    std::fclose(f);
    if (kb < 0) return -1;
    sum += kb;
  }
  return sum;
}

// CPU time (user + system, ms) summed over the pids, from /proc/PID/stat (clock ticks);
// -1 when one is unreadable.
double pids_cpu_ms(const std::vector<int>& pids) {
  if (pids.empty()) return -1;
  const double tick_ms = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  double sum = 0;
  for (int pid : pids) {
    FILE* f = proc_file(pid, "stat");
    if (!f) return -1;
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // After the command's closing parenthesis: state (field 3) ... utime (14), stime (15).
    const char* p = std::strrchr(buf, ')');
    if (!p) return -1;
    unsigned long long utime = 0, stime = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return -1;
    sum += static_cast<double>(utime + stime) * tick_ms;
  }
  return sum;
}

double cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One stream: the response is read as it comes; its body (de-chunked when chunked) is cut
// into lines, and each `data:` line is an event.
struct Stream {
  int fd = -1;
  std::size_t sent = 0;
  Clock::time_point t0;
  double ttft_ms = -1;
  int events = 0;
  bool done = false, head_seen = false, chunked = false, finished = false;
  std::string error;
  std::string raw;   // bytes not yet parsed (the head, a partial chunk-size line)
  std::string line;  // the body's current line
  long chunk_left = 0;  // chunked: data bytes left in the current chunk (-1: its CRLF)
};

class Batch {
 public:
  Batch(const Args& a, int ep, std::string request, bool sample)
      : a_(a), ep_(ep), request_(std::move(request)), sample_(sample), streams_(a.n) {}

  // Runs the batch to its end; what it measured is in the public fields below.
  void run(int n) {
    streams_.resize(n);
    start_ = Clock::now();
    const auto deadline = start_ + std::chrono::milliseconds(a_.timeout_ms);
    cpu0_ = cpu_ms();
    proxy_cpu0_ = pids_cpu_ms(a_.rss_pids);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(a_.port));
    if (::inet_pton(AF_INET, a_.host.c_str(), &addr.sin_addr) != 1) usage("bad --host");
    for (auto& s : streams_) {
      s.t0 = Clock::now();
      s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s.fd < 0) {
        end(s, std::string("socket: ") + std::strerror(errno));
        continue;
      }
      int one = 1;
      ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
        end(s, std::string("connect: ") + std::strerror(errno));
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
      ev.data.ptr = &s;
      ::epoll_ctl(ep_, EPOLL_CTL_ADD, s.fd, &ev);
    }
    auto next_sample = Clock::now();
    std::vector<epoll_event> evs(256);
    while (finished_ < n) {
      const auto now = Clock::now();
      if (now >= deadline) break;
      if (sample_ && now >= next_sample) {
        max_rss_ = std::max(max_rss_, rss_kb(a_.rss_pids));
        next_sample = now + std::chrono::milliseconds(10);
      }
      const auto wake = sample_ ? std::min(next_sample, deadline) : deadline;
      const int wait_ms = static_cast<int>(std::max<long>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1));
      int k = ::epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), wait_ms);
      for (int i = 0; i < k; ++i) {
        auto& s = *static_cast<Stream*>(evs[i].data.ptr);
        if (s.finished) continue;
        if (evs[i].events & EPOLLOUT) send_request(s);
        if (!s.finished && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) receive(s);
      }
    }
    for (auto& s : streams_) {
      if (!s.finished) end(s, "timeout");
    }
    wall_ms = ms_between(start_, Clock::now());
    client_cpu_ms = cpu_ms() - cpu0_;
    if (proxy_cpu0_ >= 0) proxy_cpu_ms = pids_cpu_ms(a_.rss_pids) - proxy_cpu0_;
    if (at_all_first >= 0) max_rss_ = std::max(max_rss_, at_all_first);
  }

  const std::vector<Stream>& streams() const { return streams_; }
  long max_rss() const { return max_rss_; }

  long at_all_first = -1;
  int open_at_sample = -1;
  double sample_at_ms = -1;
  int max_streaming = 0;
  double wall_ms = 0, client_cpu_ms = 0;
  double cpu_at_all_first_ms = -1;  // the client's CPU time until every stream had its first token
  double proxy_cpu_ms = -1, proxy_cpu_to_all_first_ms = -1;  // the --rss-pid processes' (10 ms ticks)

 private:
  void send_request(Stream& s) {
    if (s.sent == 0) {  // the first writable event: did the connect succeed?
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
        end(s, std::string("connect: ") + std::strerror(err));
        return;
      }
    }
    if (s.sent >= request_.size()) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = &s;
      ::epoll_ctl(ep_, EPOLL_CTL_MOD, s.fd, &ev);  // sent: only reads from here
      return;
    }
    ssize_t w = ::send(s.fd, request_.data() + s.sent, request_.size() - s.sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) end(s, std::string("send: ") + std::strerror(errno));
      return;
    }
    s.sent += static_cast<std::size_t>(w);
  }

  void receive(Stream& s) {
    char buf[16384];
    for (;;) {
      ssize_t r = ::recv(s.fd, buf, sizeof buf, 0);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        end(s, std::string("recv: ") + std::strerror(errno));
        return;
      }
      if (r == 0) {
        end(s, s.done ? "" : "closed before end");
        return;
      }
      s.raw.append(buf, static_cast<std::size_t>(r));
      if (!parse(s)) return;
    }
  }

  // Parses what arrived; false when the stream ended.
  bool parse(Stream& s) {
    if (!s.head_seen) {
      const auto head_end = s.raw.find("\r\n\r\n");
      if (head_end == std::string::npos) return true;
      std::string head = s.raw.substr(0, head_end);
      std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
      const int status = head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
      if (status != 200) {
        end(s, "http " + std::to_string(status));
        return false;
      }
      s.chunked = head.find("\r\ntransfer-encoding: chunked") != std::string::npos;
      s.head_seen = true;
      s.raw.erase(0, head_end + 4);
    }
    std::size_t at = 0;
    if (!s.chunked) {
      if (!body(s, std::string_view(s.raw))) return false;
      s.raw.clear();
      return true;
    }
    while (at < s.raw.size()) {
      if (s.chunk_left > 0) {
        const std::size_t take = std::min<std::size_t>(s.chunk_left, s.raw.size() - at);
        if (!body(s, std::string_view(s.raw).substr(at, take))) return false;
        at += take;
        s.chunk_left -= static_cast<long>(take);
        if (s.chunk_left == 0) s.chunk_left = -1;
        continue;
      }
      const auto eol = s.raw.find("\r\n", at);
      if (eol == std::string::npos) break;
      if (s.chunk_left == -1) {  // the CRLF after a chunk's data
        s.chunk_left = 0;
        at = eol + 2;
        continue;
      }
      const long size = std::strtol(s.raw.c_str() + at, nullptr, 16);
      at = eol + 2;
      if (size == 0) {
        end(s, s.done ? "" : "no [DONE]");
        return false;
      }
      s.chunk_left = size;
    }
    s.raw.erase(0, at);
    return true;
  }

  // Body bytes in order; false when the stream ended.
  bool body(Stream& s, std::string_view b) {
    for (char c : b) {
      if (c != '\n') {
        s.line.push_back(c);
        continue;
      }
      if (!s.line.empty() && s.line.back() == '\r') s.line.pop_back();
      if (s.line.starts_with("data:")) event(s, std::string_view(s.line).substr(5));
      s.line.clear();
      if (s.done) {
        end(s, "");
        return false;
      }
    }
    return true;
  }

  void event(Stream& s, std::string_view data) {
    while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
    if (s.ttft_ms < 0) {
      const auto now = Clock::now();
      s.ttft_ms = ms_between(s.t0, now);
      ++firsts_;
      max_streaming = std::max(max_streaming, firsts_ - ended_after_first_);
      if (sample_ && firsts_ == static_cast<int>(streams_.size())) {
        at_all_first = rss_kb(a_.rss_pids);  // every stream has had its first token
        open_at_sample = firsts_ - ended_after_first_;
        sample_at_ms = ms_between(start_, now);
        cpu_at_all_first_ms = cpu_ms() - cpu0_;
        if (proxy_cpu0_ >= 0) proxy_cpu_to_all_first_ms = pids_cpu_ms(a_.rss_pids) - proxy_cpu0_;
      }
    }
    if (data == "[DONE]") {
      s.done = true;
      return;
    }
    ++s.events;
    if (data.find("\"error\"") != std::string_view::npos && s.error.empty()) s.error = "error event";
  }

  void end(Stream& s, std::string why) {
    if (s.finished) return;
    s.finished = true;
    ++finished_;
    if (s.ttft_ms >= 0) ++ended_after_first_;
    if (s.error.empty()) {
      if (!why.empty()) s.error = std::move(why);
      else if (!s.done) s.error = "no [DONE]";
      else if (s.events == 0) s.error = "no events";
    }
    if (s.fd >= 0) {
      ::epoll_ctl(ep_, EPOLL_CTL_DEL, s.fd, nullptr);
      ::close(s.fd);
      s.fd = -1;
    }
  }

  const Args& a_;
  int ep_;
  std::string request_;
  bool sample_;
  std::vector<Stream> streams_;
  Clock::time_point start_;
  double cpu0_ = 0, proxy_cpu0_ = -1;
  int finished_ = 0, firsts_ = 0, ended_after_first_ = 0;
  long max_rss_ = -1;
};

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return -1;
  long i = static_cast<long>(std::ceil(p / 100 * static_cast<double>(sorted.size()))) - 1;
  i = std::clamp<long>(i, 0, static_cast<long>(sorted.size()) - 1);
  return sorted[static_cast<std::size_t>(i)];
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out.push_back(c);
  }
  return out + "\"";
}

std::string num(double v) {
  if (v < 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const std::string body = "{\"model\":" + json_string(a.model) +
                           ",\"messages\":[{\"role\":\"user\",\"content\":\"Write a short story about a river.\"}]"
                           ",\"max_tokens\":" + std::to_string(a.max_tokens) + ",\"stream\":true}";
  std::string request = "POST " + a.path + " HTTP/1.1\r\nHost: " + a.host + ":" + std::to_string(a.port) +
                        "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n";
  if (!a.key.empty()) request += "Authorization: Bearer " + a.key + "\r\n";
  request += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;

  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) usage("epoll_create1 failed");
  if (a.warmup > 0) Batch(a, ep, request, false).run(a.warmup);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long idle = rss_kb(a.rss_pids);
  Batch b(a, ep, request, true);
  b.run(a.n);

  std::vector<double> ttfts;
  std::map<std::string, int> kinds;
  int ok = 0;
  for (const auto& s : b.streams()) {
    if (s.ttft_ms >= 0) ttfts.push_back(s.ttft_ms);
    if (s.error.empty()) ++ok;
    else ++kinds[s.error];
  }
  std::sort(ttfts.begin(), ttfts.end());
  std::string errs = "{";
  for (const auto& [k, v] : kinds) errs += (errs.size() > 1 ? "," : "") + json_string(k) + ":" + std::to_string(v);
  errs += "}";
  const long peak = b.max_rss();
  const auto rss = [](long v) { return v < 0 ? std::string("null") : std::to_string(v); };
  std::printf(
      "{\"label\":%s,\"url\":%s,\"n\":%d,\"ok\":%d,\"errors\":%d,\"error_kinds\":%s,"
      "\"ttft_p50_ms\":%s,\"ttft_p99_ms\":%s,\"ttft_max_ms\":%s,\"wall_ms\":%s,\"sample_at_ms\":%s,"
      "\"open_at_sample\":%s,\"max_streaming\":%d,\"rss_idle_kb\":%s,\"rss_all_first_kb\":%s,"
      "\"rss_peak_kb\":%s,\"rss_per_stream_kb\":%s,\"client_cpu_ms\":%s,\"client_cpu_to_all_first_ms\":%s,\"proxy_cpu_ms\":%s,\"proxy_cpu_to_all_first_ms\":%s}\n",
      json_string(a.label).c_str(),
      json_string("http://" + a.host + ":" + std::to_string(a.port) + a.path).c_str(), a.n, ok, a.n - ok,
      errs.c_str(), num(pct(ttfts, 50)).c_str(), num(pct(ttfts, 99)).c_str(), num(pct(ttfts, 100)).c_str(),
      num(b.wall_ms).c_str(), num(b.sample_at_ms).c_str(),
      b.open_at_sample < 0 ? "null" : std::to_string(b.open_at_sample).c_str(), b.max_streaming,
      rss(idle).c_str(), rss(b.at_all_first).c_str(), rss(peak).c_str(),
      idle >= 0 && peak >= 0 ? num(static_cast<double>(peak - idle) / a.n).c_str() : "null",
      num(b.client_cpu_ms).c_str(), num(b.cpu_at_all_first_ms).c_str(), num(b.proxy_cpu_ms).c_str(),
      num(b.proxy_cpu_to_all_first_ms).c_str());
  ::close(ep);
  return 0;
}
