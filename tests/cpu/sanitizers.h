// MLAKIT_SANITIZED: defined in builds checked by ASan, TSan or MSan (the MLAKIT_FUZZ build), whose
// shadow memory reserves terabytes of address space: tests that limit the address space
// (RLIMIT_AS) skip themselves there.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MLAKIT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define MLAKIT_SANITIZED 1
#endif
#endif
