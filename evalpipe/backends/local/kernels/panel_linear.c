/* A linear layer's product y = x W^T on a weight packed once into panels of PANEL
 * outputs: for each input k a panel's weights are PV consecutive vectors, so a register
 * tile of up to MR rows x PANEL outputs takes one broadcast of x[m, k] and PV vector
 * multiply-adds per row, with no sums across lanes.
 *
 * The tile fills the vector registers: with AVX-512 (32 registers of 16 floats) 6 rows
 * x 64 outputs, 24 accumulators; with AVX2 (16 of 8) 6 rows x 16 outputs, 12
 * accumulators, the shape of the classic AVX2 matrix-multiply kernels.
 *
 * A decode step multiplies a few dozen rows by every weight of the model, read cold from
 * memory: there oneDNN's packed kernel reached 14.7 GB/s of weights at 16 rows, these
 * loops about 19 (the layers of SmolLM2-135M: 27.5 against 22.0 ms at 16 rows, 20.2
 * against 12.9 at 4, AVX-512); at prefill sizes (thousands of rows) the two are level.
 *
 * Two weight types, one tile shape:
 * - float32: w [n, k] as [ceil(n / PANEL), k, PANEL], zeros past n.
 * - bfloat16: half the bytes to read, for the same outputs. The inputs k come in pairs,
 *   [ceil(n / PANEL), kp / 2, PANEL, 2] (kp: k rounded up to even, zeros past), so one
 *   32-bit lane holds the weights of one output for inputs 2i and 2i + 1. x is rounded
 *   to bfloat16 first (to nearest even, as torch rounds), so every product of an input
 *   and a weight is exact in float32 and only the float32 sums round. Where the CPU has
 *   AVX512_BF16 the pairs go through its dot-product instruction (vdpbf16ps: 32
 *   multiply-adds per instruction, twice float32's); elsewhere each pair is widened to
 *   two float32 vectors by a shift and a mask, and multiplied as float32. Either way the
 *   arithmetic is the same: float32 sums of exact products, in orders that differ only
 *   by how the pair's two products are added (odd input first, as Intel documents the
 *   instruction) and by the instruction's flushing of denormal inputs to zero.
 *
 * x [m, k] and y [m, panels * PANEL] contiguous, float32. Built at first use by
 * native.py with the machine's own compiler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"

#if LANES == 16
#define PV 4 /* vectors per panel */
#else
#define PV 2
#endif
#define PANEL (PV * LANES) /* outputs per panel */
#define MR 6               /* rows per register tile */

#if LANES == 16 && defined(__AVX512BF16__)
#include <immintrin.h>
#define DOT_BF16 1
#else
#define DOT_BF16 0
#endif

/* The panel width this build packs for (packed_linear.pack asks). */
int panel_width(void) { return PANEL; }

/* 1 where bfloat16 pairs go through the CPU's dot-product instruction, 0 where they are
 * widened to float32 (the run's manifest records which). */
int bf16_dot(void) { return DOT_BF16; }

/* x silu(x) = x / (1 + e^-x), as x / (1 + e) or x e / (1 + e) with e = e^-|x| <= 1, so
 * the exponential never overflows. */
static inline vec silu(vec x) {
    ivec negative = x < 0.0f;
    vec e = vexp(vselect(negative, x, -x));
    return vselect(negative, x * e, x) / (1.0f + e);
}

/* What a tile does with its sums as it stores them, in this order (each one rounding,
 * as torch's separate passes round): SwiGLU's silu(gate) times them (`gate`: a tile of
 * the gate product, rows PANEL apart), plus a bias (`bias`: the panel's outputs), added
 * to what y holds (`add`: a residual stream updated in place). `cols`: how many of the
 * panel's outputs exist (the last panel of a width that is no multiple of PANEL stores
 * only those, so y's rows are the product's own width). */
typedef struct {
    const float *gate, *bias;
    int add;
    int64_t cols;
} store_t;

static inline __attribute__((always_inline)) void store_tile(vec acc[MR][PV], float *y,
                                                             int64_t ys, const int R,
                                                             const store_t *st) {
    for (int r = 0; r < R; r++)
        for (int c = 0; c < PV; c++) {
            const int64_t c0 = c * LANES;
            if (c0 >= st->cols) break;
            vec v = acc[r][c];
            if (st->gate) v *= silu(load(st->gate + r * PANEL + c0));
            if (c0 + LANES <= st->cols) {
                if (st->bias) v += load(st->bias + c0);
                if (st->add) v += load(y + r * ys + c0);
                store(y + r * ys + c0, v);
            } else { /* the last outputs of the last panel */
                for (int64_t l = 0; l < st->cols - c0; l++) {
                    float f = v[l];
                    if (st->bias) f += st->bias[c0 + l];
                    if (st->add) f += y[r * ys + c0 + l];
                    y[r * ys + c0 + l] = f;
                }
            }
        }
}

