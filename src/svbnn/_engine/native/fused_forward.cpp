// svbnn's fused draw + KL forward (svbnn._engine.kernels.fused_forward) and its backward
// (fused_backward, into the factors) for float32 on the CPU, as plain loops for the C++
// compiler's auto-vectoriser. svbnn._engine.native builds it with torch.utils.cpp_extension
// (-O3 -march=native -ffp-contract=off) and checks nothing here: bindings.cpp passes
// contiguous float32 arrays of rows x n elements (one network: one row; R replicates: R rows)
// and fresh outputs.
//
// Every operation is the one of the Python code (svbnn._engine.kernels.fused_forward,
// svbnn._engine.fused_math), in the same order and without contracting multiply-adds, so each
// elementwise output is the same float as the inductor kernel's, bit for bit
// (tests/test_native.py); only the KL sum adds in another order.
#include <cmath>
#include <cstdint>

#include "elementwise.h"
#include "loops.h"

namespace {

using namespace svbnn_elementwise;

// One row of n parameters whose first one has the counter index0.
template <int K>
double fused_forward(const float* __restrict mu, const float* __restrict rho,
                     const float* __restrict alpha, int64_t n, int64_t index0, int32_t seed0,
                     int32_t seed1,
                     float log_lam, float log_1mlam, float log_sigma0, float prec0,
                     float* __restrict theta, float* __restrict a_fac, float* __restrict r_fac,
                     float* __restrict kl_mu, float* __restrict kl_rho,
                     float* __restrict kl_alpha) {
    const float k = static_cast<float>(K);
    const float half_prec0 = 0.5f * prec0;
    double total = 0.0;
    for (int64_t start = 0; start < n; start += 4096) {
        const int64_t stop = start + 4096 < n ? start + 4096 : n;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = start; i < stop; i++) {
            // counter noise (_kernel_math.counter_noise, float32)
            uint32_t base =
                hash32(hash32(static_cast<uint32_t>(index0 + i) ^ static_cast<uint32_t>(seed0)) +
                       static_cast<uint32_t>(seed1));
            uint32_t h2 = hash32(base + 0x5BD1E995u);
            float u = unit23(base);
            float v1 = unit23(h2);
            float v2 = (static_cast<float>(((base & 0xFFu) << 8) | (h2 & 0xFFu)) + 0.5f) *
                       1.52587890625e-05f;
            float eps = std::sqrt(-2.0f * log_(v1)) * cos_2pi(v2);

            float sigma, unused, d_sigma, unused2;
            softplus_parts(rho[i], sigma, unused, d_sigma, unused2);
            float sp_alpha, log_phi, phi, one_m_phi;
            softplus_parts(alpha[i], sp_alpha, log_phi, phi, one_m_phi);
            float m = mu[i];
            float slab_w = m + sigma * eps;
            theta[i] = u > one_m_phi ? slab_w : 0.0f;
            bool tiny = rho[i] < -20.0f;
            float sigma_or_1 = tiny ? 1.0f : sigma;
            float log_sigma = tiny ? rho[i] : log_(sigma_or_1);
            float slab = log_sigma0 - log_sigma + (sigma * sigma + m * m) * half_prec0 - 0.5f;
            acc += phi * (log_phi - log_lam) + one_m_phi * (-sp_alpha - log_1mlam) + phi * slab;
            float a = phi * u;
            float b = one_m_phi * (1.0f - u);
            float s1ms;
            if constexpr (K == 2) {
                float ab = (a * b) / (a * a + b * b);
                s1ms = ab * ab;
            } else {
                s1ms = (a * b) / ((a + b) * (a + b));
            }
            a_fac[i] = slab_w * s1ms * k;
            r_fac[i] = eps * d_sigma;
            float phi_v = phi * prec0;
            kl_mu[i] = phi_v * m;
            kl_rho[i] = phi_v * sigma * d_sigma -
                        phi * (tiny ? 1.0f - 0.5f * d_sigma : d_sigma / sigma_or_1);
            kl_alpha[i] = phi * one_m_phi * (alpha[i] - log_lam + log_1mlam + slab);
        }
        total += acc;
    }
    return total;
}

}  // namespace

// rows x n parameters (R replicates' rows, or one network's as one row), counted in flat
// order as _kernel_math.counter_index counts them; each row's KL sum into kl[row].
#define SVBNN_EXPORT(NAME, K)                                                                  \
    extern "C" void NAME(const float* mu, const float* rho, const float* alpha, int64_t rows,  \
                         int64_t n, int32_t seed0, int32_t seed1, float log_lam,               \
                         float log_1mlam, float log_sigma0, float prec0, float* theta,         \
                         float* a_fac, float* r_fac, float* kl_mu, float* kl_rho,              \
                         float* kl_alpha, float* kl) {                                         \
        for (int64_t r = 0; r < rows; r++) {                                                   \
            const int64_t o = r * n;                                                           \
            kl[r] = static_cast<float>(fused_forward<K>(                                       \
                mu + o, rho + o, alpha + o, n, o, seed0, seed1, log_lam, log_1mlam,            \
                log_sigma0, prec0, theta + o, a_fac + o, r_fac + o, kl_mu + o, kl_rho + o,     \
                kl_alpha + o));                                                                \
        }                                                                                      \
    }

SVBNN_EXPORT(svbnn_fused_forward_k2, 2)
SVBNN_EXPORT(svbnn_fused_forward_k1, 1)

// svbnn._engine.kernels.fused_backward with into_factors: the three gradients over kl_mu, kl_rho,
// kl_alpha, as addcmul's multiply and add (each rounded); rows x n parameters, row r's KL
// gradient g_kl[r].
extern "C" void svbnn_fused_backward(const float* __restrict g_theta,
                                     const float* __restrict g_kl,
                                     const float* __restrict theta, const float* __restrict a_fac,
                                     const float* __restrict r_fac, float* __restrict kl_mu,
                                     float* __restrict kl_rho, float* __restrict kl_alpha,
                                     int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        const float gk = g_kl[r];
        const int64_t stop = (r + 1) * n;
#pragma omp simd
        for (int64_t i = r * n; i < stop; i++) {
            float g = g_theta[i];
            float g_gate = theta[i] != 0.0f ? g : 0.0f;
            float g_mu = g_gate + gk * kl_mu[i];
            float g_rho = g_gate * r_fac[i] + gk * kl_rho[i];
            float g_alpha = g * a_fac[i] + gk * kl_alpha[i];
            kl_mu[i] = g_mu;
            kl_rho[i] = g_rho;
            kl_alpha[i] = g_alpha;
        }
    }
}
