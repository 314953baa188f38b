// The parts of a replicated network's training step that BLAS and torch's per-operation
// cost serve poorly, for float32 on the CPU (svbnn._engine.native builds this file with
// fused_forward.cpp and bindings.cpp into one extension module):
//
// * svbnn_gather_rows: a minibatch's rows gathered from the data, with the next rows
//   prefetched (the rows are random, so each one waits on memory otherwise);
// * svbnn_narrow_mlp_forward / svbnn_narrow_mlp_backward: a replicated MLP whose layers all
//   have few outputs (the Simulation II networks: 200-7-7-7-1), forward and weight
//   gradient, each replicate's layers one after another. MKL packs the whole minibatch into
//   its own layout for each product of the first layer, which costs more than the
//   arithmetic when the layer has 7 rows, and the 7 x 7 layers are a dozen small torch
//   operations each.
//
// Nothing is checked here: bindings.cpp passes contiguous float32 arrays of the stated
// shapes. The sums run in a fixed order (no threads), so a result does not depend on the
// machine's load or on torch's thread count.
#include <cstdint>
#include <cstring>
#include <vector>

#include "loops.h"
#include "vectors.h"

namespace {

using namespace svbnn_vectors;

// The first layer's products: each is the sum of 16 lanes (lane l sums the terms of k = l mod
// 16 below the last multiple of 16), then a tree over the lanes, then the last p mod 16 terms
// in order, then the bias. The 16 lanes are held in the CPU's vectors: one of 16 floats, or
// pieces of 8 or 4 (lane l of piece i is lane kWidth i + l), so that they stay in registers
// (a 16-float vector type on a CPU without AVX-512 is split through memory, 4-6 times
// slower); the operations, and so every result, are the same at every width.
#if defined(__AVX512F__)
constexpr int kRows = 3, kOuts = 8;  // 24 sums, 3 rows and a weight: 28 of 32 registers
#elif defined(__AVX__)
constexpr int kRows = 2, kOuts = 3;  // 12 sums, 2 rows and a weight: 15 of 16 registers
#else
constexpr int kRows = 1, kOuts = 2;
#endif
constexpr int kPieces = 16 / kWidth;

// The sum of the 16 lanes (the pieces a[0], ..., a[kPieces - 1]) as halves, then quarters,
// in this order at every width.
inline float hsum(const vec* a) {
    float h[8];
    if constexpr (kPieces == 1) {
        for (int i = 0; i < 8; ++i) h[i] = a[0][i] + a[0][i + 8];
    } else if constexpr (kPieces == 2) {
        const vec s = a[0] + a[1];
        std::memcpy(h, &s, sizeof h);
    } else {
        const vec lo = a[0] + a[2], hi = a[1] + a[3];
        std::memcpy(h, &lo, sizeof lo);
        std::memcpy(h + 4, &hi, sizeof hi);
    }
    float c[4];
    for (int i = 0; i < 4; ++i) c[i] = h[i] + h[i + 4];
    return (c[0] + c[2]) + (c[1] + c[3]);
}

// out[j * m + b + r] = the 16 lanes' sum of W[j * ws + k] x[(b + r) * p + k] over k below
// p's last multiple of 16, for j < O and r < R: the R rows share each load of W.
template <int O, int R>
void lane_sums(const float* x, int64_t m, int64_t p, const float* W, int64_t ws, float* out,
               int64_t b) {
    const int64_t pv = p & ~int64_t(15);
    vec a[R][O][kPieces];
#pragma GCC unroll 64
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 64
        for (int j = 0; j < O; ++j)
#pragma GCC unroll 64
            for (int i = 0; i < kPieces; ++i) a[r][j][i] = vec{};
    for (int64_t k = 0; k < pv; k += 16) {
#pragma GCC unroll 64
        for (int i = 0; i < kPieces; ++i) {
            vec y[R];
#pragma GCC unroll 64
            for (int r = 0; r < R; ++r) y[r] = load(x + (b + r) * p + k + i * kWidth);
#pragma GCC unroll 64
            for (int j = 0; j < O; ++j) {
                const vec w = load(W + j * ws + k + i * kWidth);
#pragma GCC unroll 64
                for (int r = 0; r < R; ++r) a[r][j][i] += w * y[r];
            }
        }
    }
    for (int j = 0; j < O; ++j)
        for (int r = 0; r < R; ++r) out[j * m + b + r] = hsum(a[r][j]);
}

template <int O>
void lane_sums_rows(const float* x, int64_t m, int64_t p, const float* W, int64_t ws,
                    float* out) {
    int64_t b = 0;
    for (; b + kRows <= m; b += kRows) lane_sums<O, kRows>(x, m, p, W, ws, out, b);
    for (; b < m; ++b) lane_sums<O, 1>(x, m, p, W, ws, out, b);
}

// lane_sums over all m rows for o <= 8 outputs, kOuts at a time.
void lane_sums_block(int o, const float* x, int64_t m, int64_t p, const float* W, int64_t ws,
                     float* out) {
    for (int j0 = 0; j0 < o; j0 += kOuts) {
        const float* Wj = W + j0 * ws;
        float* oj = out + j0 * m;
        switch (o - j0 < kOuts ? o - j0 : kOuts) {
            case 1: lane_sums_rows<1>(x, m, p, Wj, ws, oj); break;
            case 2: lane_sums_rows<2>(x, m, p, Wj, ws, oj); break;
            case 3: lane_sums_rows<3>(x, m, p, Wj, ws, oj); break;
            case 4: lane_sums_rows<4>(x, m, p, Wj, ws, oj); break;
            case 5: lane_sums_rows<5>(x, m, p, Wj, ws, oj); break;
            case 6: lane_sums_rows<6>(x, m, p, Wj, ws, oj); break;
            case 7: lane_sums_rows<7>(x, m, p, Wj, ws, oj); break;
            default: lane_sums_rows<8>(x, m, p, Wj, ws, oj); break;
        }
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

namespace {

// Layer 0 of one replicate: out (o, m) = b + W x^T, x (m, p) sample-major; W rows of p
// weights and a bias, p + 1 apart, in layer. Scratch: W, 8 rows of a multiple of 16 floats
// from a 64-byte boundary; xt, 15 m floats.
void first_layer(const float* x, int64_t m, int64_t p, const float* layer, int64_t o, float* out,
                 float* W, float* xt) {
    // W: the weights copied to rows of a multiple of 16 floats on 64-byte boundaries, so
    // that the vector loads never straddle two cache lines.
    const int64_t ws = (p + 15) & ~int64_t(15);
    const int64_t pv = p & ~int64_t(15);
    // xt: x's last p - pv columns, feature-major, so that the terms after the lanes' sum run
    // over the rows as vectors, each row's added in the order of k.
    for (int64_t b = 0; b < m; ++b)
        for (int64_t k = pv; k < p; ++k) xt[(k - pv) * m + b] = x[b * p + k];
    for (int64_t j0 = 0; j0 < o; j0 += 8) {
        const int block = static_cast<int>(o - j0 < 8 ? o - j0 : 8);
        for (int j = 0; j < block; ++j)
            std::memcpy(W + j * ws, layer + (j0 + j) * (p + 1), p * sizeof(float));
        lane_sums_block(block, x, m, p, W, ws, out + j0 * m);
        for (int j = 0; j < block; ++j) {
            float* y = out + (j0 + j) * m;
            for (int64_t k = pv; k < p; ++k) {
                const float wk = W[j * ws + k];
                const float* xk = xt + (k - pv) * m;
#pragma omp simd
                for (int64_t b = 0; b < m; ++b) y[b] += wk * xk[b];
            }
            const float bias = layer[(j0 + j) * (p + 1) + p];
#pragma omp simd
            for (int64_t b = 0; b < m; ++b) y[b] += bias;
        }
    }
}

// A later layer of one replicate, feature-major: out (o, m) = b + W h, h (in, m).
void hidden_layer(const float* h, int64_t m, int64_t in, const float* layer, int64_t o,
                  float* out) {
    for (int64_t j = 0; j < o; ++j) {
        const float* w = layer + j * (in + 1);
        float* y = out + j * m;
        const float bj = w[in];
#pragma omp simd
        for (int64_t b = 0; b < m; ++b) y[b] = bj;
        for (int64_t k = 0; k < in; ++k) {
            const float wk = w[k];
            const float* hk = h + k * m;
#pragma omp simd
            for (int64_t b = 0; b < m; ++b) y[b] += wk * hk[b];
        }
    }
}

// As torch.relu (a NaN stays NaN).
void relu(float* h, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) h[i] = h[i] < 0.0f ? 0.0f : h[i];
}

// The weight gradient of layer 0 of one replicate: sum_b g[j, b] x[b, k] into
// out[j (p + 1) + k] and sum_b g[j, b] into out[j (p + 1) + p]; a (o p floats) is scratch.
void first_layer_grad(const float* x, const float* g, int64_t m, int64_t p, int64_t o,
                      float* out, float* a) {
    std::memset(a, 0, sizeof(float) * o * p);
    int64_t b = 0;
    // Four rows of x at a time: one pass over the sums for four products.
    for (; b + 4 <= m; b += 4) {
        const float* x0 = x + b * p;
        const float* x1 = x0 + p;
        const float* x2 = x1 + p;
        const float* x3 = x2 + p;
        for (int64_t j = 0; j < o; ++j) {
            const float* gj = g + j * m + b;
            const float g0 = gj[0], g1 = gj[1], g2 = gj[2], g3 = gj[3];
            float* aj = a + j * p;
#pragma omp simd
            for (int64_t k = 0; k < p; ++k)
                aj[k] += (g0 * x0[k] + g1 * x1[k]) + (g2 * x2[k] + g3 * x3[k]);
        }
    }
    for (; b < m; ++b) {
        const float* x0 = x + b * p;
        for (int64_t j = 0; j < o; ++j) {
            const float g0 = g[j * m + b];
            float* aj = a + j * p;
#pragma omp simd
            for (int64_t k = 0; k < p; ++k) aj[k] += g0 * x0[k];
        }
    }
    for (int64_t j = 0; j < o; ++j) {
        std::memcpy(out + j * (p + 1), a + j * p, p * sizeof(float));
        float s = 0.0f;
        for (int64_t i = 0; i < m; ++i) s += g[j * m + i];
        out[j * (p + 1) + p] = s;
    }
}

// A later layer's gradient of one replicate, feature-major: sum_b g[j, b] h[k, b] into
// out[j (in + 1) + k], sum_b g[j, b] into out[j (in + 1) + in].
void hidden_layer_grad(const float* h, const float* g, int64_t m, int64_t in, int64_t o,
                       float* out) {
    for (int64_t j = 0; j < o; ++j) {
        const float* gj = g + j * m;
        for (int64_t k = 0; k < in; ++k) {
            const float* hk = h + k * m;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t b = 0; b < m; ++b) s += gj[b] * hk[b];
            out[j * (in + 1) + k] = s;
        }
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t b = 0; b < m; ++b) s += gj[b];
        out[j * (in + 1) + in] = s;
    }
}

// The gradient through a later layer to its input, with ReLU's derivative where relu:
// gin[k, b] = sum_j W[j, k] g[j, b], zero where the input h[k, b] (ReLU's output) is not > 0.
void input_grad(const float* layer, const float* g, const float* h, int64_t m, int64_t in,
                int64_t o, bool relu_in, float* gin) {
    for (int64_t k = 0; k < in; ++k) {
        float* y = gin + k * m;
#pragma omp simd
        for (int64_t b = 0; b < m; ++b) y[b] = 0.0f;
        for (int64_t j = 0; j < o; ++j) {
            const float w = layer[j * (in + 1) + k];
            const float* gj = g + j * m;
#pragma omp simd
            for (int64_t b = 0; b < m; ++b) y[b] += w * gj[b];
        }
        if (relu_in) {
            const float* hk = h + k * m;
#pragma omp simd
            for (int64_t b = 0; b < m; ++b) y[b] = hk[b] > 0.0f ? y[b] : 0.0f;
        }
    }
}

float* aligned(std::vector<float>& store) {
    float* p = store.data();
    return p + (16 - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % 16) % 16;
}

// One replicate's layers forward (see svbnn_narrow_mlp_forward); W and xt: first_layer's
// scratch.
void forward_one(int64_t r, const float* x, int64_t m, int64_t p, const float* theta,
                 int64_t theta_stride, int64_t n_layers, const int64_t* outs, bool relu_on,
                 float* const* hs, float* out, float* W, float* xt) {
    const float* layer = theta + r * theta_stride;
    const float* h_in = nullptr;
    int64_t in = p;
    for (int64_t i = 0; i < n_layers; ++i) {
        const int64_t o = outs[i];
        float* h = (i + 1 < n_layers ? hs[i] : out) + r * o * m;
        if (i == 0)
            first_layer(x + r * m * p, m, p, layer, o, h, W, xt);
        else
            hidden_layer(h_in, m, in, layer, o, h);
        if (relu_on && i + 1 < n_layers) relu(h, o * m);
        layer += o * (in + 1);
        h_in = h;
        in = o;
    }
}

// Scratch and layer offsets of the backward.
struct Backward {
    std::vector<int64_t> ins, offsets;
    std::vector<float> g_a, g_b, acc;

