// The parts of a replicated network's training step that BLAS serves poorly, for float32 on
// the CPU (svbnn._native compiles this file with fused_forward.cpp into one library):
//
// * svbnn_gather_rows: a minibatch's rows gathered from the data, with the next rows
//   prefetched (the rows are random, so each one waits on memory otherwise);
// * svbnn_narrow_forward / svbnn_narrow_weight_grad: a first layer of few outputs (the
//   Simulation II networks: 7 of 200 inputs) on every replicate, h = b + W x^T and its
//   weight gradient G x. MKL packs the whole minibatch into its own layout for each of
//   these products, which costs more than the arithmetic when the layer has 7 rows.
//
// Nothing is checked here: svbnn._native passes contiguous float32 arrays of the stated
// shapes. The sums run in a fixed order (no threads), so a result does not depend on the
// machine's load or on torch's thread count.
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

inline v16 load16(const float* p) {  // unaligned
    v16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline float hsum(v16 v) {
    v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    v4 c = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (c[0] + c[2]) + (c[1] + c[3]);
}

// out[j * m + b] = bias[j] + sum_k W[j * ws + k] x[b * p + k] for j < O, b < m: three rows of
// x at a time share each load of W (O <= 8 keeps the 3 O sums in registers).
template <int O>
void narrow_rows(const float* x, int64_t m, int64_t p, const float* W, int64_t ws,
                 const float* bias, float* out) {
    const int64_t pv = p & ~int64_t(15);
    int64_t b = 0;
    for (; b + 3 <= m; b += 3) {
        const float* x0 = x + b * p;
        const float* x1 = x0 + p;
        const float* x2 = x1 + p;
        v16 a0[O], a1[O], a2[O];
        for (int j = 0; j < O; ++j) a0[j] = a1[j] = a2[j] = v16{};
        for (int64_t k = 0; k < pv; k += 16) {
            v16 y0 = load16(x0 + k), y1 = load16(x1 + k), y2 = load16(x2 + k);
            for (int j = 0; j < O; ++j) {
                v16 w = load16(W + j * ws + k);
                a0[j] += w * y0;
                a1[j] += w * y1;
                a2[j] += w * y2;
            }
        }
        for (int j = 0; j < O; ++j) {
            float s0 = hsum(a0[j]), s1 = hsum(a1[j]), s2 = hsum(a2[j]);
            for (int64_t k = pv; k < p; ++k) {
                float w = W[j * ws + k];
                s0 += w * x0[k];
                s1 += w * x1[k];
                s2 += w * x2[k];
            }
            out[j * m + b] = s0 + bias[j];
            out[j * m + b + 1] = s1 + bias[j];
            out[j * m + b + 2] = s2 + bias[j];
        }
    }
    for (; b < m; ++b) {
        const float* x0 = x + b * p;
        v16 a0[O];
        for (int j = 0; j < O; ++j) a0[j] = v16{};
        for (int64_t k = 0; k < pv; k += 16) {
            v16 y0 = load16(x0 + k);
            for (int j = 0; j < O; ++j) a0[j] += load16(W + j * ws + k) * y0;
        }
        for (int j = 0; j < O; ++j) {
            float s0 = hsum(a0[j]);
            for (int64_t k = pv; k < p; ++k) s0 += W[j * ws + k] * x0[k];
            out[j * m + b] = s0 + bias[j];
        }
    }
}

void narrow_block(int o, const float* x, int64_t m, int64_t p, const float* W, int64_t ws,
                  const float* bias, float* out) {
    switch (o) {
        case 1: narrow_rows<1>(x, m, p, W, ws, bias, out); break;
        case 2: narrow_rows<2>(x, m, p, W, ws, bias, out); break;
        case 3: narrow_rows<3>(x, m, p, W, ws, bias, out); break;
        case 4: narrow_rows<4>(x, m, p, W, ws, bias, out); break;
        case 5: narrow_rows<5>(x, m, p, W, ws, bias, out); break;
        case 6: narrow_rows<6>(x, m, p, W, ws, bias, out); break;
        case 7: narrow_rows<7>(x, m, p, W, ws, bias, out); break;
        default: narrow_rows<8>(x, m, p, W, ws, bias, out); break;
    }
}

}  // namespace

