#include "common/reason.hpp"

#include <string>

#include "common/text.hpp"

namespace sluice {
namespace {
struct Row {
  int status;
  std::string_view type;
  std::string_view code;
};
constexpr Row kRows[] = {
#define SLUICE_REASON_ROW(name, status, type, code) {status, type, code},
    SLUICE_REASONS(SLUICE_REASON_ROW)
#undef SLUICE_REASON_ROW
};
}  // namespace

int http_status(Reason r) noexcept { return kRows[static_cast<int>(r)].status; }
std::string_view error_type(Reason r) noexcept { return kRows[static_cast<int>(r)].type; }
std::string_view reason_code(Reason r) noexcept { return kRows[static_cast<int>(r)].code; }

std::string error_body(Reason r, std::string_view message, std::string_view param) {
  std::string out;
  out.reserve(96 + message.size());
  out += R"({"error":{"message":)";
  append_json_string(out, message);
  out += R"(,"type":)";
  append_json_string(out, error_type(r));
  out += R"(,"code":)";
  append_json_string(out, reason_code(r));
  out += R"(,"param":)";
  if (param.empty()) {
    out += "null";
  } else {
    append_json_string(out, param);
  }
  out += "}}";
  return out;
}

}  // namespace sluice
