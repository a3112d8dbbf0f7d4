#pragma once
// A real redis-server as a child process on a free loopback port, for the tests.
// Not daemonized: a forked child, stopped by its own pid (signal + waitpid).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

class RedisServer {
 public:
  // $SLUICE_REDIS_SERVER, else redis-server on PATH, else /usr/bin/redis-server; empty if none.
  static std::string binary() {
    if (const char* env = std::getenv("SLUICE_REDIS_SERVER"); env && *env) {
      return ::access(env, X_OK) == 0 ? env : "";
    }
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
    path += ":/usr/bin:/usr/local/bin";
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');) {
      if (dir.empty()) continue;
      std::string candidate = dir + "/redis-server";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return "";
  }

  // A port nobody listens on right now (the kernel's pick for an ephemeral bind).
  static std::uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }

  static bool accepts(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }

  // `port` 0: a free one is picked at the first start; else exactly that port.
  explicit RedisServer(std::vector<std::string> extra_args = {}, std::uint16_t port = 0)
      : extra_(std::move(extra_args)), port_(port), restartable_(port != 0) {
    char tmpl[] = "/tmp/sluice-redis-XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~RedisServer() {
    stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // Starts on a fresh free port (retrying if another process took it meanwhile), or on
  // the same port as before once it has run (a restart) or if one was given. Returns an
  // error text or "".
  std::string start() {
    if (running()) return "";
    const std::string bin = binary();
    if (bin.empty()) return "redis-server not found (apt-get install redis-server, or set SLUICE_REDIS_SERVER)";
    std::string err;
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (port_ == 0 || (!restartable_ && attempt > 0)) port_ = free_port();
      err = spawn(bin);
      if (err.empty()) {
        restartable_ = true;
        return "";
      }
      if (restartable_) break;  // a restart must keep its port
    }
    return err;
  }

  // Stops it by its pid: `sig` (SIGTERM by default), then SIGKILL if still alive after 5 s.
  void stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);  // in case it was paused
    ::kill(pid_, sig);
    reap(std::chrono::seconds(5));
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap(std::chrono::seconds(30));
    }
  }
  void pause() { if (pid_ > 0) ::kill(pid_, SIGSTOP); }
  void resume() { if (pid_ > 0) ::kill(pid_, SIGCONT); }

  std::string log_tail() const {
    std::ifstream in(dir_ + "/redis.log");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  }

 private:
  std::string spawn(const std::string& bin) {
    std::vector<std::string> args{bin, "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--daemonize", "no",
                                  "--dir", dir_, "--logfile", dir_ + "/redis.log"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // fork + exec (not posix_spawn) to set PR_SET_PDEATHSIG: if the test binary crashes,
    // the server dies with it instead of lingering. Only async-signal-safe calls in the child.
    const pid_t pid = ::fork();
    if (pid < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return "redis-server exited at start (port " + std::to_string(port_) + "): " + log_tail();
      }
      // Ours, not another test's server that took the port meanwhile: its log says so.
      if (logged_ready() && accepts(port_)) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop(SIGKILL);
    return "redis-server did not accept connections within 10 s: " + log_tail();
  }

  // Redis logs "<pid>:M ... Ready to accept connections" once it listens.
  bool logged_ready() const {
    std::ifstream in(dir_ + "/redis.log");
    const std::string prefix = std::to_string(pid_) + ":";
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0 && line.find("eady to accept connections") != std::string::npos) return true;
    }
    return false;
  }

  void reap(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) {
        pid_ = 0;
        return;
      }
      if (std::chrono::steady_clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::vector<std::string> extra_;
  std::string dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = 0;
  bool restartable_ = false;
};

}  // namespace sluice::test
