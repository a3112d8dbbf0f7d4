// docs/reasons.md is the one table of reason codes: it must say exactly what SLUICE_REASONS
// says (every code on both sides, with the same HTTP status, error type and enum name).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/reason.hpp"
#include "source_tree.hpp"

namespace {

struct Row {
  int status = 0;
  std::string type;  // "" for none ("—" in the doc)
  std::string name;  // the enum's name
  int line = 0;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "`x`" -> "x"; "—" -> ""; anything else is returned as is (and will not match).
std::string unquote(const std::string& cell) {
  if (cell == "—") return {};
  if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`') return cell.substr(1, cell.size() - 2);
  return "?" + cell;
}

// The rows of the table under "| code | HTTP | error type | enum | when |", by code.
// Problems with the table itself (a duplicate code, a malformed row) go to `errors`.
std::map<std::string, Row> read_table(const std::string& text, std::vector<std::string>& errors) {
  std::map<std::string, Row> rows;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!inside) {
      inside = line.rfind("| code | HTTP | error type | enum |", 0) == 0;
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    if (line.empty() || line[0] != '|') break;  // the end of the table
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream cs(line.substr(1));
    while (std::getline(cs, cell, '|')) cells.push_back(trim(cell));
    if (cells.size() < 5) {
      errors.push_back("line " + std::to_string(n) + ": fewer than 5 cells: " + line);
      continue;
    }
    const std::string code = unquote(cells[0]);
    Row r;
    r.line = n;
    try {
      r.status = std::stoi(cells[1]);
    } catch (...) {
      errors.push_back("line " + std::to_string(n) + ": HTTP is not a number: " + cells[1]);
    }
    r.type = unquote(cells[2]);
    r.name = unquote(cells[3]);
    if (!rows.emplace(code, r).second) errors.push_back("line " + std::to_string(n) + ": `" + code + "` twice");
  }
  return rows;
}

std::string read_doc() {
  std::ifstream f(sluice::test::source_path("docs/reasons.md"), std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Entry {
  const char* name;
  int status;
  const char* type;
  const char* code;
};
constexpr Entry kReasons[] = {
#define SLUICE_REASON_ENTRY(name, status, type, code) {#name, status, type, code},
    SLUICE_REASONS(SLUICE_REASON_ENTRY)
#undef SLUICE_REASON_ENTRY
};

}  // namespace

TEST(ReasonsDoc, TableMatchesTheXMacro) {
  const std::string text = read_doc();
  ASSERT_FALSE(text.empty()) << "cannot read " << sluice::test::source_path("docs/reasons.md");
  std::vector<std::string> errors;
  auto rows = read_table(text, errors);
  ASSERT_FALSE(rows.empty()) << "no table headed \"| code | HTTP | error type | enum | when |\" in docs/reasons.md";
  for (const auto& e : errors) ADD_FAILURE() << "docs/reasons.md " << e;

  for (const Entry& e : kReasons) {
    const auto it = rows.find(e.code);
    if (it == rows.end()) {
      ADD_FAILURE() << "`" << e.code << "` (Reason::" << e.name << ", " << e.status
                    << ") is in SLUICE_REASONS but not in the table of docs/reasons.md";
      continue;
    }
    const Row& r = it->second;
    EXPECT_EQ(r.status, e.status) << "docs/reasons.md line " << r.line << ": HTTP status of `" << e.code << "`";
    EXPECT_EQ(r.type, e.type) << "docs/reasons.md line " << r.line << ": error type of `" << e.code << "`";
    EXPECT_EQ(r.name, e.name) << "docs/reasons.md line " << r.line << ": enum name of `" << e.code << "`";
    rows.erase(it);
  }
  for (const auto& [code, r] : rows) {
    ADD_FAILURE() << "docs/reasons.md line " << r.line << ": `" << code << "` is not in SLUICE_REASONS";
  }
}

// The functions serve what the X-macro says (the doc test above relies on it being the truth).
TEST(ReasonsDoc, FunctionsFollowTheXMacro) {
  for (const Entry& e : kReasons) {
    const auto r = static_cast<sluice::Reason>(&e - kReasons);
    EXPECT_EQ(sluice::http_status(r), e.status) << e.name;
    EXPECT_EQ(sluice::error_type(r), e.type) << e.name;
    EXPECT_EQ(sluice::reason_code(r), e.code) << e.name;
  }
}
