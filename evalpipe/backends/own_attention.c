/* The two products of a decode step's attention over each row's own cached tokens.
 *
 * One query token per row; the query heads that share a key head ("groups") are
 * taken together, so each key and value row is read once for all of them. Masked
 * columns (left padding, the gaps a merge of batches leaves) are skipped, not
 * multiplied. At these shapes (3 x 64 queries against a few hundred keys per row
 * and key head) torch's batched products took about twice as long as these loops
 * (48 rows x 150 columns, 2 threads, cache warm: scores 281 vs 132 us, values 266
 * vs 153 us).
 *
 * Layouts (float32): q [rows, heads, groups, dim] and scores/weights
 * [rows, heads, groups, len] contiguous; keys and values by strides (elements) per
 * row, head and position, unit stride along dim; mask [rows, len] bytes, 1 = attend.
 * Built at first use by own_attention.py with the machine's own compiler.
 */
#include <stdint.h>

typedef float vec __attribute__((vector_size(64))); /* 16 floats: one AVX-512 register */
typedef float half __attribute__((vector_size(32)));
typedef float quarter __attribute__((vector_size(16)));
#define LANES 16

typedef struct {
    const float *q, *k, *v, *w;
    const uint8_t *mask;
    float *out;
    int64_t heads, groups, len, dim;
    int64_t rs, hs, ps; /* key or value strides: row, head, position */
    float low;
    int64_t begin, end; /* tasks [begin, end): task = row * heads + head */
} job_t;

static inline vec load(const float *p) {
    vec x;
    __builtin_memcpy(&x, p, sizeof x); /* unaligned */
    return x;
}

static inline void store(float *p, vec x) { __builtin_memcpy(p, &x, sizeof x); }

/* Sum of a vector's lanes by halves, in shuffles (a chain of 16 dependent scalar adds
 * would cost ten times the products). */
static inline float lanes_sum(vec x) {
    half h = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    quarter f = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
    return (f[0] + f[2]) + (f[1] + f[3]);
}

/* A task's keys (a few hundred rows of 256 bytes) stay in the core's cache across
 * its query heads. */
static void *scores_range(void *arg) {
    const job_t *j = arg;
    const int64_t G = j->groups, D = j->dim, S = j->len;
    for (int64_t t = j->begin; t < j->end; t++) {
        int64_t row = t / j->heads, head = t % j->heads;
        const float *k = j->k + row * j->rs + head * j->hs;
        const uint8_t *m = j->mask + row * S;
        for (int64_t g = 0; g < G; g++) {
            const float *q = j->q + (t * G + g) * D;
            float *out = j->out + (t * G + g) * S;
            for (int64_t s = 0; s < S; s++) {
                if (!m[s]) {
                    out[s] = j->low;
                    continue;
                }
                const float *key = k + s * j->ps;
                vec acc = {0};
                int64_t d = 0;
                for (; d + LANES <= D; d += LANES) acc += load(q + d) * load(key + d);
                float r = lanes_sum(acc);
                for (; d < D; d++) r += q[d] * key[d];
                out[s] = r;
            }
        }
    }
    return 0;
}

static void *values_range(void *arg) {
    const job_t *j = arg;
    for (int64_t t = j->begin; t < j->end; t++) {
        int64_t row = t / j->heads, head = t % j->heads;
        const float *w = j->w + t * j->groups * j->len;
        const float *v = j->v + row * j->rs + head * j->hs;
        const uint8_t *m = j->mask + row * j->len;
        float *out = j->out + t * j->groups * j->dim;
        for (int64_t i = 0; i < j->groups * j->dim; i++) out[i] = 0.0f;
        for (int64_t s = 0; s < j->len; s++) {
            if (!m[s]) continue;
            const float *val = v + s * j->ps;
            for (int64_t g = 0; g < j->groups; g++) {
                float x = w[g * j->len + s];
                float *o = out + g * j->dim;
                int64_t d = 0;
                for (; d + LANES <= j->dim; d += LANES) store(o + d, load(o + d) + x * load(val + d));
                for (; d < j->dim; d++) o[d] += x * val[d];
            }
        }
    }
    return 0;
}

/* Split the tasks over `threads` OpenMP threads. The library is loaded after torch,
 * so libgomp.so.1 resolves to the runtime torch already runs: its own thread pool,
 * not a second set of threads fighting it for the cores. */
static void run(void *(*fn)(void *), job_t base, int64_t tasks, int threads) {
    if (threads < 1) threads = 1;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < threads; i++) {
        job_t job = base;
        job.begin = tasks * i / threads;
        job.end = tasks * (i + 1) / threads;
        fn(&job);
    }
}

void own_scores(const float *q, const float *k, const uint8_t *mask, float *out,
                int64_t rows, int64_t heads, int64_t groups, int64_t len, int64_t dim,
                int64_t rs, int64_t hs, int64_t ps, float low, int threads) {
    job_t j = {q, k, 0, 0, mask, out, heads, groups, len, dim, rs, hs, ps, low, 0, 0};
    run(scores_range, j, rows * heads, threads);
}

void own_values(const float *w, const float *v, const uint8_t *mask, float *out,
                int64_t rows, int64_t heads, int64_t groups, int64_t len, int64_t dim,
                int64_t rs, int64_t hs, int64_t ps, int threads) {
    job_t j = {0, 0, v, w, mask, out, heads, groups, len, dim, rs, hs, ps, 0.0f, 0, 0};
    run(values_range, j, rows * heads, threads);
}