// out[i] = src[rows[i]] for rows of row_bytes bytes, i < n_rows; rows[i + 8] is prefetched
// while rows[i] is copied.
extern "C" void svbnn_gather_rows(const char* src, const int64_t* rows, int64_t n_rows,
                                  int64_t row_bytes, char* out) {
    const int64_t ahead = 8;
    for (int64_t i = 0; i < n_rows; ++i) {
        if (i + ahead < n_rows) {
            const char* next = src + rows[i + ahead] * row_bytes;
            for (int64_t c = 0; c < row_bytes; c += 64) __builtin_prefetch(next + c, 0, 0);
        }
        std::memcpy(out + i * row_bytes, src + rows[i] * row_bytes, row_bytes);
    }
}

// The first layer of R replicates, feature-major: out (R, o, m) with
// out[r, j, b] = theta[r, j (p + 1) + p] + sum_k theta[r, j (p + 1) + k] x[r, b, k]
// (layer 0 of svbnn._network_graph.layer_views: rows of p weights and a bias), x (R, m, p),
// theta rows theta_stride apart.
extern "C" void svbnn_narrow_forward(const float* x, int64_t R, int64_t m, int64_t p,
                                     const float* theta, int64_t theta_stride, int64_t o,
                                     float* out) {
    // The weights copied to rows of a multiple of 16 floats on 64-byte boundaries: the
    // vector loads of W then never straddle two cache lines.
    const int64_t ws = (p + 15) & ~int64_t(15);
    std::vector<float> store(static_cast<size_t>(8 * ws + 16));
    float* W = store.data();
    W += (16 - (reinterpret_cast<uintptr_t>(W) / sizeof(float)) % 16) % 16;
    float bias[8];
    for (int64_t r = 0; r < R; ++r) {
        const float* layer = theta + r * theta_stride;
        for (int64_t j0 = 0; j0 < o; j0 += 8) {
            const int block = static_cast<int>(o - j0 < 8 ? o - j0 : 8);
            for (int j = 0; j < block; ++j) {
                const float* row = layer + (j0 + j) * (p + 1);
                std::memcpy(W + j * ws, row, p * sizeof(float));
                bias[j] = row[p];
            }
            narrow_block(block, x + r * m * p, m, p, W, ws, bias, out + (r * o + j0) * m);
        }
    }
}

// The gradient of svbnn_narrow_forward's weights and biases from g (R, o, m): for each
// replicate, sum_b g[r, j, b] x[r, b, k] into grad[r, j (p + 1) + k] and sum_b g[r, j, b]
// into grad[r, j (p + 1) + p] (grad rows grad_stride apart; nothing else is written).
extern "C" void svbnn_narrow_weight_grad(const float* x, const float* g, int64_t R, int64_t m,
                                         int64_t p, int64_t o, float* grad,
                                         int64_t grad_stride) {
    std::vector<float> acc(static_cast<size_t>(o * p));
    float* a = acc.data();
    for (int64_t r = 0; r < R; ++r) {
        std::memset(a, 0, sizeof(float) * o * p);
        const float* X = x + r * m * p;
        const float* G = g + r * o * m;
        int64_t b = 0;
        // Four rows of x at a time: one pass over the sums for four products.
        for (; b + 4 <= m; b += 4) {
            const float* x0 = X + b * p;
            const float* x1 = x0 + p;
            const float* x2 = x1 + p;
            const float* x3 = x2 + p;
            for (int64_t j = 0; j < o; ++j) {
                const float* gj = G + j * m + b;
                const float g0 = gj[0], g1 = gj[1], g2 = gj[2], g3 = gj[3];
                float* aj = a + j * p;
#pragma omp simd
                for (int64_t k = 0; k < p; ++k)
                    aj[k] += (g0 * x0[k] + g1 * x1[k]) + (g2 * x2[k] + g3 * x3[k]);
            }
        }
        for (; b < m; ++b) {
            const float* x0 = X + b * p;
            for (int64_t j = 0; j < o; ++j) {
                const float g0 = G[j * m + b];
                float* aj = a + j * p;
#pragma omp simd
                for (int64_t k = 0; k < p; ++k) aj[k] += g0 * x0[k];
            }
        }
        float* out = grad + r * grad_stride;
        for (int64_t j = 0; j < o; ++j) {
            std::memcpy(out + j * (p + 1), a + j * p, p * sizeof(float));
            float s = 0.0f;
            for (int64_t b2 = 0; b2 < m; ++b2) s += G[j * m + b2];
            out[j * (p + 1) + p] = s;
        }
    }
}
