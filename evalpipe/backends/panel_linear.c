/* A linear layer's product y = x W^T on a weight packed once into panels of 64 outputs,
 * [panels, in, 64]: for each input k a panel's 64 weights are four consecutive vectors,
 * so a register tile of up to 6 rows x 64 outputs takes one broadcast of x[m, k] and
 * four vector multiply-adds per row, with no sums across lanes.
 *
 * A decode step multiplies a few dozen rows by every weight of the model, read cold from
 * memory: there oneDNN's packed kernel reached 14.7 GB/s of weights at 16 rows, these
 * loops about 19 (the layers of SmolLM2-135M: 27.5 against 22.0 ms at 16 rows, 20.2
 * against 12.9 at 4); at prefill sizes (thousands of rows) the two are level.
 *
 * Layouts (float32): w [n, k] as packed by packed_linear.pack, [ceil(n / 64), k, 64]
 * with zeros past n; x [m, k] and y [m, panels * 64] contiguous.
 * Built at first use by native.py with the machine's own compiler. */
#include <stdint.h>

typedef float vec __attribute__((vector_size(64))); /* 16 floats: one AVX-512 register */
#define LANES 16
#define PANEL 64 /* outputs per panel: four vectors */
#define MR 6     /* rows per register tile: 24 accumulators */

/* Keeps a loaded vector in a register: otherwise the compiler folds the load into every
 * multiply-add that uses it, and on CPUs that split 512-bit loads the loads bound it. */
#define in_register(x) __asm__("" : "+v"(x))

static inline vec load(const float *p) {
    vec x;
    __builtin_memcpy(&x, p, sizeof x); /* unaligned */
    return x;
}

static inline void store(float *p, vec x) { __builtin_memcpy(p, &x, sizeof x); }

static inline __attribute__((always_inline)) void tile(const float *x, int64_t k,
                                                       const float *wp, float *y, int64_t ys,
                                                       const int R) {
    vec acc[MR][4] = {{{0}}};
    for (int64_t i = 0; i < k; i++) {
        vec w[4];
        for (int c = 0; c < 4; c++) {
            w[c] = load(wp + i * PANEL + c * LANES);
            in_register(w[c]);
        }
        for (int r = 0; r < R; r++) {
            float a = x[r * k + i];
            for (int c = 0; c < 4; c++) acc[r][c] += a * w[c];
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++) store(y + r * ys + c * LANES, acc[r][c]);
}

/* Tasks are (panel, block of MR rows), panel-major, split statically over `threads`
 * OpenMP threads (torch's own runtime: the library is loaded after torch), so a thread
 * keeps the panels it reads in its cache. */
void panel_linear(const float *x, int64_t m, int64_t k, const float *wp, int64_t panels,
                  float *y, int threads) {
    const int64_t blocks = (m + MR - 1) / MR, tasks = panels * blocks, ys = panels * PANEL;
    if (threads < 1) threads = 1;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t p = t / blocks, r0 = t % blocks * MR, rows = m - r0 < MR ? m - r0 : MR;
        const float *xr = x + r0 * k, *w = wp + p * k * PANEL;
        float *yr = y + r0 * ys + p * PANEL;
        switch (rows) {
        case 1: tile(xr, k, w, yr, ys, 1); break;
        case 2: tile(xr, k, w, yr, ys, 2); break;
        case 3: tile(xr, k, w, yr, ys, 3); break;
        case 4: tile(xr, k, w, yr, ys, 4); break;
        case 5: tile(xr, k, w, yr, ys, 5); break;
        default: tile(xr, k, w, yr, ys, MR); break;
        }
    }
}
