#pragma once
// Every reply sluice makes itself carries a stable reason code. The code labels the
// metric, the access-log line and the OpenAI-shaped error body, so one table says it all.
#include <cstdint>
#include <string_view>

namespace sluice {

// X(enum, http status, OpenAI error type, code string)
#define SLUICE_REASONS(X)                                                        \
  X(ok, 200, "", "ok")                                                           \
  X(canned_reply, 200, "", "canned_reply")                                       \
  X(queued, 202, "", "queued")                                                   \
  X(bad_json, 400, "invalid_request_error", "invalid_json")                      \
  X(invalid_request, 400, "invalid_request_error", "invalid_request")            \
  X(option_not_allowed, 400, "invalid_request_error", "option_not_allowed")      \
  X(option_out_of_range, 400, "invalid_request_error", "option_out_of_range")    \
  X(too_many_messages, 400, "invalid_request_error", "too_many_messages")        \
  X(guardrail_blocked, 400, "invalid_request_error", "guardrail_blocked")        \
  X(missing_key, 401, "authentication_error", "missing_api_key")                 \
  X(invalid_key, 401, "authentication_error", "invalid_api_key")                 \
  X(model_not_allowed, 403, "permission_error", "model_not_allowed")             \
  X(forbidden, 403, "permission_error", "forbidden")                             \
  X(not_found, 404, "invalid_request_error", "not_found")                        \
  X(model_not_found, 404, "invalid_request_error", "model_not_found")            \
  X(method_not_allowed, 405, "invalid_request_error", "method_not_allowed")      \
  X(conflict, 409, "invalid_request_error", "conflict")                          \
  X(cancelled, 410, "invalid_request_error", "cancelled")                        \
  X(body_too_large, 413, "invalid_request_error", "body_too_large")              \
  X(reload_refused, 422, "invalid_request_error", "reload_refused")              \
  X(headers_too_large, 431, "invalid_request_error", "headers_too_large")        \
  X(rate_limited, 429, "rate_limit_error", "rate_limit_exceeded")                \
  X(token_limit_exceeded, 429, "rate_limit_error", "token_limit_exceeded")       \
  X(quota_exceeded, 429, "insufficient_quota", "quota_exceeded")                 \
  X(queue_full, 429, "rate_limit_error", "queue_full")                           \
  X(client_closed, 499, "client_closed", "client_closed")                        \
  X(upstream_unreachable, 502, "upstream_error", "upstream_unreachable")         \
  X(upstream_error, 502, "upstream_error", "upstream_error")                     \
  X(upstream_bad_response, 502, "upstream_error", "upstream_bad_response")       \
  X(upstream_stream_failed, 502, "upstream_error", "upstream_stream_failed")     \
  X(shutting_down, 503, "service_unavailable", "shutting_down")                  \
  X(queue_timeout, 503, "service_unavailable", "queue_timeout")                  \
  X(limiter_unavailable, 503, "service_unavailable", "rate_limiter_unavailable") \
  X(history_unavailable, 503, "service_unavailable", "history_unavailable")     \
  X(store_unavailable, 503, "service_unavailable", "store_unavailable")         \
  X(guard_unavailable, 503, "service_unavailable", "guard_unavailable")         \
  X(no_backend, 503, "service_unavailable", "no_backend_available")             \
  X(local_resources, 503, "service_unavailable", "gateway_resources_exhausted") \
  X(too_many_connections, 503, "service_unavailable", "too_many_connections")   \
  X(upstream_timeout, 504, "timeout_error", "upstream_timeout")                  \
  X(first_token_timeout, 504, "timeout_error", "first_token_timeout")            \
  X(upstream_idle_timeout, 504, "timeout_error", "upstream_idle_timeout")        \
  X(internal, 500, "server_error", "internal_error")                             \
  X(request_too_large, 400, "invalid_request_error", "request_too_large_for_limit")

enum class Reason : std::uint8_t {
#define SLUICE_REASON_ENUM(name, status, type, code) name,
  SLUICE_REASONS(SLUICE_REASON_ENUM)
#undef SLUICE_REASON_ENUM
};

int http_status(Reason r) noexcept;
std::string_view error_type(Reason r) noexcept;
std::string_view reason_code(Reason r) noexcept;

// {"error":{"message":...,"type":...,"code":...,"param":...}}
std::string error_body(Reason r, std::string_view message, std::string_view param = {});

}  // namespace sluice
