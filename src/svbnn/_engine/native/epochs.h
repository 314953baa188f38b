// The training epochs of epochs.cpp, as bindings.cpp calls them (see there for what each takes
// and returns). Nothing is checked in them: bindings.cpp checks the tensors.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace svbnn {

// Adam's options and state (torch.optim.Adam's, fused=True): one entry per parameter.
struct Adam {
    const std::vector<at::Tensor>& exp_avgs;
    const std::vector<at::Tensor>& exp_avg_sqs;
    const std::vector<at::Tensor>& steps;
    double beta1, beta2, eps, weight_decay;
};

// What changes from step to step: the KL's divisor n / w, its weight w, the learning rate.
struct Schedule {
    const std::vector<double>& n_train;
    const std::vector<double>& kl_weight;
    const std::vector<double>& lr;
};

// The minibatches: X (n, p), y (n,), the rows in order (int64), batch_size rows a step.
struct Batches {
    const at::Tensor& X;
    const at::Tensor& y;
    const at::Tensor& order;
    int64_t batch_size;
};

// The slab prior and the inclusion prior of the KL.
struct Prior {
    float log_lam, log_1mlam;
    double log_sigma0, prec0;
};

// The local sampler's epoch: params mu, rho, alpha (T,) and log_noise_std (); one generator
// per layer. Returns the sums over the steps of the loss, the nll and the (weighted) KL / n,
// then the last step's four gradients.
std::vector<at::Tensor> local_gaussian_epoch(
    const std::vector<at::Tensor>& params, const Adam& adam, const Prior& prior,
    const Batches& data, const std::vector<int64_t>& outs,
    const std::vector<std::optional<at::Generator>>& gens, const Schedule& schedule);

// The Gumbel sampler's epoch under a categorical likelihood: params mu, rho, alpha (T,), y the
// class indices (int64), hidden layers ReLU (relu) or none, the draw's 1 / tau (2 or 1), one
// generator for the draws' seeds. Returns the sums as above, then the last three gradients.
std::vector<at::Tensor> gumbel_categorical_epoch(
    const std::vector<at::Tensor>& params, const Adam& adam, const Prior& prior, double inv_tau,
    const Batches& data, const std::vector<int64_t>& outs, bool relu,
    const std::optional<at::Generator>& gen, const Schedule& schedule);

}  // namespace svbnn
