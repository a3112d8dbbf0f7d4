#include <algorithm>
#include <new>

#include "filters/filter.hpp"

namespace sluice::filters {

boost::asio::awaitable<Next> Filter::wait(Phase, Request&, void*, Stop&) { co_return Next::go; }

void Chain::add(std::unique_ptr<Filter> f) {
  if (!f) return;
  const std::size_t align = std::max<std::size_t>(f->state_align(), 1);
  const std::size_t offset = (state_bytes_ + align - 1) / align * align;
  state_bytes_ = offset + f->state_size();
  state_align_ = std::max(state_align_, align);
  phases_ |= f->phases();
  filters_.push_back({std::move(f), offset});
}

Pass::Pass(Chain& chain, Request& req) : chain_(chain), req_(req) {
  if (chain_.state_bytes_ <= kInline && chain_.state_align_ <= alignof(std::max_align_t)) {
    states_ = inline_;
  } else {
    heap_ = static_cast<std::byte*>(::operator new(chain_.state_bytes_, std::align_val_t(chain_.state_align_)));
    states_ = heap_;
  }
  std::size_t made = 0;
  try {
    for (; made < chain_.filters_.size(); ++made) chain_.filters_[made].filter->make_state(state(made));
  } catch (...) {
    while (made > 0) --made, chain_.filters_[made].filter->drop_state(state(made));
    if (heap_) ::operator delete(heap_, std::align_val_t(chain_.state_align_));
    throw;
  }
}

Pass::~Pass() {
  for (std::size_t i = chain_.filters_.size(); i > 0; --i) chain_.filters_[i - 1].filter->drop_state(state(i - 1));
  if (heap_) ::operator delete(heap_, std::align_val_t(chain_.state_align_));
}

Next Pass::run(Phase p) {
  if (!(chain_.phases_ & bit(p))) return Next::go;
  for (std::size_t i = 0; i < chain_.filters_.size(); ++i) {
    Filter& f = *chain_.filters_[i].filter;
    if (!(f.phases() & bit(p))) continue;
    if (p == Phase::admit) admitted_ = i + 1;
    const Next n = f.on(p, req_, state(i), stop_);
    if (n != Next::go) {
      at_ = i;
      return n;
    }
  }
  return Next::go;
}

boost::asio::awaitable<Next> Pass::resume(Phase p) {
  for (std::size_t i = at_;;) {
    Filter& f = *chain_.filters_[i].filter;
    const Next waited = co_await f.wait(p, req_, state(i), stop_);
    if (waited != Next::go) co_return Next::stop;  // wait() answers go or stop
    // The filters after it, as run() would; one that waits is awaited here.
    Next n = Next::go;
    for (++i; i < chain_.filters_.size(); ++i) {
      Filter& g = *chain_.filters_[i].filter;
      if (!(g.phases() & bit(p))) continue;
      if (p == Phase::admit) admitted_ = i + 1;
      n = g.on(p, req_, state(i), stop_);
      if (n != Next::go) break;
    }
    if (n != Next::wait) co_return n;
  }
}

void Pass::end() {
  if (ended_) return;
  ended_ = true;
  for (std::size_t i = admitted_; i > 0; --i) {
    Filter& f = *chain_.filters_[i - 1].filter;
    if (f.phases() & bit(Phase::end)) f.end(req_, state(i - 1));
  }
}

}  // namespace sluice::filters
