#include "store/resp.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <new>

namespace sluice::store::detail {

// Reply parsing: hiredis' reader builds RedisReply trees directly (no redisReply copy).
// Only the root is heap-allocated; an array's children live in its `elements` vector, and
// hiredis calls freeObject on roots only. The vector grows as the children arrive, never
// to the length the header announces: "*2000000000\r\n" from a broken or hostile server
// would otherwise allocate some 150 GB before a single element came. (An array's address
// may move when its parent grows, but hiredis holds a child only while filling it, and a
// parent gets its next child only after that.)

namespace {

template <class Fill>
void* make_reply(const redisReadTask* task, RedisReply::Type type, Fill fill) noexcept {
  try {  // exceptions must not cross the C parser; nullptr makes it report out-of-memory
    if (task->parent) {
      auto& elements = static_cast<RedisReply*>(task->parent->obj)->elements;
      const auto idx = static_cast<std::size_t>(task->idx);
      if (task->idx < 0 || idx > elements.size()) return nullptr;  // children come in order
      if (idx == elements.size()) elements.emplace_back();
      auto& r = elements[idx];
      r.type = type;
      fill(r);
      return &r;
    }
    auto r = std::make_unique<RedisReply>();
    r->type = type;
    fill(*r);
    return r.release();
  } catch (...) {
    return nullptr;
  }
}

void* create_string(const redisReadTask* task, char* str, size_t len) {
  auto type = task->type == REDIS_REPLY_ERROR    ? RedisReply::Type::error
              : task->type == REDIS_REPLY_STATUS ? RedisReply::Type::status
                                                 : RedisReply::Type::string;
  return make_reply(task, type, [&](RedisReply& r) { r.str.assign(str, len); });
}
void* create_array(const redisReadTask* task, int n) {
  if (n < 0) return nullptr;  // hiredis makes "*-1" a nil; anything else negative is no array
  // A little room up front for the usual short replies; the rest as elements arrive.
  return make_reply(task, RedisReply::Type::array,
                    [&](RedisReply& r) { r.elements.reserve(std::min<std::size_t>(static_cast<std::size_t>(n), 8)); });
}
void* create_integer(const redisReadTask* task, long long v) {
  return make_reply(task, RedisReply::Type::integer, [&](RedisReply& r) { r.integer = v; });
}
void* create_nil(const redisReadTask* task) {
  return make_reply(task, RedisReply::Type::nil, [](RedisReply&) {});
}
void free_reply(void* r) { delete static_cast<RedisReply*>(r); }

redisReplyObjectFunctions kReplyFunctions = {create_string, create_array, create_integer, create_nil, free_reply};

}  // namespace

RespReader::RespReader() : reader_(redisReaderCreateWithFunctions(&kReplyFunctions)) {
  if (!reader_) throw std::bad_alloc();
}

RespReader::~RespReader() { redisReaderFree(reader_); }

bool RespReader::feed(const char* data, std::size_t n) { return redisReaderFeed(reader_, data, n) == REDIS_OK; }

bool RespReader::next(std::unique_ptr<RedisReply>& out) {
  out.reset();
  void* obj = nullptr;
  if (redisReaderGetReply(reader_, &obj) != REDIS_OK) return false;
  out.reset(static_cast<RedisReply*>(obj));
  return true;
}

std::string RespReader::error() const { return reader_->errstr; }

}  // namespace sluice::store::detail
