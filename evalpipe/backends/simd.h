/* The vector type the engine's C kernels are written in, as wide as this CPU's widest
 * float registers (the kernels are built with -march=native): 16 floats with AVX-512,
 * 8 with AVX/AVX2, else 4 (SSE, NEON). The kernels were first written for 16 lanes
 * alone; with AVX2 only, a 64-byte vector has no register to live in and neither kernel
 * built, so such CPUs silently ran torch's slower paths.
 *
 * Register tiles that hold several vectors are sized per width by each kernel (AVX-512
 * has 32 vector registers, AVX2 16). Included by native.py's build (-I this folder). */
#ifndef EVALPIPE_SIMD_H
#define EVALPIPE_SIMD_H

#include <stdint.h>

#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif

typedef float vec __attribute__((vector_size(4 * LANES)));
typedef int32_t ivec __attribute__((vector_size(4 * LANES)));

/* Keeps a loaded vector in a register: otherwise the compiler folds the load into every
 * multiply-add that uses it, and on CPUs that split wide loads the loads, not the
 * multiply-adds, then bound the loop. */
#if defined(__x86_64__) || defined(__i386__)
#define in_register(x) __asm__("" : "+v"(x))
#elif defined(__aarch64__)
#define in_register(x) __asm__("" : "+w"(x))
#else
#define in_register(x) ((void)0)
#endif

static inline vec load(const float *p) {
    vec x;
    __builtin_memcpy(&x, p, sizeof x); /* unaligned */
    return x;
}

static inline void store(float *p, vec x) { __builtin_memcpy(p, &x, sizeof x); }

static inline vec splat(float x) { return (vec){0} + x; }

#endif