    Backward(int64_t p, int64_t n_layers, const int64_t* outs, int64_t m)
        : ins(n_layers), offsets(n_layers) {
        int64_t widest = 0;
        for (int64_t i = 0, off = 0, in = p; i < n_layers; ++i) {
            ins[i] = in;
            offsets[i] = off;
            off += outs[i] * (in + 1);
            in = outs[i];
            widest = outs[i] > widest ? outs[i] : widest;
        }
        g_a.resize(static_cast<size_t>(widest * m));
        g_b.resize(g_a.size());
        acc.resize(static_cast<size_t>(outs[0] * p));
    }

    // One replicate's weight and bias gradient from its output's gradient g (outs[-1], m).
    void one(int64_t r, const float* x, int64_t m, int64_t p, const float* theta,
             int64_t theta_stride, int64_t n_layers, const int64_t* outs, bool relu_on,
             const float* const* hs, const float* g, float* grad, int64_t grad_stride) {
        const float* layers = theta + r * theta_stride;
        float* grads = grad + r * grad_stride;
        float* spare = g_a.data();
        for (int64_t i = n_layers - 1; i >= 0; --i) {
            const int64_t o = outs[i], in = ins[i];
            if (i == 0) {
                first_layer_grad(x + r * m * p, g, m, p, o, grads, acc.data());
                break;
            }
            const float* h = hs[i - 1] + r * in * m;  // this layer's input
            hidden_layer_grad(h, g, m, in, o, grads + offsets[i]);
            input_grad(layers + offsets[i], g, h, m, in, o, relu_on, spare);
            g = spare;
            spare = spare == g_a.data() ? g_b.data() : g_a.data();
        }
    }
};

}  // namespace

