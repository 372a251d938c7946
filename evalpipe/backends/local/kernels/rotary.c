/* The rotary embedding of a fused q|k|v product, written where attention reads it:
 * queries to [rows, heads, t, dim], keys (turned) and values straight into the layer's
 * cache buffer. In torch this took a concatenation, a negation, three elementwise
 * passes and two copies into the cache per layer.
 *
 * Each output is torch's x cos + rotate_half(x) sin with the same two roundings (the
 * products kept apart, never fused into one multiply-add), so results are bit for bit
 * those of the model's own rotary embedding.
 *
 * Layouts (float32): y [rows, t, heads + 2 kv_heads, dim] contiguous; cos and sin
 * [rows, t, dim] with strides (crs, cps) and unit last stride; q [rows, heads, t, dim]
 * contiguous; k and v at the first new column, strides (rs, hs, ps). dim is a multiple
 * of dim_multiple(). Built at first use by native.py. */
#include "simd.h"

/* The multiple of which a head's size must be: each half is whole vectors (rotary.py
 * reads it). */
int dim_multiple(void) { return 2 * LANES; }

/* x c + t s with each product rounded first, as torch's separate passes round them. */
static inline vec turn(vec x, vec c, vec t, vec s) {
    vec a = x * c, b = t * s;
    in_register(a);
    in_register(b);
    return a + b;
}

static inline void rotate(const float *x, const float *c, const float *s, float *out,
                          int64_t half) {
    for (int64_t d = 0; d < half; d += LANES) {
        vec lo = load(x + d), hi = load(x + half + d);
        store(out + d, turn(lo, load(c + d), -hi, load(s + d)));
        store(out + half + d, turn(hi, load(c + half + d), lo, load(s + half + d)));
    }
}

void rotate_into(const float *y, int64_t rows, int64_t t, int64_t heads, int64_t kv_heads,
                 int64_t dim, const float *cos, const float *sin, int64_t crs, int64_t cps,
                 float *q, float *k, float *v, int64_t rs, int64_t hs, int64_t ps,
                 int threads) {
    const int64_t width = (heads + 2 * kv_heads) * dim, half = dim / 2;
    if (threads < 1) threads = 1;
    if (threads > rows * t) threads = (int)(rows * t > 0 ? rows * t : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t n = 0; n < rows * t; n++) {
        const int64_t r = n / t, i = n % t;
        const float *x = y + n * width, *c = cos + r * crs + i * cps, *s = sin + r * crs + i * cps;
        for (int64_t h = 0; h < heads; h++)
            rotate(x + h * dim, c, s, q + ((r * heads + h) * t + i) * dim, half);
        for (int64_t h = 0; h < kv_heads; h++) {
            rotate(x + (heads + h) * dim, c, s, k + r * rs + h * hs + i * ps, half);
            const float *xv = x + (heads + kv_heads + h) * dim;
            float *vo = v + r * rs + h * hs + i * ps;
            for (int64_t d = 0; d < dim; d += LANES) store(vo + d, load(xv + d));
        }
    }
}
