// The local sampler's network (svbnn._engine.fused.LocalFlatMLP) for one network's float32
// flat means and variances on the CPU, forward and backward. The products' sums run in
// vectors of the CPU's width (vectors.h), each sum from 0 in a fixed order (the forward's
// over a row's inputs, the weight gradient's over the rows), so they are the same floats on
// every CPU (tests/test_native.py emulates both orders exactly); the rest are plain loops
// for the compiler's auto-vectoriser. bindings.cpp checks the tensors it passes; nothing is
// checked here.
//
// Layer l reads rows of in_l + 1 numbers of the flat arrays (the weights, then the bias;
// svbnn._engine.graphs.layer_views), in_0 = p and in_l = outs[l - 1]. Its pre-activation is
// m + sqrt(max(v, FLT_MIN)) eps with m = h Wm^T + bm, v = h^2 Wv^T + bv and eps the N(0, 1)
// draws the caller passes (torch's generator, so the same numbers as the eager layers). The
// products sum in another order than BLAS: the results are the eager ones to float32
// rounding, not bit for bit (tests/test_native.py).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "loops.h"
#include "vectors.h"

namespace {

// The width of layer l's input.
inline int64_t in_width(int64_t l, int64_t p, const int64_t* outs) {
    return l == 0 ? p : outs[l - 1];
}

using namespace svbnn_vectors;

constexpr int kRows = 4;  // rows a block of the forward: 8 sums of 16 registers under AVX2

// am[r o_pad + j] = sum_k h[r, k] wt_m[k o_pad + j] and av alike with h[r, k]^2 and wt_v, for
// the R rows of h (rows of in), each sum from 0 in the order of k, as one float's loop adds it
// (j < o_pad, a multiple of kWidth).
template <int R>
void moments_rows(const float* __restrict h, int64_t in, const float* __restrict wt_m,
                  const float* __restrict wt_v, int64_t o_pad, float* __restrict am,
                  float* __restrict av) {
    for (int64_t j = 0; j < o_pad; j += kWidth) {
        vec sm[R], sv[R];
        for (int r = 0; r < R; ++r) sm[r] = sv[r] = vec{};
        for (int64_t k = 0; k < in; ++k) {
            const vec wm = load(wt_m + k * o_pad + j), wv = load(wt_v + k * o_pad + j);
            for (int r = 0; r < R; ++r) {
                const float hk = h[r * in + k], hk2 = hk * hk;
                sm[r] += hk * wm;
                sv[r] += hk2 * wv;
            }
        }
        for (int r = 0; r < R; ++r) {
            store(am + r * o_pad + j, sm[r]);
            store(av + r * o_pad + j, sv[r]);
        }
    }
}

}  // namespace

// Forward: eps[l] (m, outs[l]) holds the draws on entry and eps / (2 s) on return (the
// backward's factor); hs[l] (m, outs[l]) receives layer l's activation for l < L - 1, out
// (m, outs[L - 1]) the last pre-activation. The weights are read transposed (in, out), from a
// copy whose rows are padded to a multiple of the vector width, so that a vector of outputs
// of kRows rows at a time sums in registers.
extern "C" void svbnn_local_mlp_forward(const float* x, int64_t m, int64_t p,
                                        const float* mean, const float* var, int64_t n_layers,
                                        const int64_t* outs, int32_t relu_on, float* const* eps,
                                        float* const* hs, float* out) {
    const float* h = x;
    int64_t start = 0;
    std::vector<float> scratch, sums;
    for (int64_t l = 0; l < n_layers; ++l) {
        const int64_t in = in_width(l, p, outs), o = outs[l], row = in + 1;
        const int64_t o_pad = (o + kWidth - 1) / kWidth * kWidth;
        scratch.assign(static_cast<size_t>(2 * (in + 1) * o_pad), 0.0f);
        // wt_m[k o_pad + j] = Wm[j, k] (the bias at k = in), and wt_v alike; zeros past o
        float* __restrict wt_m = scratch.data();
        float* __restrict wt_v = wt_m + (in + 1) * o_pad;
        for (int64_t j = 0; j < o; ++j)
            for (int64_t k = 0; k <= in; ++k) {
                wt_m[k * o_pad + j] = mean[start + j * row + k];
                wt_v[k * o_pad + j] = var[start + j * row + k];
            }
        sums.resize(static_cast<size_t>(2 * kRows * o_pad));
        float* __restrict am = sums.data();
        float* __restrict av = am + kRows * o_pad;
        float* __restrict e = eps[l];
        const bool last = l + 1 == n_layers;
        float* __restrict dst = last ? out : hs[l];
        const float* __restrict bm = wt_m + in * o_pad;
        const float* __restrict bv = wt_v + in * o_pad;
        for (int64_t r0 = 0; r0 < m; r0 += kRows) {
            const int64_t rows = m - r0 < kRows ? m - r0 : kRows;
            if (rows == kRows)
                moments_rows<kRows>(h + r0 * in, in, wt_m, wt_v, o_pad, am, av);
            else
                for (int64_t i = 0; i < rows; ++i)
                    moments_rows<1>(h + (r0 + i) * in, in, wt_m, wt_v, o_pad, am + i * o_pad,
                                    av + i * o_pad);
            for (int64_t i = 0; i < rows; ++i) {
                const int64_t r = r0 + i;
                const float* __restrict ami = am + i * o_pad;
                const float* __restrict avi = av + i * o_pad;
                float* __restrict er = e + r * o;
                float* __restrict dr = dst + r * o;
#pragma omp simd
                for (int64_t j = 0; j < o; ++j) {
                    const float mv = ami[j] + bm[j];
                    const float vv = avi[j] + bv[j];
                    const float s = std::sqrt(vv < FLT_MIN ? FLT_MIN : vv);  // NaN stays NaN
                    const float ej = er[j];
                    const float pre = mv + s * ej;
                    er[j] = (ej / s) * 0.5f;
                    dr[j] = (!last && relu_on && pre < 0.0f) ? 0.0f : pre;
                }
            }
        }
        h = dst;
        start += o * row;
    }
}

