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
#include <bit>
#include <cmath>
#include <cstdint>

#include "loops.h"

namespace {

inline uint32_t hash32(uint32_t x) {  // lowbias32, as _kernel_math._hash32
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

inline float unit23(uint32_t h) {  // _kernel_math._unit, float32
    return (static_cast<float>((h >> 9) & 0x7FFFFFu) + 0.5f) * 1.1920928955078125e-07f;
}

inline float log_reduced(float f, float k) {  // _kernel_math._log_reduced
    float s = f / (2.0f + f);
    float z = s * s;
    float w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

inline float log_(float x) {  // _kernel_math._log
    int32_t bits = std::bit_cast<int32_t>(x) + (0x3F800000 - 0x3F3504F3);
    int32_t k = (bits >> 23) - 0x7F;
    float f = std::bit_cast<float>((bits & 0x007FFFFF) + 0x3F3504F3) - 1.0f;
    return log_reduced(f, static_cast<float>(k));
}

inline float exp_nonpositive(float x) {  // _kernel_math._exp_nonpositive
    x = x < -104.0f ? -104.0f : x;
    float k = std::rint(x * 1.4426950408889634f);
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 0.50000001201f;
    p = p * (r * r) + r + 1.0f;
    int32_t ki = static_cast<int32_t>(k);
    int32_t k1 = ki >> 1;
    float s1 = std::bit_cast<float>((k1 + 0x7F) << 23);
    float s2 = std::bit_cast<float>((ki - k1 + 0x7F) << 23);
    return p * s1 * s2;
}

inline float cos_2pi(float v) {  // _kernel_math._cos_2pi
    float a = std::fabs(v - 0.5f) - 0.25f;
    float a2 = a * a;
    float p = a2 * 3.8199525848482803f - 15.094642576822984f;
    p = p * a2 + 42.058693944897634f;
    p = p * a2 + -76.70585975306136f;
    p = p * a2 + 81.60524927607504f;
    p = p * a2 - 41.341702240399755f;
    p = p * a2 + 6.283185307179586f;
    return a * p;
}

// softplus(x), log sigmoid(x), sigmoid(x), sigmoid(-x): _kernel_math._softplus_parts.
inline void softplus_parts(float x, float& sp, float& log_sig, float& sig, float& sig_neg) {
    float e = exp_nonpositive(-std::fabs(x));
    float r = 1.0f / (1.0f + e);
    bool big = e > 0.41421356f;
    float l1 = log_reduced(big ? 0.5f * (e - 1.0f) : e, big ? 1.0f : 0.0f);
    sp = (x < 0.0f ? 0.0f : x) + l1;
    log_sig = (x > 0.0f ? 0.0f : x) - l1;
    float er = e * r;
    bool positive = x >= 0.0f;
    sig = positive ? r : er;
    sig_neg = positive ? er : r;
}

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