// A replicated MLP of narrow layers, feature-major, as svbnn._engine.graphs.mlp_layers runs
// it: x (R, m, p) sample-major; n_layers layers of outs[i] outputs on the flat weights
// theta (R rows theta_stride apart, layer i's rows of in_i weights and a bias); ReLU
// between the layers where relu, else none. Writes each hidden activation into hs[i]
// (R, outs[i], m) for i < n_layers - 1, and the output into out (R, outs[-1], m).
extern "C" void svbnn_narrow_mlp_forward(const float* x, int64_t R, int64_t m, int64_t p,
                                         const float* theta, int64_t theta_stride,
                                         int64_t n_layers, const int64_t* outs, int32_t relu_on,
                                         float* const* hs, float* out) {
    const int64_t ws = (p + 15) & ~int64_t(15);
    std::vector<float> store(static_cast<size_t>(8 * ws + 16)), xt(static_cast<size_t>(15 * m));
    float* W = aligned(store);
    for (int64_t r = 0; r < R; ++r)
        forward_one(r, x, m, p, theta, theta_stride, n_layers, outs, relu_on != 0, hs, out, W,
                    xt.data());
}

// The weight and bias gradient of svbnn_narrow_mlp_forward's network from g (R, outs[-1],
// m), feature-major, and its hidden activations hs; written into grad (R rows grad_stride
// apart, laid out as theta; nothing else is written).
extern "C" void svbnn_narrow_mlp_backward(const float* x, int64_t R, int64_t m, int64_t p,
                                          const float* theta, int64_t theta_stride,
                                          int64_t n_layers, const int64_t* outs,
                                          int32_t relu_on, const float* const* hs,
                                          const float* g_out, float* grad,
                                          int64_t grad_stride) {
    Backward back(p, n_layers, outs, m);
    for (int64_t r = 0; r < R; ++r)
        back.one(r, x, m, p, theta, theta_stride, n_layers, outs, relu_on != 0, hs,
                 g_out + r * outs[n_layers - 1] * m, grad, grad_stride);
}