namespace {

constexpr int kBlockRows = 32;  // rows of a block of the weight gradient

// C vectors of a layer's weight gradient, sm[c] and sv[c] from sums_m and sums_v at columns
// k0 + c kWidth, plus the terms of the block's rows in order (padded rows of in_pad).
template <int C>
void weight_grad_block(const float* __restrict hp, const float* __restrict h2p,
                       const float* __restrict a, const float* __restrict b, int64_t rows,
                       int64_t in_pad, int64_t k0, float* __restrict sums_m,
                       float* __restrict sums_v) {
    vec sm[C], sv[C];
    for (int c = 0; c < C; ++c) {
        sm[c] = load(sums_m + k0 + c * kWidth);
        sv[c] = load(sums_v + k0 + c * kWidth);
    }
    for (int64_t i = 0; i < rows; ++i) {
        const float ai = a[i], bi = b[i];
        for (int c = 0; c < C; ++c) {
            sm[c] += ai * load(hp + i * in_pad + k0 + c * kWidth);
            sv[c] += bi * load(h2p + i * in_pad + k0 + c * kWidth);
        }
    }
    for (int c = 0; c < C; ++c) {
        store(sums_m + k0 + c * kWidth, sm[c]);
        store(sums_v + k0 + c * kWidth, sv[c]);
    }
}

// A layer's weight and bias gradients into gm and gv (o rows of in + 1), from its input h
// (m, in), the output's gradient g (m, o) and the draws' factor he (m, o): gm[j, k] = sum_r
// g[r, j] h[r, k] and gv[j, k] = sum_r (g[r, j] he[r, j]) h[r, k]^2, each from 0 over the
// rows in order (the biases: of g[r, j] and of g[r, j] he[r, j]). The rows kBlockRows at a
// time, each block's inputs and their squares copied to padded rows, so that every
// output's sums run a vector of columns at a time in registers; pads: scratch.
void weight_grads(const float* __restrict h, const float* __restrict g,
                  const float* __restrict he, int64_t m, int64_t in, int64_t o,
                  float* __restrict gm, float* __restrict gv, std::vector<float>& pads) {
    constexpr int kChunks = 4;  // 8 sums of 16 registers under AVX2
    const int64_t in_pad = (in + kWidth - 1) / kWidth * kWidth, row = in + 1;
    const int64_t block = kBlockRows;
    pads.assign(static_cast<size_t>(2 * block * in_pad + 2 * block * o + 2 * o * in_pad + 2 * o),
                0.0f);
    float* __restrict hp = pads.data();
    float* __restrict h2p = hp + block * in_pad;
    float* __restrict at = h2p + block * in_pad;  // the block's g, (o, rows)
    float* __restrict bt = at + block * o;        // and g he
    float* __restrict sums_m = bt + block * o;    // (o, in_pad)
    float* __restrict sums_v = sums_m + o * in_pad;
    float* __restrict bias_m = sums_v + o * in_pad;
    float* __restrict bias_v = bias_m + o;
    for (int64_t r0 = 0; r0 < m; r0 += block) {
        const int64_t rows = m - r0 < block ? m - r0 : block;
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t k = 0; k < in; ++k) {
                const float hk = h[(r0 + i) * in + k];
                hp[i * in_pad + k] = hk;
                h2p[i * in_pad + k] = hk * hk;
            }
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < o; ++j) {
                const float a = g[(r0 + i) * o + j];
                at[j * block + i] = a;
                bt[j * block + i] = a * he[(r0 + i) * o + j];
            }
        for (int64_t j = 0; j < o; ++j) {
            const float* __restrict a = at + j * block;
            const float* __restrict b = bt + j * block;
            float* __restrict sm = sums_m + j * in_pad;
            float* __restrict sv = sums_v + j * in_pad;
            int64_t k0 = 0;
            for (; k0 + kChunks * kWidth <= in_pad; k0 += kChunks * kWidth)
                weight_grad_block<kChunks>(hp, h2p, a, b, rows, in_pad, k0, sm, sv);
            switch ((in_pad - k0) / kWidth) {
                case 3: weight_grad_block<3>(hp, h2p, a, b, rows, in_pad, k0, sm, sv); break;
                case 2: weight_grad_block<2>(hp, h2p, a, b, rows, in_pad, k0, sm, sv); break;
                case 1: weight_grad_block<1>(hp, h2p, a, b, rows, in_pad, k0, sm, sv); break;
                default: break;
            }
            float sa = bias_m[j], sb = bias_v[j];
            for (int64_t i = 0; i < rows; ++i) {
                sa += a[i];
                sb += b[i];
            }
            bias_m[j] = sa;
            bias_v[j] = sb;
        }
    }
    for (int64_t j = 0; j < o; ++j) {
        std::memcpy(gm + j * row, sums_m + j * in_pad, in * sizeof(float));
        std::memcpy(gv + j * row, sums_v + j * in_pad, in * sizeof(float));
        gm[j * row + in] = bias_m[j];
        gv[j * row + in] = bias_v[j];
    }
}

}  // namespace

