/* A linear layer's product y = x W^T on a weight packed once into panels of PANEL
 * outputs, [panels, in, PANEL]: for each input k a panel's weights are PV consecutive
 * vectors, so a register tile of up to MR rows x PANEL outputs takes one broadcast of
 * x[m, k] and PV vector multiply-adds per row, with no sums across lanes.
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
 * Layouts (float32): w [n, k] as packed by packed_linear.pack, [ceil(n / PANEL), k,
 * PANEL] with zeros past n; x [m, k] and y [m, panels * PANEL] contiguous.
 * Built at first use by native.py with the machine's own compiler. */
#include "simd.h"

#if LANES == 16
#define PV 4 /* vectors per panel */
#else
#define PV 2
#endif
#define PANEL (PV * LANES) /* outputs per panel */
#define MR 6               /* rows per register tile */

/* The panel width this build packs for (packed_linear.pack asks). */
int panel_width(void) { return PANEL; }

/* x silu(x) = x / (1 + e^-x), as x / (1 + e) or x e / (1 + e) with e = e^-|x| <= 1, so
 * the exponential never overflows. */
static inline vec silu(vec x) {
    ivec negative = x < 0.0f;
    vec e = vexp(vselect(negative, x, -x));
    return vselect(negative, x * e, x) / (1.0f + e);
}

/* A tile of R rows: y = x w^T, or with `gate` (a tile of the gate product, rows PANEL
 * apart) y = silu(gate) * x w^T. */
static inline __attribute__((always_inline)) void tile(const float *x, int64_t k,
                                                       const float *wp, float *y, int64_t ys,
                                                       const int R, const float *gate) {
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
    for (int r = 0; r < R; r++)
        for (int c = 0; c < PV; c++) {
            vec v = acc[r][c];
            if (gate) v *= silu(load(gate + r * PANEL + c * LANES));
            store(y + r * ys + c * LANES, v);
        }
}

/* One task's tile at a row count known to the compiler (its loops unrolled). */
static void tile_rows(const float *x, int64_t k, const float *wp, float *y, int64_t ys,
                      int64_t rows, const float *gate) {
    switch (rows) {
    case 1: tile(x, k, wp, y, ys, 1, gate); break;
    case 2: tile(x, k, wp, y, ys, 2, gate); break;
    case 3: tile(x, k, wp, y, ys, 3, gate); break;
    case 4: tile(x, k, wp, y, ys, 4, gate); break;
    case 5: tile(x, k, wp, y, ys, 5, gate); break;
    default: tile(x, k, wp, y, ys, MR, gate); break;
    }
}

/* Tasks are (panel, tile of MR rows), panel-major, split statically over `threads`
 * OpenMP threads (torch's own runtime: the library is loaded after torch), so a thread
 * keeps the panels it reads in its cache. Inputs of more than WHOLE_BYTES (a prefill's
 * thousands of rows) are taken in chunks of rows of about CHUNK_BYTES, panel-major
 * within each: in one pass each panel re-read all of x (9-25 MB at 4,096 rows) from
 * the L3 cache, and the products ran at 142-155 GFLOP/s against 185-195 in chunks
 * (AVX2, SmolLM2's shapes). A decode step's rows stay one pass, so the weights, read
 * cold from memory, are read once. Each output is the same sum in the same order
 * whatever the chunking. */
#define WHOLE_BYTES (2 << 20)
#define CHUNK_BYTES (48 << 10)

/* y = x w^T over `panels` panels, or with `gated` over pairs of panels (gate, up) of
 * the same outputs: y = silu(x gate^T) * (x up^T), SwiGLU's product in one pass, which
 * writes half the outputs and needs no separate passes for the activation. */
static void products(const float *x, int64_t m, int64_t k, const float *wp, int64_t panels,
                     float *y, int threads, int gated) {
    const int64_t outs = gated ? panels / 2 : panels; /* output panels */
    const int64_t blocks = (m + MR - 1) / MR, ys = outs * PANEL;
    if (blocks == 0 || outs == 0) return;
    if (threads < 1) threads = 1;
    int64_t per_chunk = blocks; /* tiles per chunk */
    if (4 * m * k > WHOLE_BYTES) {
        per_chunk = CHUNK_BYTES / (4 * k) / MR;
        if (per_chunk < 1) per_chunk = 1;
    }
    const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
    per_chunk = (blocks + chunks - 1) / chunks; /* chunks of even size */
    const int64_t tasks = chunks * outs * per_chunk;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t chunk = t / (outs * per_chunk), p = t / per_chunk % outs;
        const int64_t r0 = (chunk * per_chunk + t % per_chunk) * MR;
        if (r0 >= m) continue; /* the last chunk's missing tiles */
        const int64_t rows = m - r0 < MR ? m - r0 : MR;
        const float *xr = x + r0 * k;
        float *yr = y + r0 * ys + p * PANEL;
        if (gated) {
            float gate[MR * PANEL];
            tile_rows(xr, k, wp + 2 * p * k * PANEL, gate, PANEL, rows, 0);
            tile_rows(xr, k, wp + (2 * p + 1) * k * PANEL, yr, ys, rows, gate);
        } else {
            tile_rows(xr, k, wp + p * k * PANEL, yr, ys, rows, 0);
        }
    }
}

void panel_linear(const float *x, int64_t m, int64_t k, const float *wp, int64_t panels,
                  float *y, int threads) {
    products(x, m, k, wp, panels, y, threads, 0);
}

/* wp: the gate's and the up projection's panels interleaved, [2 * outs / PANEL, k,
 * PANEL] (packed_linear.pack_gated); y [m, outs]. */
void panel_swiglu(const float *x, int64_t m, int64_t k, const float *wp, int64_t panels,
                  float *y, int threads) {
    products(x, m, k, wp, panels, y, threads, 1);
}
