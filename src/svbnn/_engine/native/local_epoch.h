// The local sampler's training epoch of local_epoch.cpp, as bindings.cpp calls it (see there
// for what it takes and returns). Nothing is checked in it: bindings.cpp checks the tensors.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace svbnn {

struct AdamSettings {
    double beta1, beta2, eps, weight_decay;
};

// params: mu, rho, alpha (T,) and log_noise_std (); adam_state: exp_avgs, exp_avg_sqs and
// steps, four each, in the order of params. Returns the sums over the epoch's steps of the
// loss, the nll and the (weighted) KL / n, then the last step's four gradients.
std::vector<at::Tensor> local_gaussian_epoch(
    const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& exp_avgs,
    const std::vector<at::Tensor>& exp_avg_sqs, const std::vector<at::Tensor>& steps,
    float log_lam, float log_1mlam, double log_sigma0, double prec0, const at::Tensor& X,
    const at::Tensor& y, const at::Tensor& order, int64_t batch_size,
    const std::vector<int64_t>& outs, const std::vector<std::optional<at::Generator>>& gens,
    const std::vector<double>& n_train, const std::vector<double>& kl_weight,
    const std::vector<double>& lr, const AdamSettings& adam);

}  // namespace svbnn
