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

static inline __attribute__((always_inline)) void tile(const float *x, int64_t k,
                                                       const float *wp, float *y, int64_t ys,
                                                       const int R) {
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
        for (int c = 0; c < PV; c++) store(y + r * ys + c * LANES, acc[r][c]);
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

void panel_linear(const float *x, int64_t m, int64_t k, const float *wp, int64_t panels,
                  float *y, int threads) {
    const int64_t blocks = (m + MR - 1) / MR, ys = panels * PANEL;
    if (blocks == 0 || panels == 0) return;
    int64_t per_chunk = blocks; /* tiles per chunk */
    if (4 * m * k > WHOLE_BYTES) {
        per_chunk = CHUNK_BYTES / (4 * k) / MR;
        if (per_chunk < 1) per_chunk = 1;
    }
    const int64_t chunks = (blocks + per_chunk - 1) / per_chunk;
    per_chunk = (blocks + chunks - 1) / chunks; /* chunks of even size */
    const int64_t tasks = chunks * panels * per_chunk;
    if (threads < 1) threads = 1;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t chunk = t / (panels * per_chunk), p = t / per_chunk % panels;
        const int64_t r0 = (chunk * per_chunk + t % per_chunk) * MR;
        if (r0 >= m) continue; /* the last chunk's missing tiles */
        const int64_t rows = m - r0 < MR ? m - r0 : MR;
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
