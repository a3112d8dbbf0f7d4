#pragma once
// Internal to src/store (and its fuzz target, tests/fuzz): RESP2 bytes from the server ->
// RedisReply trees, over hiredis' reader. Incremental: replies may arrive split across
// reads, several per read.
#include <cstddef>
#include <memory>
#include <string>

#include "store/redis.hpp"

struct redisReader;  // hiredis; its header stays in resp.cpp

namespace sluice::store::detail {

class RespReader {
 public:
  RespReader();  // throws std::bad_alloc
  ~RespReader();
  RespReader(const RespReader&) = delete;
  RespReader& operator=(const RespReader&) = delete;

  // Appends bytes read from the server. False on a protocol error (see error()).
  bool feed(const char* data, std::size_t n);
  // The next complete reply into `out`, or leaves `out` empty when more bytes are needed.
  // False on a protocol error: the stream cannot be read further.
  bool next(std::unique_ptr<RedisReply>& out);
  std::string error() const;

 private:
  redisReader* reader_;
};

}  // namespace sluice::store::detail
