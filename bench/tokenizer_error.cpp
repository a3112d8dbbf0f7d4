// tokenizer_error: how far estimate() is from the exact BPE count, and how fast the BPE is.
//
//   tokenizer_error [--ranks DIR] [--seconds S] [--min-tokens N] LABEL=PATH...
//   tokenizer_error --calibrate [--ranks DIR] LABEL=PATH...
//
// PATH is a file or a directory (read recursively: text and source files, skipping
// node_modules, build* and .git). Each file is cut into paragraphs (runs of lines between
// blank lines); each paragraph is one chunk. Per LABEL and encoding it prints the number of
// chunks, the mean, median and p95 of |estimate - exact| / exact per chunk, the mean signed
// error, the error of the total, and for comparison the mean error of ceil(bytes / 4). Then the BPE's single-thread throughput over all
// the text: count() and encode() in MB/s and tokens/s, and estimate() in MB/s.
//
// --calibrate fits the estimator's weights instead (least squares on the relative error
// per chunk, weights kept >= 0, digit groups fixed at 1) and prints them as C++.
// bench/tokenizer_error.sh builds this and runs both on the corpora of docs/tokenizer.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/estimate_features.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace sluice::tokenizer;
using detail::kFeatureCount;

namespace {

struct Chunk {
  std::string label;
  std::string text;
};

bool wanted(const fs::path& p) {
  static const char* exts[] = {".md", ".txt", ".cpp", ".hpp", ".h", ".cc", ".c", ".mjs", ".js",
                               ".lua", ".sh", ".yaml", ".yml", ".py", ".cmake"};
  const std::string name = p.filename().string();
  if (name == "CMakeLists.txt" || name == "Makefile") return true;
  for (const char* e : exts) {
    if (p.extension() == e) return true;
  }
  return false;
}

bool skipped_dir(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == "node_modules" || name == ".git" || name.rfind("build", 0) == 0;
}

void add_paragraphs(const std::string& label, const std::string& text, std::vector<Chunk>& out) {
  std::istringstream in(text);
  std::string line, para;
  const auto flush = [&] {
    if (!para.empty()) out.push_back({label, para});
    para.clear();
  };
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      flush();
      continue;
    }
    if (!para.empty()) para += '\n';
    para += line;
  }
  flush();
}

