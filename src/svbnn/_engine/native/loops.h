// The loops of fused_forward.cpp, local_moments.cpp, local_layers.cpp and
// replicated_layers.cpp, as bindings.cpp calls them (see there for what each one computes).
// Nothing is checked in them: bindings.cpp checks the tensors it passes.
#pragma once

#include <cstdint>

extern "C" {

void svbnn_fused_forward_k2(const float* mu, const float* rho, const float* alpha, int64_t rows,
                            int64_t n, int32_t seed0, int32_t seed1, float log_lam,
                            float log_1mlam, float log_sigma0, float prec0, float* theta,
                            float* a_fac, float* r_fac, float* kl_mu, float* kl_rho,
                            float* kl_alpha, float* kl);
void svbnn_fused_forward_k1(const float* mu, const float* rho, const float* alpha, int64_t rows,
                            int64_t n, int32_t seed0, int32_t seed1, float log_lam,
                            float log_1mlam, float log_sigma0, float prec0, float* theta,
                            float* a_fac, float* r_fac, float* kl_mu, float* kl_rho,
                            float* kl_alpha, float* kl);
void svbnn_fused_backward(const float* g_theta, const float* g_kl, const float* theta,
                          const float* a_fac, const float* r_fac, float* kl_mu, float* kl_rho,
                          float* kl_alpha, int64_t rows, int64_t n);
float svbnn_local_moments_kl(const float* mu, const float* rho, const float* alpha, int64_t n,
                             float log_lam, float log_1mlam, float log_sigma0, float prec0,
                             float* mean, float* var, float* phi, float* q_mu, float* var_rho,
                             float* var_alpha, float* kl_mu, float* kl_rho, float* kl_alpha);
void svbnn_local_moments_kl_backward(const float* g_mean, const float* g_var, float g_kl,
                                     const float* phi, const float* q_mu, const float* var_rho,
                                     const float* var_alpha, const float* kl_mu,
                                     const float* kl_rho, const float* kl_alpha, float* g_mu,
                                     float* g_rho, float* g_alpha, int64_t n);

void svbnn_local_mlp_forward(const float* x, int64_t m, int64_t p, const float* mean,
                             const float* var, int64_t n_layers, const int64_t* outs,
                             int32_t relu_on, float* const* eps, float* const* hs, float* out);
void svbnn_local_mlp_backward(const float* x, int64_t m, int64_t p, const float* mean,
                              const float* var, int64_t n_layers, const int64_t* outs,
                              int32_t relu_on, const float* const* hs, const float* const* half_eps,
                              const float* g_out, float* g_mean, float* g_var, float* g_x,
                              float* work);

void svbnn_gather_rows(const char* src, const int64_t* rows, int64_t n_rows, int64_t row_bytes,
                       char* out);
void svbnn_narrow_mlp_forward(const float* x, int64_t R, int64_t m, int64_t p,
                              const float* theta, int64_t theta_stride, int64_t n_layers,
                              const int64_t* outs, int32_t relu_on, float* const* hs, float* out);
void svbnn_narrow_mlp_backward(const float* x, int64_t R, int64_t m, int64_t p,
                               const float* theta, int64_t theta_stride, int64_t n_layers,
                               const int64_t* outs, int32_t relu_on, const float* const* hs,
                               const float* g_out, float* grad, int64_t grad_stride);
void svbnn_narrow_mlp_gaussian_step(const float* x, int64_t R, int64_t m, int64_t p,
                                    const float* theta, int64_t theta_stride, int64_t n_layers,
                                    const int64_t* outs, int32_t relu_on, float* const* hs,
                                    float* out, const float* y, float v, float g_mean,
                                    float* grad, int64_t grad_stride);
}
