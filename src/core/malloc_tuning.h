// glibc malloc settings for a process that runs model steps. glibc serves blocks above its mmap
// threshold with fresh mappings, and its threshold moves with what the process happened to free
// before: the same forward then faults its multi-megabyte step buffers in again on every step or
// not, depending on history (a 1.5x prefill difference on MEDIUM-V41 from an unrelated change of
// which large arrays a sequence frees). A fixed threshold of 32 MiB keeps every step buffer below it
// in the heap, where freed pages are reused instead of faulted in again.
#pragma once

namespace dsinfer::core {

// Fixes glibc's mmap threshold at 32 MiB and its trim threshold at 256 MiB, unless the user set
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ or the same in GLIBC_TUNABLES (the user's
// settings win). Returns whether it changed anything. Call once at start, before threads
// allocate. No effect on other C libraries.
bool tune_malloc_for_steps();

}  // namespace dsinfer::core
