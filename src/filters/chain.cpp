#include <algorithm>
#include <exception>
#include <new>
#include <stdexcept>

#include "filters/filter.hpp"

namespace sluice::filters {

boost::asio::awaitable<Next> Filter::wait(Phase, Request&, void*, Stop&) { co_return Next::go; }

void Chain::add(std::unique_ptr<Filter> f) {
  if (!f) return;
  if (filters_.size() == kMaxFilters) throw std::length_error("a filter chain holds at most 64 filters");
  const std::size_t align = std::max<std::size_t>(f->state_align(), 1);
  const std::size_t offset = (state_bytes_ + align - 1) / align * align;
  state_bytes_ = offset + f->state_size();
  state_align_ = std::max(state_align_, align);
  phases_ |= f->phases();
  filters_.push_back({std::move(f), offset});
}

Pass::Pass(std::shared_ptr<const Chain> chain, Request& req) : chain_(std::move(chain)), req_(req) {
  if (chain_->state_bytes_ <= kInline && chain_->state_align_ <= alignof(std::max_align_t)) {
    states_ = inline_;
  } else {
    heap_ = static_cast<std::byte*>(::operator new(chain_->state_bytes_, std::align_val_t(chain_->state_align_)));
    states_ = heap_;
  }
  std::size_t made = 0;
  try {
    for (; made < chain_->filters_.size(); ++made) filter(made).make_state(state(made));
  } catch (...) {
    while (made > 0) --made, filter(made).drop_state(state(made));
    if (heap_) ::operator delete(heap_, std::align_val_t(chain_->state_align_));
    throw;
  }
}

Pass::~Pass() {
  for (std::size_t i = chain_->filters_.size(); i > 0; --i) filter(i - 1).drop_state(state(i - 1));
  if (heap_) ::operator delete(heap_, std::align_val_t(chain_->state_align_));
}

Next Pass::step(Phase p, std::size_t from) {
  for (std::size_t i = from; i < chain_->filters_.size(); ++i) {
    Filter& f = filter(i);
    if (!(f.phases() & bit(p))) continue;
    entered_ |= std::uint64_t{1} << i;
    const Next n = f.on(p, req_, state(i), stop_);
    if (n != Next::go) {
      at_ = i;
      return n;
    }
  }
  return Next::go;
}

Next Pass::run(Phase p) {
  if (!(chain_->phases_ & bit(p))) return Next::go;
  return step(p, 0);
}

boost::asio::awaitable<Next> Pass::resume(Phase p) {
  for (;;) {
    const Next waited = co_await filter(at_).wait(p, req_, state(at_), stop_);
    if (waited != Next::go) co_return Next::stop;  // wait() answers go or stop
    const Next n = step(p, at_ + 1);                // the filters after it; one that waits is awaited here
    if (n != Next::wait) co_return n;
  }
}

void Pass::answered() {
  if (answered_ || !(chain_->phases_ & bit(Phase::answered))) return;
  answered_ = true;
  std::exception_ptr first;
  for (std::size_t i = 0; i < chain_->filters_.size(); ++i) {
    if (!(entered_ & (std::uint64_t{1} << i))) continue;
    Filter& f = filter(i);
    if (!(f.phases() & bit(Phase::answered))) continue;
    try {
      f.answered(req_, state(i));
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Pass::end() {
  answered_ = true;
  std::exception_ptr first;
  for (std::size_t i = chain_->filters_.size(); i > 0; --i) {
    const std::uint64_t b = std::uint64_t{1} << (i - 1);
    if (!(entered_ & b)) continue;
    entered_ &= ~b;  // once, even if it throws
    Filter& f = filter(i - 1);
    if (!(f.phases() & bit(Phase::end))) continue;
    try {
      f.end(req_, state(i - 1));
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace sluice::filters
