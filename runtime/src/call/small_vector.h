// A vector that holds up to N elements in itself and goes to the heap only beyond: the per-call
// lists (per-batch lengths, per-head slopes) of common shapes then cost no heap allocation
// (tests/allocation_test.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <vector>

namespace attention::detail {

template <typename T, size_t N>
class SmallVector {
 public:
  SmallVector() = default;
  SmallVector(size_t n, const T& value) { assign(n, value); }
  SmallVector(std::initializer_list<T> values) { insert(end(), values); }

  void assign(size_t n, const T& value) {
    clear();
    for (size_t i = 0; i < n; ++i) push_back(value);
  }
  void push_back(const T& value) {
    if (!on_heap_ && size_ < N) {
      inline_[size_++] = value;
      return;
    }
    if (!on_heap_) {
      heap_.assign(inline_.begin(), inline_.begin() + size_);
      on_heap_ = true;
    }
    heap_.push_back(value);
    ++size_;
  }
  // Inserts [first, last) before `at` (an element's address, or end()).
  template <typename It>
  void insert(T* at, It first, It last) {
    const size_t offset = static_cast<size_t>(at - begin()), old_size = size_;
    for (; first != last; ++first) push_back(*first);  // may move the storage: offsets only
    std::rotate(begin() + offset, begin() + old_size, end());
  }
  void insert(T* at, std::initializer_list<T> values) { insert(at, values.begin(), values.end()); }
  void insert(T* at, const T& value) { insert(at, &value, &value + 1); }
  void clear() {
    size_ = 0;
    heap_.clear();
    on_heap_ = false;
  }

  T* data() { return on_heap_ ? heap_.data() : inline_.data(); }
  const T* data() const { return on_heap_ ? heap_.data() : inline_.data(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

 private:
  std::array<T, N> inline_{};
  std::vector<T> heap_;
  size_t size_ = 0;
  bool on_heap_ = false;
};

}  // namespace attention::detail
