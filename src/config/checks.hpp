#pragma once
// Internal to the config library: text-level validators and formatting shared by every
// section of the loader (YAML values and environment variables alike). Each check_*
// returns "" when the value is fine, else the message of the error.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "config/keys.hpp"
#include "config/models.hpp"
#include "config/server.hpp"

namespace sluice::config::detail {

inline constexpr double kTwo53 = 9007199254740992.0;  // 2^53: largest exactly representable int
inline constexpr long long kMaxI64 = std::numeric_limits<long long>::max();

std::string_view trim(std::string_view s);
std::string q(std::string_view s);  // quoted, cut short, control characters replaced
std::string fmt_num(double v);
std::string fmt_duration(Millis d);
bool parse_i64(std::string_view s, long long& out);
std::string range_msg(long long lo, long long hi, std::string_view got);
std::string check_int(std::string_view s, long long lo, long long hi, long long& out);
std::string check_double(std::string_view s, double lo, double hi, double& out);
std::string check_bool(std::string_view s, bool& out);
std::string check_duration(std::string_view s, Millis min, Millis& out);
bool has_space_or_ctl(std::string_view s);
bool has_ctl(std::string_view s);
// Names that appear in logs and metric labels (key names, tenants, tiers).
std::string check_ident(std::string_view s);
// Secrets: never echoed back in a message.
std::string check_secret(std::string_view s);
// An environment variable's name as errors show it (a secret pasted there is not shown).
std::string env_name_for_error(std::string_view s);
// A client API key's secret: also long enough not to be guessed; names the key.
std::string check_key_secret(std::string_view s, std::string_view name);
std::string check_env_name(std::string_view s);
std::string check_host(std::string_view h);
// An IP literal or "localhost" (rewritten to 127.0.0.1 in place).
std::string check_listen_host(std::string& h);
// "host:port" or "[v6]:port" to listen on; the host is stored without brackets.
std::string check_host_port(std::string_view s, std::string& host, std::uint16_t& port);
// http(s)://host[:port][/path]; fills tls, host, port, path_prefix.
std::string check_url(std::string_view s, Backend& b);
// Like check_url, but a query is allowed.
std::string check_webhook_url(std::string_view s, Backend& b);
std::string env_model_var(std::string_view alias);
std::string local_hostname();
std::string host_for_display(const std::string& h);

}  // namespace sluice::config::detail