/* A tile of R rows on float32 panels. */
static inline __attribute__((always_inline)) void tile_f32(const float *x, int64_t k,
                                                           const float *wp, float *y,
                                                           int64_t ys, const int R,
                                                           const store_t *st) {
    vec acc[MR][PV] = {{{0}}};
    for (int64_t i = 0; i < k; i++) {
        vec w[PV];
        for (int c = 0; c < PV; c++) {
            w[c] = load(wp + i * PANEL + c * LANES);
            in_register(w[c]);
        }
        for (int r = 0; r < R; r++) {
            float a = x[r * k + i];
            for (int c = 0; c < PV; c++) acc[r][c] += a * w[c];
        }
    }
    store_tile(acc, y, ys, R, st);
}

static inline float high_half(uint32_t bits) { /* a bfloat16 in a word's upper half */
    float f;
    bits &= 0xffff0000u;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A tile of R rows on bfloat16 panels: x holds R rows of kh pairs of bfloat16 inputs
 * (one 32-bit word each, rows kh words apart), a panel kh words of PANEL outputs. */
static inline __attribute__((always_inline)) void tile_bf16(const uint32_t *x, int64_t kh,
                                                            const uint32_t *wp, float *y,
                                                            int64_t ys, const int R,
                                                            const store_t *st) {
    vec acc[MR][PV] = {{{0}}};
    for (int64_t i = 0; i < kh; i++) {
#if DOT_BF16
        __m512i w[PV];
        for (int c = 0; c < PV; c++) {
            w[c] = _mm512_loadu_si512(wp + i * PANEL + c * LANES);
            in_register(w[c]);
        }
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_set1_epi32((int)x[r * kh + i]);
            for (int c = 0; c < PV; c++)
                acc[r][c] = (vec)_mm512_dpbf16_ps((__m512)acc[r][c], (__m512bh)a, (__m512bh)w[c]);
        }
#else
        vec even[PV], odd[PV];
        for (int c = 0; c < PV; c++) {
            ivec v;
            memcpy(&v, wp + i * PANEL + c * LANES, sizeof v);
            even[c] = (vec)(v << 16);
            odd[c] = (vec)(v & (int32_t)0xffff0000);
            in_register(even[c]);
            in_register(odd[c]);
        }
        for (int r = 0; r < R; r++) {
            uint32_t pair = x[r * kh + i];
            float lo = high_half(pair << 16), hi = high_half(pair);
            for (int c = 0; c < PV; c++) {
                acc[r][c] += hi * odd[c];
                acc[r][c] += lo * even[c];
            }
        }
#endif
    }
    store_tile(acc, y, ys, R, st);
}

/* One task's tile at a row count known to the compiler (its loops unrolled). */
#define TILE_ROWS(tile, x, k, wp, y, ys, rows, st)                                           \
    switch (rows) {                                                                        \
    case 1: tile(x, k, wp, y, ys, 1, st); break;                                           \
    case 2: tile(x, k, wp, y, ys, 2, st); break;                                           \
    case 3: tile(x, k, wp, y, ys, 3, st); break;                                           \
    case 4: tile(x, k, wp, y, ys, 4, st); break;                                           \
    case 5: tile(x, k, wp, y, ys, 5, st); break;                                           \
    default: tile(x, k, wp, y, ys, MR, st); break;                                         \
    }

static void rows_f32(const void *x, int64_t k, const void *wp, float *y, int64_t ys,
                     int64_t rows, const store_t *st) {
    TILE_ROWS(tile_f32, (const float *)x, k, (const float *)wp, y, ys, rows, st)
}

static void rows_bf16(const void *x, int64_t kh, const void *wp, float *y, int64_t ys,
                      int64_t rows, const store_t *st) {
    TILE_ROWS(tile_bf16, (const uint32_t *)x, kh, (const uint32_t *)wp, y, ys, rows, st)
}

typedef void (*rows_fn)(const void *, int64_t, const void *, float *, int64_t, int64_t,
                        const store_t *);

