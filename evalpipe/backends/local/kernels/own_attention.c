/* A decode step's whole attention for each row: scores against the shared prefix and
 * against the row's own cached tokens, one softmax over both, and the weighted sum of
 * their values, in one pass per row and key head.
 *
 * One query token per row; the query heads that share a key head ("groups") are
 * taken together, so each key and value row is read once for all of them. Masked
 * columns (left padding, the gaps a merge of batches leaves) are skipped, not
 * multiplied. The prefix keys come transposed ([dim, positions], once per prefix), so
 * their scores are plain vector products over 32 positions at a time with no sums
 * across lanes; the own tokens' keys stay in the cache's layout. Rows may attend to
 * different prefixes (the cells of a model share one batch): the prefixes lie one after
 * another in one buffer, each from a multiple of BLOCK, and each row names the first
 * position and the length of its own (length 0: none).
 *
 * torch did this as two batched products per block, a concatenation-free softmax of
 * six elementwise passes, and a transpose: at these shapes (3 x 64 queries against a
 * few hundred keys per row and key head) its products ran at about half the speed of
 * these loops and every pass re-read the scores from memory.
 *
 * Layouts (float32): q [rows, heads, groups, dim] contiguous; prefix keys [heads, dim,
 * ptot] (zero padded) and values by strides (head, position); own keys and values by
 * strides (row, head, position), unit stride along dim; pstart and plen [rows] int64
 * (pstart a multiple of BLOCK); mask [rows, len] bytes, 1 = attend; out [rows, heads,
 * groups, dim] contiguous. ppad: the longest plen rounded up to BLOCK.
 * Built at first use by own_attention.py with the machine's own compiler.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "simd.h"

typedef float quad __attribute__((vector_size(16)));
#define BLOCK 32 /* prefix positions padded to whole blocks, scored two vectors at a time */
#define MAXG 4   /* query groups held in registers at once */
#define MAXV 4   /* value vectors of dim held per group (with AVX2's 16 registers, 2 and 3
                  * were no faster) */

/* What callers must know of this build (own_attention.py reads them): the multiple of
 * BLOCK the transposed prefix keys are padded to, and the multiple of which a head's
 * size must be (whole vectors along dim). */
int prefix_block(void) { return BLOCK; }
int dim_multiple(void) { return LANES; }

typedef struct {
    const float *q, *pkt, *pv, *k, *v;
    const int64_t *pstart, *plen;
    const uint8_t *mask;
    float *out;
    int64_t heads, groups, dim, ppad, ptot, len, lpad;
    int64_t phs, pps;   /* prefix value strides: head, position */
    int64_t rs, hs, ps; /* own key/value strides: row, head, position */
    float scale;
} job_t;

/* Sum of a vector's lanes by halves, in shuffles (a chain of 16 dependent scalar adds
 * would cost ten times the products). */
static inline float lanes_sum(vec x) {
#if LANES == 16
    typedef float oct __attribute__((vector_size(32)));
    oct h = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
    quad f = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#elif LANES == 8
    quad f = __builtin_shufflevector(x, x, 0, 1, 2, 3) + __builtin_shufflevector(x, x, 4, 5, 6, 7);
#else
    quad f = x;
#endif
    return (f[0] + f[2]) + (f[1] + f[3]);
}