// Both for a network of one output under a Gaussian likelihood, replicate by replicate (its
// minibatch and activations still in the cache for the backward): the forward, then the
// output's gradient from the targets y (R, m) as autograd forms it from the log-likelihood
// c + v (y - out)^2 averaged and negated (half = g_mean ((y - out) v), g = -(half + half),
// each operation rounded; g_mean = -1 / m), then the backward into grad.
extern "C" void svbnn_narrow_mlp_gaussian_step(const float* x, int64_t R, int64_t m, int64_t p,
                                               const float* theta, int64_t theta_stride,
                                               int64_t n_layers, const int64_t* outs,
                                               int32_t relu_on, float* const* hs, float* out,
                                               const float* y, float v, float g_mean,
                                               float* grad, int64_t grad_stride) {
    const int64_t ws = (p + 15) & ~int64_t(15);
    std::vector<float> store(static_cast<size_t>(8 * ws + 16)), g_out(static_cast<size_t>(m)),
        xt(static_cast<size_t>(15 * m));
    float* W = aligned(store);
    Backward back(p, n_layers, outs, m);
    for (int64_t r = 0; r < R; ++r) {
        forward_one(r, x, m, p, theta, theta_stride, n_layers, outs, relu_on != 0, hs, out, W,
                    xt.data());
        const float* o = out + r * m;
        const float* t = y + r * m;
        float* g = g_out.data();
#pragma omp simd
        for (int64_t b = 0; b < m; ++b) {
            const float half = g_mean * ((t[b] - o[b]) * v);
            g[b] = -(half + half);
        }
        back.one(r, x, m, p, theta, theta_stride, n_layers, outs, relu_on != 0, hs, g, grad,
                 grad_stride);
    }
}