void add_file(const std::string& label, const fs::path& p, std::vector<Chunk>& out, std::size_t& files) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  if (text.size() > (4u << 20) || text.find('\0') != std::string::npos) return;
  ++files;
  add_paragraphs(label, text, out);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Solves A x = b (n x n) by Gaussian elimination with partial pivoting; false if singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& x) {
  const std::size_t n = b.size();
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
    if (std::fabs(a[piv][c]) < 1e-12) return false;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    for (std::size_t r = c + 1; r < n; ++r) {
      const double m = a[r][c] / a[c][c];
      for (std::size_t k = c; k < n; ++k) a[r][k] -= m * a[c][k];
      b[r] -= m * b[c];
    }
  }
  x.assign(n, 0);
  for (std::size_t c = n; c-- > 0;) {
    double s = b[c];
    for (std::size_t k = c + 1; k < n; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return true;
}

struct Sample {
  double f[kFeatureCount];
  double y;
};

// Least squares of sum(((w.f) - y) / y)^2 with w >= 0 and the weights in `fixed` as given:
// features whose weight comes out negative (or that never occur) are fixed at 0 and the
// rest refit.
std::vector<double> fit(const std::vector<Sample>& samples, const std::map<int, double>& fixed) {
  std::vector<bool> active(kFeatureCount, true);
  std::vector<double> w(kFeatureCount, 0.0);
  for (const auto& [k, v] : fixed) {
    active[k] = false;
    w[k] = v;
  }
  for (int k = 0; k < kFeatureCount; ++k) {
    bool seen = false;
    for (const auto& s : samples) seen = seen || s.f[k] > 0;
    if (!seen) active[k] = false;
  }
  for (;;) {
    std::vector<int> idx;
    for (int k = 0; k < kFeatureCount; ++k)
      if (active[k]) idx.push_back(k);
    const std::size_t m = idx.size();
    std::vector<std::vector<double>> ata(m, std::vector<double>(m, 0.0));
    std::vector<double> atb(m, 0.0);
    for (const auto& s : samples) {
      const double inv = 1.0 / s.y;
      double known = 0;
      for (const auto& [k, v] : fixed) known += v * s.f[k];
      const double target = (s.y - known) * inv;
      for (std::size_t r = 0; r < m; ++r) {
        const double fr = s.f[idx[r]] * inv;
        atb[r] += fr * target;
        for (std::size_t c = 0; c < m; ++c) ata[r][c] += fr * s.f[idx[c]] * inv;
      }
    }
    // A little ridge keeps rare features from taking extreme weights.
    for (std::size_t r = 0; r < m; ++r) ata[r][r] += 1e-3;
    std::vector<double> x;
    if (!solve(ata, atb, x)) {
      std::fprintf(stderr, "calibration: singular system\n");
      return w;
    }
    int worst = -1;
    double most_negative = 0;
    for (std::size_t r = 0; r < m; ++r)
      if (x[r] < most_negative) {
        most_negative = x[r];
        worst = idx[r];
      }
    if (worst < 0) {
      for (std::size_t r = 0; r < m; ++r) w[idx[r]] = x[r];
      return w;
    }
    active[worst] = false;
    w[worst] = 0;
  }
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string rank_dir = std::string(SLUICE_SOURCE_DIR) + "/" + std::string(kDefaultRankDir);
  double seconds = 2.0;
  bool calibrate = false;
  std::size_t min_tokens = 1;
  std::size_t worst = 0;
  std::vector<std::pair<std::string, std::string>> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) {
      rank_dir = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else if (a == "--min-tokens" && i + 1 < argc) {
      min_tokens = std::stoul(argv[++i]);
    } else if (a == "--worst" && i + 1 < argc) {
      worst = std::stoul(argv[++i]);
    } else if (a == "--calibrate") {
      calibrate = true;
    } else if (a.find('=') != std::string::npos && a[0] != '-') {
      inputs.emplace_back(a.substr(0, a.find('=')), a.substr(a.find('=') + 1));
    } else {
      std::fprintf(stderr,
                   "usage: tokenizer_error [--calibrate] [--ranks DIR] [--seconds S] [--min-tokens N] [--worst N] "
                   "LABEL=PATH...\n");
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "tokenizer_error: no LABEL=PATH given\n");
    return 2;
  }

  std::string warnings;
  const long rss_before = rss_kib();
  const auto load_start = std::chrono::steady_clock::now();
  const Counter counter = Counter::load_dir(rank_dir, &warnings);
  const double load_s = seconds_since(load_start);
  const long rss_after = rss_kib();
  if (!counter.exact(Encoding::cl100k_base) || !counter.exact(Encoding::o200k_base)) {
    std::fprintf(stderr, "%sRun scripts/fetch-tokenizer.sh first.\n", warnings.c_str());
    return 1;
  }
  if (!calibrate)
    std::printf("Counter::load_dir(%s): %.0f ms, resident memory +%.1f MiB\n", rank_dir.c_str(), 1000 * load_s,
                static_cast<double>(rss_after - rss_before) / 1024);

  std::vector<Chunk> chunks;
  std::vector<std::string> labels;
  std::map<std::string, std::size_t> files;
  for (const auto& [label, path] : inputs) {
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) labels.push_back(label);
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> found;
      for (auto it = fs::recursive_directory_iterator(path, ec); it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (ec) break;
        if (it->is_directory() && skipped_dir(it->path())) {
          it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file() && wanted(it->path())) found.push_back(it->path());
      }
      std::sort(found.begin(), found.end());
      for (const auto& p : found) add_file(label, p, chunks, files[label]);
    } else if (fs::is_regular_file(path, ec)) {
      add_file(label, path, chunks, files[label]);
    } else {
      std::fprintf(stderr, "tokenizer_error: %s: not found\n", path.c_str());
      return 1;
    }
  }

  const Encoding encodings[] = {Encoding::cl100k_base, Encoding::o200k_base};
  if (calibrate) {
    for (const Encoding e : encodings) {
      // Fixed, not fitted: a digit group is one token (every 1-3 digit string is one);
      // a byte that is not UTF-8 is one token; a four-byte code point outside CJK costs what
      // the emoji blocks U+1F300..U+1FAFF cost on average after a space (too rare in the
      // corpus to fit).
      const Bpe& bpe = *counter.bpe(e);
      double four = 0;
      int nfour = 0;
      for (std::uint32_t cp = 0x1F300; cp < 0x1FB00; ++cp, ++nfour) {
        std::string s = "a ";
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
        four += static_cast<double>(bpe.count(s)) - 1;
      }
      const std::map<int, double> fixed = {
          {detail::kDigitGroups, 1.0}, {detail::kInvalid, 1.0}, {detail::kFour, four / nfour}};
      std::vector<Sample> samples;
      for (const auto& c : chunks) {
        Sample s;
        std::size_t f[kFeatureCount];
        detail::estimate_features(c.text, f);
        for (int k = 0; k < kFeatureCount; ++k) s.f[k] = static_cast<double>(f[k]);
        s.y = static_cast<double>(counter.bpe(e)->count(c.text));
        if (s.y >= static_cast<double>(min_tokens)) samples.push_back(s);
      }
      const auto w = fit(samples, fixed);
      std::printf("    // %s (%zu chunks)\n    {", std::string(encoding_name(e)).c_str(), samples.size());
      for (int k = 0; k < kFeatureCount; ++k) std::printf("%s%.4g", k ? ", " : "", w[k]);
      std::printf("},\n");
    }
    return 0;
  }

  std::printf("chunks: paragraphs of at least %zu exact token(s)\n", min_tokens);
  std::printf("%-10s %-12s %7s %9s %8s %8s %8s %8s %8s %10s\n", "corpus", "encoding", "files", "chunks",
              "mean", "median", "p95", "bias", "total", "bytes/4");
  auto report = [&](const std::string& label, Encoding e) {
    std::vector<double> errs;
    double signed_sum = 0, est_total = 0, exact_total = 0, naive_sum = 0;
    std::size_t nfiles = 0;
    for (const auto& [l, n] : files)
      if (label == "all" || l == label) nfiles += n;
    for (const auto& c : chunks) {
      if (label != "all" && c.label != label) continue;
      const double exact = static_cast<double>(counter.bpe(e)->count(c.text));
      if (exact < static_cast<double>(min_tokens)) continue;
      const double est = static_cast<double>(estimate(c.text, e));
      const double err = (est - exact) / exact;
      errs.push_back(std::fabs(err));
      signed_sum += err;
      naive_sum += std::fabs((std::ceil(static_cast<double>(c.text.size()) / 4) - exact) / exact);
      est_total += est;
      exact_total += exact;
    }
    double mean = 0;
    for (const double x : errs) mean += x;
    mean = errs.empty() ? 0 : mean / static_cast<double>(errs.size());
    std::printf("%-10s %-12s %7zu %9zu %7.1f%% %7.1f%% %7.1f%% %+7.1f%% %+7.1f%% %9.1f%%\n", label.c_str(),
                std::string(encoding_name(e)).c_str(), nfiles, errs.size(), 100 * mean,
                100 * percentile(errs, 0.5), 100 * percentile(errs, 0.95),
                errs.empty() ? 0.0 : 100 * signed_sum / static_cast<double>(errs.size()),
                exact_total > 0 ? 100 * (est_total / exact_total - 1) : 0.0,
                errs.empty() ? 0.0 : 100 * naive_sum / static_cast<double>(errs.size()));
  };
  for (const Encoding e : encodings) {
    for (const auto& l : labels) report(l, e);
    if (labels.size() > 1) report("all", e);
  }

  // --worst N: the chunks with the largest relative error (o200k_base), to study the estimator.
  if (worst > 0) {
    std::vector<std::pair<double, const Chunk*>> errs;
    for (const auto& c : chunks) {
      const double exact = static_cast<double>(counter.bpe(Encoding::o200k_base)->count(c.text));
      if (exact < static_cast<double>(min_tokens)) continue;
      errs.emplace_back((static_cast<double>(estimate(c.text, Encoding::o200k_base)) - exact) / exact, &c);
    }
    std::sort(errs.begin(), errs.end(), [](const auto& a, const auto& b) { return std::fabs(a.first) > std::fabs(b.first); });
    for (std::size_t k = 0; k < std::min(worst, errs.size()); ++k)
      std::printf("\n--- %+.0f%% (%s) exact %zu estimate %zu\n%.400s\n", 100 * errs[k].first, errs[k].second->label.c_str(),
                  counter.bpe(Encoding::o200k_base)->count(errs[k].second->text),
                  estimate(errs[k].second->text, Encoding::o200k_base), errs[k].second->text.c_str());
  }

  // Throughput over all the text, one thread.
  std::string all;
  for (const auto& c : chunks) {
    all += c.text;
    all += "\n\n";
  }
  const double mb = static_cast<double>(all.size()) / 1e6;
  std::printf("\nthroughput, one thread, %.2f MB of the text above, best of runs over %.1f s:\n", mb, seconds);
  for (const Encoding e : encodings) {
    const Bpe& bpe = *counter.bpe(e);
    const std::size_t tokens = bpe.count(all);
    auto best = [&](auto&& fn) {
      double best_s = 1e30;
      const auto start = std::chrono::steady_clock::now();
      do {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        best_s = std::min(best_s, seconds_since(t0));
      } while (seconds_since(start) < seconds);
      return best_s;
    };
    volatile std::size_t sink = 0;
    const double t_count = best([&] { sink = sink + bpe.count(all); });
    const double t_encode = best([&] { sink = sink + bpe.encode(all).size(); });
    const double t_est = best([&] { sink = sink + estimate(all, e); });
    std::printf("  %-12s count %6.1f MB/s %6.2f M tokens/s | encode %6.1f MB/s | estimate %7.1f MB/s | %zu tokens\n",
                std::string(encoding_name(e)).c_str(), mb / t_count, static_cast<double>(tokens) / t_count / 1e6,
                mb / t_encode, mb / t_est, tokens);
  }
  // The worst case: the whole text one piece, so the merge runs on 1 MB at once.
  std::string letters;
  std::uint32_t x = 12345;
  for (int i = 0; i < 1'000'000; ++i) {
    x = x * 1103515245u + 12345u;
    letters += static_cast<char>('a' + (x >> 16) % 26);
  }
  std::printf("one piece of 1 MB (random a-z, no space):");
  for (const Encoding e : encodings) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t tokens = counter.bpe(e)->count(letters);
    std::printf("  %s %.0f ms (%zu tokens)", std::string(encoding_name(e)).c_str(), 1000 * seconds_since(t0), tokens);
  }
  std::printf("\n");
  return 0;
}