static inline float lanes_max(vec x) {
    float m = x[0];
    for (int i = 1; i < LANES; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* Scores of GB query groups against the first rp positions of a prefix from position p0
 * (transposed keys). */
static inline __attribute__((always_inline)) void prefix_scores(const job_t *j, int64_t head,
                                                                int64_t p0, int64_t rp,
                                                                const float *qs, float *sc,
                                                                int64_t w, const int GB) {
    const int64_t D = j->dim, PT = j->ptot;
    const float *kt = j->pkt + head * D * PT + p0;
    for (int64_t s = 0; s < rp; s += 2 * LANES) { /* rp: whole BLOCKs, so whole steps */
        vec a0[MAXG] = {{0}}, a1[MAXG] = {{0}};
        for (int64_t d = 0; d < D; d++) {
            vec k0 = load(kt + d * PT + s), k1 = load(kt + d * PT + s + LANES);
            in_register(k0);
            in_register(k1);
            for (int g = 0; g < GB; g++) {
                float x = qs[g * D + d];
                a0[g] += x * k0;
                a1[g] += x * k1;
            }
        }
        for (int g = 0; g < GB; g++) {
            store(sc + g * w + s, a0[g]);
            store(sc + g * w + s + LANES, a1[g]);
        }
    }
}

static void prefix_scores_any(const job_t *j, int64_t head, int64_t p0, int64_t rp,
                              const float *qs, float *sc, int64_t w, int64_t gb) {
    switch (gb) {
    case 1: prefix_scores(j, head, p0, rp, qs, sc, w, 1); break;
    case 2: prefix_scores(j, head, p0, rp, qs, sc, w, 2); break;
    case 3: prefix_scores(j, head, p0, rp, qs, sc, w, 3); break;
    default: prefix_scores(j, head, p0, rp, qs, sc, w, 4); break;
    }
}

/* out[g, d0 : d0 + LANES NV] for GB groups: the weighted values over the row's prefix
 * (its pl positions from p0) and the row's unmasked own tokens, divided by each group's
 * sum. */
static inline __attribute__((always_inline)) void weighted_values(
    const job_t *j, int64_t row, int64_t head, int64_t p0, int64_t pl, const float *e,
    const float *sums, int64_t w, int64_t d0, float *out, const int GB, const int NV) {
    vec acc[MAXG][MAXV] = {{{0}}};
    if (pl > 0) {
        const float *pv = j->pv + head * j->phs + p0 * j->pps + d0;
        for (int64_t s = 0; s < pl; s++) {
            vec val[MAXV];
            for (int c = 0; c < NV; c++) {
                val[c] = load(pv + s * j->pps + c * LANES);
                in_register(val[c]);
            }
            for (int g = 0; g < GB; g++) {
                float x = e[g * w + s];
                for (int c = 0; c < NV; c++) acc[g][c] += x * val[c];
            }
        }
    }
    const float *v = j->v + row * j->rs + head * j->hs + d0;
    const uint8_t *m = j->mask + row * j->len;
    const float *eo = e + j->ppad;
    for (int64_t s = 0; s < j->len; s++) {
        if (!m[s]) continue;
        vec val[MAXV];
        for (int c = 0; c < NV; c++) {
            val[c] = load(v + s * j->ps + c * LANES);
            in_register(val[c]);
        }
        for (int g = 0; g < GB; g++) {
            float x = eo[g * w + s];
            for (int c = 0; c < NV; c++) acc[g][c] += x * val[c];
        }
    }
    for (int g = 0; g < GB; g++)
        for (int c = 0; c < NV; c++)
            store(out + g * j->dim + d0 + c * LANES,
                  sums[g] > 0.0f ? acc[g][c] / sums[g] : (vec){0});
}

#define VALUES_CASE(GB_)                                                                  \
    switch (nv) {                                                                         \
    case 1: weighted_values(j, row, head, p0, pl, e, sums, w, d0, out, GB_, 1); break;    \
    case 2: weighted_values(j, row, head, p0, pl, e, sums, w, d0, out, GB_, 2); break;    \
    case 3: weighted_values(j, row, head, p0, pl, e, sums, w, d0, out, GB_, 3); break;    \
    default: weighted_values(j, row, head, p0, pl, e, sums, w, d0, out, GB_, 4); break;   \
    }

static void values_any(const job_t *j, int64_t row, int64_t head, int64_t p0, int64_t pl,
                       const float *e, const float *sums, int64_t w, int64_t d0, float *out,
                       int64_t gb, int64_t nv) {
    switch (gb) {
    case 1: VALUES_CASE(1) break;
    case 2: VALUES_CASE(2) break;
    case 3: VALUES_CASE(3) break;
    default: VALUES_CASE(4) break;
    }
}

/* One row and key head: t = row * heads + head. qs holds groups x dim floats, sc
 * groups x (ppad + lpad), sums groups. */
static void attend(const job_t *j, int64_t t, float *qs, float *sc, float *sums) {
    const int64_t G = j->groups, D = j->dim, PP = j->ppad, LP = j->lpad, w = PP + LP;
    const int64_t row = t / j->heads, head = t % j->heads;
    const int64_t p0 = j->pstart[row], pl = j->plen[row], rp = (pl + BLOCK - 1) / BLOCK * BLOCK;
    const float *q = j->q + t * G * D;
    for (int64_t i = 0; i < G * D; i++) qs[i] = q[i] * j->scale;

    if (pl > 0)
        for (int64_t g0 = 0; g0 < G; g0 += MAXG)
            prefix_scores_any(j, head, p0, rp, qs + g0 * D, sc + g0 * w, w,
                              G - g0 < MAXG ? G - g0 : MAXG);
    for (int64_t g = 0; g < G; g++) /* the padding after the row's prefix, or all of it */
        for (int64_t s = pl; s < PP; s++) sc[g * w + s] = -INFINITY;

    const float *k = j->k + row * j->rs + head * j->hs;
    const uint8_t *m = j->mask + row * j->len;
    float *so = sc + PP;
    for (int64_t s = 0; s < LP; s++) {
        if (s >= j->len || !m[s]) {
            for (int64_t g = 0; g < G; g++) so[g * w + s] = -INFINITY;
            continue;
        }
        const float *key = k + s * j->ps;
        for (int64_t g = 0; g < G; g++) {
            const float *qg = qs + g * D;
            vec acc = {0};
            for (int64_t d = 0; d < D; d += LANES) acc += load(qg + d) * load(key + d);
            so[g * w + s] = lanes_sum(acc);
        }
    }

    for (int64_t g = 0; g < G; g++) {
        float *x = sc + g * w;
        vec top = splat(-INFINITY);
        for (int64_t s = 0; s < w; s += LANES) top = vmax(top, load(x + s));
        float t_max = lanes_max(top);
        if (t_max == -INFINITY) { /* attends to nothing (a padding row): output 0, not NaN */
            for (int64_t s = 0; s < w; s++) x[s] = 0.0f;
            sums[g] = 0.0f;
            continue;
        }
        vec total = {0};
        for (int64_t s = 0; s < w; s += LANES) {
            vec ex = vexp(load(x + s) - t_max);
            store(x + s, ex);
            total += ex;
        }
        sums[g] = lanes_sum(total);
    }

    float *out = j->out + t * G * D;
    for (int64_t g0 = 0; g0 < G; g0 += MAXG) {
        int64_t gb = G - g0 < MAXG ? G - g0 : MAXG;
        for (int64_t d0 = 0; d0 < D; d0 += MAXV * LANES) {
            int64_t nv = (D - d0) / LANES < MAXV ? (D - d0) / LANES : MAXV;
            values_any(j, row, head, p0, pl, sc + g0 * w, sums + g0, w, d0, out + g0 * D, gb,
                       nv);
        }
    }
}

/* The tasks split over `threads` OpenMP threads. The library is loaded after torch, so
 * libgomp.so.1 resolves to the runtime torch already runs: its own thread pool, not a
 * second set of threads fighting it for the cores. Returns 0, or -1 when scratch
 * memory could not be had (the caller falls back to torch). */
int decode_attention(const float *q, const float *pkt, const float *pv, const int64_t *pstart,
                     const int64_t *plen, const float *k, const float *v, const uint8_t *mask,
                     float *out, int64_t rows, int64_t heads, int64_t groups, int64_t dim,
                     int64_t ppad, int64_t ptot, int64_t len, int64_t phs, int64_t pps,
                     int64_t rs, int64_t hs, int64_t ps, float scale, int threads) {
    const int64_t lpad = (len + LANES - 1) / LANES * LANES;
    job_t j = {q, pkt, pv, k, v, pstart, plen, mask, out, heads, groups, dim, ppad, ptot, len,
               lpad, phs, pps, rs, hs, ps, scale};
    const int64_t tasks = rows * heads;
    if (threads < 1) threads = 1;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
    const size_t floats = (size_t)(groups * dim + groups * (ppad + lpad) + groups);
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : failed)
    for (int i = 0; i < threads; i++) {
        float *scratch = malloc(floats * sizeof(float));
        if (!scratch) {
            failed = 1;
            continue;
        }
        float *qs = scratch, *sc = qs + groups * dim, *sums = sc + groups * (ppad + lpad);
        for (int64_t t = tasks * i / threads; t < tasks * (i + 1) / threads; t++)
            attend(&j, t, qs, sc, sums);
        free(scratch);
    }
    return failed ? -1 : 0;
}

/* ---- Prefill: a chunk of query tokens per row, attending causally ----------------------
 *
 * The same attention for a prefill chunk (q_len query tokens per row), flash-style: the
 * scores of a block of key columns are made, masked, turned into weights and summed into
 * the output while they are in the cache, with a running maximum and sum per query, so
 * no score row of the whole context is ever written out. Blocks that are padding in the
 * row, or wholly after a task's last query (the causal triangle), are skipped, not
 * computed and thrown away.
 *
 * A task is one row, one key head and up to QB query tokens; its query rows are the
 * groups x tokens that share the key head (r = g * n + token). They are held transposed,
 * [dim, rows], so a key's scores for LANES query rows are one vector and the softmax runs
 * along the lanes with no sums across them.
 *
 * Masking: own column c is attended by query token i when mask[c] and c <= len - q_len
 * + i (the chunk's tokens are the last q_len columns of the row's cache); a row attends
 * to every column of its prefix, plen[row] positions from pstart[row]. A query that may
 * attend to nothing gets zeros.
 *
 * Layouts (float32, unit stride along dim): q by strides (row, head, token); prefix keys
 * and values [heads, positions, dim] by strides (head, position); pstart and plen [rows]
 * int64; own keys and values by strides (row, head, position); mask [rows, len] bytes;
 * out [rows, q_len, heads * groups, dim] contiguous. */

/* The smaller of a tile size and the largest this build holds in registers, as a
 * constant: the switches below instantiate tile sizes past NQ on narrow CPUs. */
#define AT_MOST(n, most) ((n) < (most) ? (n) : (most))

#define QB 32 /* query tokens per task */
#define KB 64 /* key columns per block */
#define DB 4  /* dims per value register block */
#define JB 4  /* keys per score register block */
#if LANES == 16 /* query-row vectors per register block: JB (or DB) x NQ accumulators */
#define NQ 4
#else /* 16 registers (AVX2): 3 was level with 2 at the default job's shapes, 4 and 1 slower */
#define NQ 2
#endif

typedef struct {
    const float *q, *pk, *pv, *k, *v;
    const int64_t *pstart, *plen;
    const uint8_t *mask;
    float *out;
    int64_t heads, groups, dim, qlen, len;
    int64_t qrs, qhs, qps; /* query strides: row, head (query head), token */
    int64_t phs, pps;      /* prefix key/value strides: head, position */
    int64_t rs, hs, ps;    /* own key/value strides: row, head, position */
    float scale;
} pjob_t;

/* st[j, rv : rv + LANES NV] for keys j0 .. j0 + NJ: qt (transposed queries, width rp)
 * against key rows at keys + j * kps. */
static inline __attribute__((always_inline)) void block_scores(
    const float *qt, int64_t rp, int64_t D, const float *keys, int64_t kps, int64_t rv,
    float *st, const int NJ, const int NV) {
    vec acc[JB][NQ] = {{{0}}};
    for (int64_t d = 0; d < D; d++) {
        vec qv[NQ];
        for (int c = 0; c < NV; c++) {
            qv[c] = load(qt + d * rp + rv + c * LANES);
            in_register(qv[c]);
        }
        for (int jk = 0; jk < NJ; jk++) {
            float x = keys[jk * kps + d];
            for (int c = 0; c < NV; c++) acc[jk][c] += x * qv[c];
        }
    }
    for (int jk = 0; jk < NJ; jk++)
        for (int c = 0; c < NV; c++) store(st + jk * rp + rv + c * LANES, acc[jk][c]);
}

#define SCORES_CASE(NJ_)                                                                  \
    switch (nv) {                                                                         \
    case 1: block_scores(qt, rp, D, keys, kps, rv, st, NJ_, 1); break;                    \
    case 2: block_scores(qt, rp, D, keys, kps, rv, st, NJ_, 2); break;                    \
    case 3: block_scores(qt, rp, D, keys, kps, rv, st, NJ_, AT_MOST(3, NQ)); break;       \
    default: block_scores(qt, rp, D, keys, kps, rv, st, NJ_, NQ); break;                  \
    }

static void scores_any(const float *qt, int64_t rp, int64_t D, const float *keys, int64_t kps,
                       int64_t rv, float *st, int64_t nj, int64_t nv) {
    switch (nj) {
    case 1: SCORES_CASE(1) break;
    case 2: SCORES_CASE(2) break;
    case 3: SCORES_CASE(3) break;
    default: SCORES_CASE(4) break;
    }
}

/* ot[d0 : d0 + DB, rv : rv + LANES NV] = ot * alpha + sum over the block's keys j of
 * values[j, d] * pt[j, rv ...]. */
static inline __attribute__((always_inline)) void block_values(
    const float *pt, int64_t rp, const float *values, int64_t vps, int64_t w, int64_t d0,
    int64_t rv, const float *alpha, float *ot, const int ND, const int NV) {
    vec acc[DB][NQ];
    for (int c = 0; c < NV; c++) {
        vec a = load(alpha + rv + c * LANES);
        for (int dd = 0; dd < ND; dd++) acc[dd][c] = load(ot + (d0 + dd) * rp + rv + c * LANES) * a;
    }
    for (int64_t j = 0; j < w; j++) {
        vec p[NQ];
        for (int c = 0; c < NV; c++) {
            p[c] = load(pt + j * rp + rv + c * LANES);
            in_register(p[c]);
        }
        for (int dd = 0; dd < ND; dd++) {
            float x = values[j * vps + d0 + dd];
            for (int c = 0; c < NV; c++) acc[dd][c] += x * p[c];
        }
    }
    for (int dd = 0; dd < ND; dd++)
        for (int c = 0; c < NV; c++) store(ot + (d0 + dd) * rp + rv + c * LANES, acc[dd][c]);
}

static void values_block(const float *pt, int64_t rp, const float *values, int64_t vps,
                         int64_t w, int64_t D, int64_t rvecs, const float *alpha, float *ot) {
    for (int64_t rv = 0; rv < rvecs * LANES; rv += NQ * LANES) {
        int64_t nv = rvecs - rv / LANES < NQ ? rvecs - rv / LANES : NQ;
        for (int64_t d0 = 0; d0 < D; d0 += DB) { /* D is a multiple of 16, so of DB */
            switch (nv) {
            case 1: block_values(pt, rp, values, vps, w, d0, rv, alpha, ot, DB, 1); break;
            case 2: block_values(pt, rp, values, vps, w, d0, rv, alpha, ot, DB, 2); break;
            case 3: block_values(pt, rp, values, vps, w, d0, rv, alpha, ot, DB, AT_MOST(3, NQ));
                break;
            default: block_values(pt, rp, values, vps, w, d0, rv, alpha, ot, DB, NQ); break;
            }
        }
    }
}

/* Per-task scratch, in floats: qt, ot [dim, rp]; st [KB, rp]; m, l, alpha, lim [rp]. */
static size_t task_floats(int64_t dim, int64_t rp) { return (size_t)(2 * dim + KB + 4) * rp; }

/* One block of w key columns at `keys`/`values`; col0 is the block's first own column,
 * or -1 for prefix columns (their position strides). `mask` (the block's own columns),
 * with the causal limit, applies where given; NULL: every query sees every column. */
static void attend_block(const pjob_t *j, float *qt, float *st, float *ot, float *m, float *l,
                         float *alpha, const float *lim, int64_t rp, const float *keys,
                         const float *values, int64_t w, int64_t col0, const uint8_t *mask) {
    const int64_t D = j->dim, rvecs = rp / LANES, kps = col0 < 0 ? j->pps : j->ps;
    for (int64_t j0 = 0; j0 < w; j0 += JB) {
        int64_t nj = w - j0 < JB ? w - j0 : JB;
        for (int64_t rv = 0; rv < rp; rv += NQ * LANES) {
            int64_t nv = (rp - rv) / LANES < NQ ? (rp - rv) / LANES : NQ;
            scores_any(qt, rp, D, keys + j0 * kps, kps, rv, st + j0 * rp, nj, nv);
        }
    }
    const vec ninf = splat(-INFINITY);
    if (mask) {
        for (int64_t c = 0; c < w; c++) {
            float *row = st + c * rp;
            if (!mask[c]) {
                for (int64_t rv = 0; rv < rp; rv += LANES) store(row + rv, ninf);
                continue;
            }
            const vec col = splat((float)(col0 + c));
            for (int64_t rv = 0; rv < rp; rv += LANES) /* causal: lim < col is masked */
                store(row + rv, vselect(load(lim + rv) >= col, load(row + rv), ninf));
        }
    }
    for (int64_t rv = 0; rv < rp; rv += LANES) {
        vec top = ninf;
        for (int64_t c = 0; c < w; c++) top = vmax(top, load(st + c * rp + rv));
        vec old = load(m + rv), now = vmax(old, top);
        vec safe = vselect(now == ninf, splat(0.0f), now); /* nothing seen yet: no NaN */
        vec total = {0};
        for (int64_t c = 0; c < w; c++) {
            vec e = vexp(load(st + c * rp + rv) - safe);
            store(st + c * rp + rv, e);
            total += e;
        }
        vec a = vexp(old - safe);
        store(alpha + rv, a);
        store(l + rv, load(l + rv) * a + total);
        store(m + rv, now);
    }
    values_block(st, rp, values, kps, w, D, rvecs, alpha, ot);
}

static void prefill_task(const pjob_t *j, int64_t t, int64_t qblocks, float *scratch) {
    const int64_t G = j->groups, D = j->dim;
    const int64_t row = t / (j->heads * qblocks), head = t / qblocks % j->heads;
    const int64_t i0 = t % qblocks * QB, n = j->qlen - i0 < QB ? j->qlen - i0 : QB;
    const int64_t r_used = G * n, rp = (r_used + LANES - 1) / LANES * LANES;
    float *qt = scratch, *ot = qt + D * rp, *st = ot + D * rp;
    float *m = st + KB * rp, *l = m + rp, *alpha = l + rp, *lim = alpha + rp;
    const int64_t first_col = j->len - j->qlen; /* own column of the chunk's first token */

    for (int64_t r = 0; r < rp; r++) {
        int64_t g = r / n, i = i0 + r % n;
        const float *qr = r < r_used ? j->q + row * j->qrs + (head * G + g) * j->qhs +
                                           i * j->qps : NULL;
        for (int64_t d = 0; d < D; d++) {
            qt[d * rp + r] = qr ? qr[d] * j->scale : 0.0f;
            ot[d * rp + r] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
        lim[r] = r < r_used ? (float)(first_col + i) : -1.0f; /* padding rows see nothing */
    }

    const int64_t pl = j->plen[row];
    if (pl > 0) {
        const int64_t p0 = j->pstart[row] * j->pps;
        const float *pk = j->pk + head * j->phs + p0, *pv = j->pv + head * j->phs + p0;
        for (int64_t c0 = 0; c0 < pl; c0 += KB) {
            int64_t w = pl - c0 < KB ? pl - c0 : KB;
            attend_block(j, qt, st, ot, m, l, alpha, lim, rp, pk + c0 * j->pps,
                         pv + c0 * j->pps, w, -1, NULL);
        }
    }
    const float *k = j->k + row * j->rs + head * j->hs, *v = j->v + row * j->rs + head * j->hs;
    const uint8_t *mask = j->mask + row * j->len;
    const int64_t last = first_col + i0 + n - 1; /* the task's last query sees up to here */
    for (int64_t c0 = 0; c0 <= last; c0 += KB) {
        int64_t w = last + 1 - c0 < KB ? last + 1 - c0 : KB;
        int any = 0, all = 1;
        for (int64_t c = 0; c < w; c++) {
            any |= mask[c0 + c];
            all &= mask[c0 + c];
        }
        if (!any) continue; /* padding: nothing here for any query */
        /* Blocks before the task's first query, with no padding, need no masking pass
         * (most of a long prompt's blocks): skipping it took 4 x 585 x 2,300 from
         * 99.0-109.5 to 92.0-96.5 ms, alternating. */
        const int visible = all && c0 + w - 1 <= first_col + i0;
        attend_block(j, qt, st, ot, m, l, alpha, lim, rp, k + c0 * j->ps, v + c0 * j->ps, w,
                     c0, visible ? NULL : mask + c0);
    }

    const int64_t H = j->heads * G;
    for (int64_t r = 0; r < r_used; r++) {
        int64_t g = r / n, i = i0 + r % n;
        float *o = j->out + ((row * j->qlen + i) * H + head * G + g) * D;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int64_t d = 0; d < D; d++) o[d] = ot[d * rp + r] * inv;
    }
}

/* Tasks split dynamically over `threads` OpenMP threads (later query blocks see more
 * columns). Returns 0, or -1 when scratch memory could not be had. */
int prefill_attention(const float *q, const float *pk, const float *pv, const int64_t *pstart,
                      const int64_t *plen, const float *k, const float *v, const uint8_t *mask,
                      float *out, int64_t rows, int64_t heads, int64_t groups, int64_t dim,
                      int64_t qlen, int64_t len, int64_t qrs, int64_t qhs, int64_t qps,
                      int64_t phs, int64_t pps, int64_t rs, int64_t hs, int64_t ps, float scale,
                      int threads) {
    pjob_t j = {q, pk, pv, k, v, pstart, plen, mask, out, heads, groups, dim, qlen, len,
                qrs, qhs, qps, phs, pps, rs, hs, ps, scale};
    const int64_t qblocks = (qlen + QB - 1) / QB, tasks = rows * heads * qblocks;
    const int64_t rp_max = (groups * QB + LANES - 1) / LANES * LANES;
    if (threads < 1) threads = 1;
    if (threads > tasks) threads = (int)(tasks > 0 ? tasks : 1);
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        float *scratch = malloc(task_floats(dim, rp_max) * sizeof(float));
        if (!scratch) failed = 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++)
            if (scratch) prefill_task(&j, t, qblocks, scratch);
        free(scratch);
    }
    return failed ? -1 : 0;
}