/* Tasks are (panel, tile of MR rows), panel-major, split statically over `threads`
 * OpenMP threads (torch's own runtime: the library is loaded after torch), so a thread
 * keeps the panels it reads in its cache. Inputs of more than WHOLE_BYTES (a prefill's
 * thousands of rows) are taken in chunks of rows of about CHUNK_BYTES, panel-major
 * within each: in one pass each panel re-read all of x (9-25 MB at 4,096 rows) from
 * the L3 cache, and the products ran at 142-155 GFLOP/s against 185-195 in chunks
 * (AVX2, SmolLM2's shapes). A decode step's rows stay one pass, so the weights, read
 * cold from memory, are read once. Each output is the same sum in the same order
 * whatever the chunking and whatever the number of rows. */
#define WHOLE_BYTES (2 << 20)
#define CHUNK_BYTES (48 << 10)
/* Passes over fewer elements than this (a decode step's norms and roundings) run on one
 * thread: waking the others costs more than they would save. */
#define ALONE (1 << 16)

static int threads_for(int threads, int64_t rows, int64_t elements) {
    if (threads < 1 || elements < ALONE) return 1;
    return threads > rows ? (int)(rows > 0 ? rows : 1) : threads;
}

/* y = x w^T over `panels` panels, or with `gated` over pairs of panels (gate, up) of
 * the same outputs: y = silu(x gate^T) * (x up^T), SwiGLU's product in one pass, which
 * writes half the outputs and needs no separate passes for the activation; plus `bias`
 * [n], and with `add` added to y's contents. x: rows of `k` units (floats, or pairs of
 * bfloat16 for rows_bf16) `unit` bytes each; a panel: k * PANEL units; y [m, n]. */
static void products(rows_fn rows_of, const void *x, int64_t m, int64_t k, size_t unit,
                     const void *wp, int64_t panels, float *y, int64_t n, int threads,
                     int gated, const float *bias, int add) {
    const int64_t outs = gated ? panels / 2 : panels; /* output panels */
    const int64_t blocks = (m + MR - 1) / MR;
    if (blocks == 0 || outs == 0) return;
    if (threads < 1) threads = 1;
    int64_t per_chunk = blocks; /* tiles per chunk */
    if ((int64_t)unit * m * k > WHOLE_BYTES) {
        per_chunk = CHUNK_BYTES / ((int64_t)unit * k) / MR;
        if (per_chunk < 1) per_chunk = 1;
    }
    const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
    per_chunk = (blocks + chunks - 1) / chunks; /* chunks of even size */
    const int64_t tasks = chunks * outs * per_chunk;
    const char *xb = x, *wb = wp;
    const int64_t panel_bytes = k * PANEL * (int64_t)unit;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t chunk = t / (outs * per_chunk), p = t / per_chunk % outs;
        const int64_t r0 = (chunk * per_chunk + t % per_chunk) * MR;
        if (r0 >= m) continue; /* the last chunk's missing tiles */
        const int64_t rows = m - r0 < MR ? m - r0 : MR;
        const void *xr = xb + r0 * k * (int64_t)unit;
        float *yr = y + r0 * n + p * PANEL;
        const int64_t cols = n - p * PANEL < PANEL ? n - p * PANEL : PANEL;
        store_t st = {0, bias ? bias + p * PANEL : 0, add, cols};
        if (gated) {
            float gate[MR * PANEL];
            store_t plain = {0, 0, 0, PANEL};
            rows_of(xr, k, wb + 2 * p * panel_bytes, gate, PANEL, rows, &plain);
            st.gate = gate;
            rows_of(xr, k, wb + (2 * p + 1) * panel_bytes, yr, n, rows, &st);
        } else {
            rows_of(xr, k, wb + p * panel_bytes, yr, n, rows, &st);
        }
    }
}

/* float32 to bfloat16, to nearest even (NaN: the quiet NaN 0x7fc0), as torch rounds. */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* x [m, k] float32 rounded to bfloat16 pairs, [m, kp / 2] words (a zero past an odd k):
 * NULL where the memory is not to be had. */
static uint32_t *pairs_of(const float *x, int64_t m, int64_t k, int threads) {
    const int64_t kh = (k + 1) / 2;
    uint16_t *out = malloc((size_t)(m * kh * 2) * sizeof(uint16_t));
    if (!out) return NULL;
    threads = threads_for(threads, m, m * k);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < m; r++) {
        uint16_t *o = out + r * kh * 2;
        const float *xr = x + r * k;
        for (int64_t i = 0; i < k; i++) o[i] = to_bf16(xr[i]);
        if (k & 1) o[k] = 0;
    }
    return (uint32_t *)out;
}

