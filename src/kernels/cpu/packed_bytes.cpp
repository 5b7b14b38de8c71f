// Memory for packed weights: huge-page-advised mappings, shared between the mid-sized weights (a MoE
// layer's experts) so that they too sit on 2 MiB pages instead of thousands of 4 KB ones.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <sys/mman.h>

#include "core/error.h"
#include "kernels/cpu/linear_packed.h"

// ASan does not see inside a mapping: under it the arena poisons what no live slice owns, so a read past
// one expert's weight into the next, or of a freed slice, is still reported.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define DSINFER_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define DSINFER_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define DSINFER_POISON(p, n) ((void)(p), (void)(n))
#define DSINFER_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace dsinfer::kernels::detail {

namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kAlign = 64;

std::atomic<int64_t> g_chunks_mapped{0};

// A fresh anonymous mapping (zero pages) of at least n bytes whose start is 2 MiB aligned, advised for
// transparent huge pages. Returns the aligned start; map/length receive what to munmap.
uint8_t* map_huge(size_t n, void** map, size_t* length) {
  *length = (n + kHuge - 1) / kHuge * kHuge + kHuge;  // over-map by 2 MiB to align the start
  *map = mmap(nullptr, *length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  DSINFER_CHECK(*map != MAP_FAILED, "out of memory mapping ", n, " bytes for a Linear weight");
  const uintptr_t start = (reinterpret_cast<uintptr_t>(*map) + kHuge - 1) / kHuge * kHuge;
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(start), *length - (start - reinterpret_cast<uintptr_t>(*map)), MADV_HUGEPAGE);
#endif
  return reinterpret_cast<uint8_t*>(start);
}

}  // namespace

struct ArenaChunk {
  void* map = nullptr;
  size_t length = 0;
  uint8_t* base = nullptr;
  size_t used = 0;
  // Live slices, plus one while the arena still fills this chunk.
  std::atomic<int64_t> refs{1};
};

namespace {

void release(ArenaChunk* c) {
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    DSINFER_UNPOISON(c->map, c->length);  // the addresses may be mapped again for anything
    munmap(c->map, c->length);
    delete c;
    g_chunks_mapped.fetch_sub(1, std::memory_order_relaxed);
  }
}

// Slices are never reused (a chunk is unmapped whole), so they are zero like the fresh pages under them.
class Arena {
 public:
  Bytes allocate(size_t n) {
    const size_t size = (n + kAlign - 1) / kAlign * kAlign;
    std::lock_guard lock(mutex_);
    if (current_ == nullptr || current_->used + size > kArenaChunkBytes) {
      if (current_ != nullptr) release(current_);
      current_ = new ArenaChunk;
      current_->base = map_huge(kArenaChunkBytes, &current_->map, &current_->length);
      DSINFER_POISON(current_->base, kArenaChunkBytes);
      g_chunks_mapped.fetch_add(1, std::memory_order_relaxed);
    }
    uint8_t* p = current_->base + current_->used;
    current_->used += size;
    current_->refs.fetch_add(1, std::memory_order_relaxed);
    DSINFER_UNPOISON(p, n);
    return Bytes(p, FreeBytes{nullptr, n, current_});
  }

 private:
  std::mutex mutex_;
  ArenaChunk* current_ = nullptr;  // kept for the process's lifetime once made (at most one chunk)
};

Arena& arena() {
  static Arena* a = new Arena;  // never destroyed: weights freed during static destruction still find it
  return *a;
}

}  // namespace

void FreeBytes::operator()(uint8_t* p) const {
  if (map != nullptr) {
    munmap(map, map_length);
  } else if (chunk != nullptr) {
    DSINFER_POISON(p, map_length);
    release(chunk);
  } else {
    std::free(p);
  }
}

Bytes allocate_bytes(int64_t bytes) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 64));
  if (n < static_cast<size_t>(kArenaMinBytes)) {
    void* p = nullptr;
    DSINFER_CHECK(posix_memalign(&p, kAlign, n) == 0, "out of memory allocating ", bytes, " bytes for a Linear weight");
    std::memset(p, 0, n);
    return Bytes(static_cast<uint8_t*>(p));
  }
  if (n < kHuge) return arena().allocate(n);
  void* map = nullptr;
  size_t length = 0;
  uint8_t* start = map_huge(n, &map, &length);
  return Bytes(start, FreeBytes{map, length, nullptr});
}

int64_t arena_chunks_mapped() { return g_chunks_mapped.load(std::memory_order_relaxed); }

}  // namespace dsinfer::kernels::detail
