// The local sampler's moments + KL pass (svbnn._engine.kernels.local_moments_kl_forward) and
// its backward (local_moments_kl_backward) for one network's float32 parameters on the CPU, as
// plain loops for the compiler's auto-vectoriser, with the draw's elementwise functions
// (elementwise.h). bindings.cpp checks the tensors it passes; nothing is checked here.
#include <cstdint>

#include "elementwise.h"
#include "loops.h"

using namespace svbnn_elementwise;

// svbnn._engine.kernels.local_moments_kl_forward for one network's n parameters, with the
// elementwise functions of elementwise.h (softplus_parts, log_): the weights' means and
// variances, the seven factors of the backward and the KL's sum, which it returns. Close to
// the eager kernel, not equal bit for bit (tests/test_native.py).
extern "C" float svbnn_local_moments_kl(const float* __restrict mu, const float* __restrict rho,
                                        const float* __restrict alpha, int64_t n, float log_lam,
                                        float log_1mlam, float log_sigma0, float prec0,
                                        float* __restrict mean, float* __restrict var,
                                        float* __restrict phi_out, float* __restrict q_mu,
                                        float* __restrict var_rho, float* __restrict var_alpha,
                                        float* __restrict kl_mu, float* __restrict kl_rho,
                                        float* __restrict kl_alpha) {
    const float half_prec0 = 0.5f * prec0;
    double total = 0.0;
    for (int64_t start = 0; start < n; start += 4096) {
        const int64_t stop = start + 4096 < n ? start + 4096 : n;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = start; i < stop; i++) {
            float sigma, unused, d_sigma, unused2;
            softplus_parts(rho[i], sigma, unused, d_sigma, unused2);
            float sp_alpha, log_phi, phi, one_m_phi;
            softplus_parts(alpha[i], sp_alpha, log_phi, phi, one_m_phi);
            float m = mu[i];
            float s2 = sigma * sigma;
            float m2 = m * m;
            mean[i] = phi * m;
            var[i] = phi * (s2 + one_m_phi * m2);
            bool tiny = rho[i] < -20.0f;
            float sigma_or_1 = tiny ? 1.0f : sigma;
            float log_sigma = tiny ? rho[i] : log_(sigma_or_1);
            float slab = log_sigma0 - log_sigma + (s2 + m2) * half_prec0 - 0.5f;
            acc += phi * (log_phi - log_lam) + one_m_phi * (-sp_alpha - log_1mlam) + phi * slab;
            float q = phi * one_m_phi;
            phi_out[i] = phi;
            q_mu[i] = q * m;
            var_rho[i] = 2.0f * phi * sigma * d_sigma;
            var_alpha[i] = q * (s2 + (one_m_phi - phi) * m2);
            float phi_v = phi * prec0;
            kl_mu[i] = phi_v * m;
            kl_rho[i] = phi_v * sigma * d_sigma -
                        phi * (tiny ? 1.0f - 0.5f * d_sigma : d_sigma / sigma_or_1);
            kl_alpha[i] = q * (alpha[i] - log_lam + log_1mlam + slab);
        }
        total += acc;
    }
    return static_cast<float>(total);
}

// svbnn._engine.kernels.local_moments_kl_backward: the gradients in mu, rho and alpha.
extern "C" void svbnn_local_moments_kl_backward(
    const float* __restrict g_mean, const float* __restrict g_var, float g_kl,
    const float* __restrict phi, const float* __restrict q_mu, const float* __restrict var_rho,
    const float* __restrict var_alpha, const float* __restrict kl_mu,
    const float* __restrict kl_rho, const float* __restrict kl_alpha, float* __restrict g_mu,
    float* __restrict g_rho, float* __restrict g_alpha, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gm = g_mean[i], gv = g_var[i];
        g_mu[i] = phi[i] * gm + 2.0f * q_mu[i] * gv + g_kl * kl_mu[i];
        g_rho[i] = var_rho[i] * gv + g_kl * kl_rho[i];
        g_alpha[i] = q_mu[i] * gm + var_alpha[i] * gv + g_kl * kl_alpha[i];
    }
}