/* RMS norm of h's rows into out: h / sqrt(mean(h^2) + eps), then times `weight`, each
 * product rounded apart as the models' norms round them (LlamaRMSNorm, Qwen2RMSNorm:
 * the mean and the reciprocal square root in float32). */
static void norm_rows(const float *h, int64_t m, int64_t n, const float *weight, float eps,
                      float *out, int threads) {
    threads = threads_for(threads, m, m * n);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < m; r++) {
        const float *x = h + r * n;
        float *o = out + r * n;
        vec sums = {0};
        int64_t i = 0;
        for (; i + LANES <= n; i += LANES) {
            vec v = load(x + i);
            sums += v * v;
        }
        float sum = 0.0f;
        for (int l = 0; l < LANES; l++) sum += sums[l];
        for (; i < n; i++) sum += x[i] * x[i];
        const float scale = 1.0f / sqrtf(sum / (float)n + eps);
        for (i = 0; i + LANES <= n; i += LANES) {
            vec t = load(x + i) * scale;
            in_register(t); /* rounded before the weight's product, as torch rounds it */
            store(o + i, load(weight + i) * t);
        }
        for (; i < n; i++) {
            float t = x[i] * scale;
            o[i] = weight[i] * t;
        }
    }
}

/* The exported products: x [m, k] float32 times packed weights wp (`panels` panels of
 * float32, or `bf16` panels of bfloat16 pairs), y [m, n]; `gated`: interleaved gate and
 * up panels, SwiGLU's product (n: its outputs); `bias` [n] or NULL; `add`: y += rather
 * than y =; with `weight` (an RMS norm's [n]), y's rows are normed into `normed` after
 * (the residual stream updated and the next norm taken in one call). 0, or 1 where the
 * scratch memory for x's bfloat16 copy (m * k * 2 bytes) was not to be had. */
int panel_product(const float *x, int64_t m, int64_t k, const void *wp, int64_t panels,
                  int bf16, float *y, int64_t n, int gated, const float *bias, int add,
                  const float *weight, float eps, float *normed, int threads) {
    if (bf16) {
        uint32_t *pairs = pairs_of(x, m, k, threads);
        if (!pairs) return 1;
        products(rows_bf16, pairs, m, (k + 1) / 2, sizeof(uint32_t), wp, panels, y, n,
                 threads, gated, bias, add);
        free(pairs);
    } else {
        products(rows_f32, x, m, k, sizeof(float), wp, panels, y, n, threads, gated, bias,
                 add);
    }
    if (weight) norm_rows(y, m, n, weight, eps, normed, threads);
    return 0;
}

/* RMS norm of x [m, n]'s rows times `weight` into out (see norm_rows). */
void rms_norm(const float *x, int64_t m, int64_t n, const float *weight, float eps,
              float *out, int threads) {
    norm_rows(x, m, n, weight, eps, out, threads);
}

/* The index of the largest of v[0 .. n), the first of equal ones, a NaN counting as
 * the largest (as torch.argmax on the CPU). One pass in vectors: each lane keeps its
 * largest value and where it was (the first, since only a larger one replaces it). */
static int64_t argmax_of(const float *v, int64_t n) {
    int64_t i = 0, best = 0;
    if (n >= LANES) {
        vec top = load(v);
        ivec at, lane;
        for (int l = 0; l < LANES; l++) lane[l] = l;
        at = lane;
        ivec nan = top != top;
        for (i = LANES; i + LANES <= n; i += LANES) {
            vec x = load(v + i);
            ivec larger = x > top;
            nan |= x != x;
            top = vselect(larger, x, top);
            at = (at & ~larger) | ((lane + (int32_t)i) & larger);
        }
        int any_nan = 0;
        for (int l = 0; l < LANES; l++) any_nan |= nan[l] != 0;
        if (!any_nan) {
            best = at[0];
            for (int l = 1; l < LANES; l++)
                if (top[l] > v[best] || (top[l] == v[best] && at[l] < best)) best = at[l];
        } else {
            i = 1; /* a NaN in the row: the plain scan below finds the first */
        }
    } else {
        i = 1;
    }
    for (; i < n && v[best] == v[best]; i++)
        if (v[i] > v[best] || v[i] != v[i]) best = i;
    return best;
}

/* Each row's greedy choice (argmax_of): x [m, n], out [m] int64. */
void argmax_rows(const float *x, int64_t m, int64_t n, int64_t *out, int threads) {
    threads = threads_for(threads, m, m * n);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < m; r++) out[r] = argmax_of(x + r * n, n);
}
