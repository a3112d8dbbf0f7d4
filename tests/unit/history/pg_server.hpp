#pragma once
// A real PostgreSQL server for the tests: initdb into a temp dir, postgres on a free
// loopback port, stopped by its own pid. PostgreSQL refuses to run as root, so as root the
// child switches to the postgres user before exec (fork + setuid instead of runuser: the
// pid we hold is then the postmaster's own, and PR_SET_PDEATHSIG kills it with the test).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

class PgServer {
 public:
  // $SLUICE_PG_BIN, else Debian's PostgreSQL 15.
  static std::string bin_dir() {
    const char* env = std::getenv("SLUICE_PG_BIN");
    return env && *env ? env : "/usr/lib/postgresql/15/bin";
  }

  // A port nobody listens on right now (the kernel's pick for an ephemeral bind).
  static std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
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
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }

  PgServer() {
    char tmpl[] = "/tmp/sluice-pg-XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
    if (::getuid() == 0) {
      if (const passwd* pw = ::getpwnam("postgres")) {
        uid_ = pw->pw_uid;
        gid_ = pw->pw_gid;
        if (!dir_.empty() && ::chown(dir_.c_str(), uid_, gid_) != 0) dir_.clear();
      }
    }
  }
  ~PgServer() {
    stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url(const std::string& db) const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }

  // initdb at the first start, then the server (on the port it had before, if it ran).
  // Returns an error text or "".
  std::string start() {
    if (pid_ > 0) return "";
    if (dir_.empty()) return "no temp dir (or it could not be given to the postgres user)";
    if (::getuid() == 0 && uid_ == 0) return "running as root and there is no postgres user";
    if (!std::filesystem::exists(dir_ + "/data/PG_VERSION")) {
      const pid_t p = spawn({bin_dir() + "/initdb", "-D", dir_ + "/data", "-A", "trust", "-U", "postgres", "-N"},
                            dir_ + "/initdb.log");
      int status = 0;
      if (p < 0 || ::waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return "initdb failed: " + tail(dir_ + "/initdb.log");
      }
    }
    std::string err;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (!ran_) port_ = free_port();
      if ((err = launch()).empty()) {
        ran_ = true;
        return "";
      }
      if (ran_) break;  // a restart must keep its port
    }
    return err;
  }

  // Fast shutdown (SIGINT), SIGKILL if it has not exited within 10 s.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGINT);
    if (!reap(std::chrono::seconds(10))) {
      ::kill(pid_, SIGKILL);
      reap(std::chrono::seconds(10));
    }
    pid_ = 0;
  }

  // Runs one SQL statement with psql; its unaligned output, or nullopt (see last_error()).
  std::optional<std::string> psql(const std::string& db, const std::string& sql) {
    std::string cmd = bin_dir() + "/psql -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p " + std::to_string(port_) +
                      " -U postgres -d " + db + " -c '";
    for (char c : sql) cmd += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += "' 2>&1";
    std::FILE* f = ::popen(cmd.c_str(), "r");
    if (!f) return std::nullopt;
    std::string out;
    std::array<char, 4096> buf;
    for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), f)) > 0;) out.append(buf.data(), n);
    const int status = ::pclose(f);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (status != 0) {
      last_error_ = out;
      return std::nullopt;
    }
    return out;
  }
  std::string create_database(const std::string& db) {
    return psql("postgres", "CREATE DATABASE " + db) ? "" : "CREATE DATABASE " + db + ": " + last_error_;
  }
  const std::string& last_error() const { return last_error_; }

 private:
  std::string launch() {
    pid_ = spawn({bin_dir() + "/postgres", "-D", dir_ + "/data", "-k", dir_, "-p", std::to_string(port_), "-c",
                  "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"},
                 dir_ + "/postgres.log");
    if (pid_ < 0) return "fork failed";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return "postgres exited at start (port " + std::to_string(port_) + "): " + tail(dir_ + "/postgres.log");
      }
      // postmaster.pid names our pid and says "ready" once it accepts connections.
      if (pidfile_ready() && accepts(port_)) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    return "postgres did not become ready within 30 s: " + tail(dir_ + "/postgres.log");
  }

  bool pidfile_ready() const {
    std::ifstream in(dir_ + "/data/postmaster.pid");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines.size() >= 8 && lines[0] == std::to_string(pid_) && lines[7].find("ready") == 0;
  }

  pid_t spawn(std::vector<std::string> args, const std::string& log) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    // Child: only async-signal-safe calls.
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    if (uid_ != 0 && (::setgroups(0, nullptr) != 0 || ::setgid(gid_) != 0 || ::setuid(uid_) != 0)) ::_exit(126);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // after setuid: a credential change clears it
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }

  bool reap(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  static std::string tail(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  }

  std::string dir_, last_error_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::uint16_t port_ = 0;
  pid_t pid_ = 0;
  bool ran_ = false;
};

}  // namespace sluice::test
