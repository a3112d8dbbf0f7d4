#include "common/thread_name.hpp"

#include <pthread.h>

#include <cstring>

namespace sluice {

void name_this_thread(const char* name) noexcept {
  char cut[16];
  std::strncpy(cut, name, sizeof cut - 1);
  cut[sizeof cut - 1] = '\0';
  pthread_setname_np(pthread_self(), cut);  // fails only for a name over 15 characters
}

}  // namespace sluice
