/* The vector type the engine's C kernels are written in, as wide as the target's widest
 * float registers (the kernels are built with -march=native, or the target native.py is
 * told): 16 floats with AVX-512, 8 with AVX/AVX2, else 4 (SSE, NEON). The kernels were first written for 16 lanes
 * alone; with AVX2 only, a 64-byte vector has no register to live in and neither kernel
 * built, so such CPUs silently ran torch's slower paths.
 *
 * Register tiles that hold several vectors are sized per width by each kernel (AVX-512
 * has 32 vector registers, AVX2 16). Included by native.py's build (-I this folder);
 * every kernel is one translation unit, so each library gets its own simd_lanes. */
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

/* The width this library was built for (native.py records it in the run's manifest). */
int simd_lanes(void) { return LANES; }

static inline vec load(const float *p) {
    vec x;
    __builtin_memcpy(&x, p, sizeof x); /* unaligned */
    return x;
}

static inline void store(float *p, vec x) { __builtin_memcpy(p, &x, sizeof x); }

static inline vec splat(float x) { return (vec){0} + x; }

static inline vec vselect(ivec keep, vec a, vec b) {
    return (vec)(((ivec)a & keep) | ((ivec)b & ~keep));
}

static inline vec vmax(vec a, vec b) { return vselect(a > b, a, b); }

/* e^x for x <= 0 in the usual way (Cephes' expf): x = n ln2 + r with |r| <= ln2 / 2,
 * a degree-6 polynomial for e^r, n added to the exponent bits. Within about an ulp of
 * expf; 0 below the smallest normal result, so -INFINITY (a masked column) gives 0. */
static inline vec vexp(vec x) {
    const vec lo = splat(-87.336544f);
    ivec zero = x < lo;
    x = vmax(x, lo);
    vec n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    vec r = x - n * 0.693359375f - n * -2.12194440e-4f;
    vec p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    vec y = p * r * r + r + 1.0f;
    ivec bits = (__builtin_convertvector(n, ivec) + 127) << 23;
    y *= (vec)bits;
    return (vec)((ivec)y & ~zero);
}

#endif