// Backward: g_out (m, outs[L - 1]) the output's gradient; g_mean and g_var (T,) receive the
// gradients of the flat arrays, g_x (m, p) the input's where it is not null. work holds
// (2 m + 1) W floats, W = max(p, outs): two gradients of a layer's input in turn and one
// row's sum.
extern "C" void svbnn_local_mlp_backward(const float* x, int64_t m, int64_t p,
                                         const float* mean, const float* var, int64_t n_layers,
                                         const int64_t* outs, int32_t relu_on,
                                         const float* const* hs, const float* const* half_eps,
                                         const float* g_out, float* g_mean, float* g_var,
                                         float* g_x, float* work) {
    int64_t total = 0, width = p;
    for (int64_t l = 0; l < n_layers; ++l) {
        total += outs[l] * (in_width(l, p, outs) + 1);
        width = outs[l] > width ? outs[l] : width;
    }
    float* const bufs[2] = {work, work + m * width};
    float* __restrict acc = work + 2 * m * width;
    const float* g = g_out;
    int64_t start = total;
    std::vector<float> pads;
    for (int64_t l = n_layers - 1; l >= 0; --l) {
        const int64_t in = in_width(l, p, outs), o = outs[l], row = in + 1;
        start -= o * row;
        const float* __restrict h = l == 0 ? x : hs[l - 1];
        const float* __restrict he = half_eps[l];
        const float* __restrict wm = mean + start;
        const float* __restrict wv = var + start;
        float* __restrict gm = g_mean + start;
        float* __restrict gv = g_var + start;
        weight_grads(h, g, he, m, in, o, gm, gv, pads);
        // the input's gradient: into the buffer this layer's gradient is not in
        float* gh = l == 0 ? g_x : (g == bufs[0] ? bufs[1] : bufs[0]);
        if (gh == nullptr) break;
        for (int64_t r = 0; r < m; ++r) {
            const float* __restrict hr = h + r * in;
            float* __restrict ghr = gh + r * in;
            for (int64_t k = 0; k < in; ++k) ghr[k] = acc[k] = 0.0f;
            for (int64_t j = 0; j < o; ++j) {
                const float a = g[r * o + j];
                const float b = a * he[r * o + j];
                const float* __restrict wmj = wm + j * row;
                const float* __restrict wvj = wv + j * row;
#pragma omp simd
                for (int64_t k = 0; k < in; ++k) {
                    ghr[k] += a * wmj[k];
                    acc[k] += b * wvj[k];
                }
            }
            for (int64_t k = 0; k < in; ++k) {
                const float v = ghr[k] + 2.0f * acc[k] * hr[k];
                // layer l's input is the activation of layer l - 1 (relu: its gradient is 0
                // where the activation is)
                ghr[k] = (l > 0 && relu_on && !(hr[k] > 0.0f)) ? 0.0f : v;
            }
        }
        g = gh;
    }
}
