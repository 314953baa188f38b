// The training epochs of epochs.cpp, as bindings.cpp calls them (see there for what each takes
// and returns). Nothing is checked in them: bindings.cpp checks the tensors.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
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

// The minibatches: X (n, p), y (n,), the rows in order (int64), batch_size rows a step; w the
// rows' weights (n,) of a weighted likelihood (svbnn.objectives.RowWeightedLikelihood), or
// nullptr.
struct Batches {
    const at::Tensor& X;
    const at::Tensor& y;
    const at::Tensor& order;
    int64_t batch_size;
    const at::Tensor* w;
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

// n_epochs epochs in one call. Each draws its order of the n rows from perm_gen, as
// svbnn.training.Minibatches.order does (torch.randperm), then runs epoch(order, its k steps'
// slice of each schedule), which returns epochs.cpp's sums and the last step's gradients.
// Returns the epochs' means of the loss, nll and KL / n (E, 3) (the sums divided by k, as
// svbnn.training._native_epochs divides them), with gates the mean phi of alpha and the
// fraction of its phi in (0.1, 0.9) after each epoch (E, 2), as svbnn.selection.gate_statistics
// computes them from the flat gate parameter (else an empty tensor), then the last step's
// gradients. Stops after an epoch whose mean loss is not finite (E rows up to it).
using EpochFn = std::function<std::vector<at::Tensor>(const at::Tensor& order, const Schedule&)>;
std::vector<at::Tensor> run_epochs(int64_t n_epochs, int64_t n, int64_t k, const at::Tensor& alpha,
                                   bool gates, const std::optional<at::Generator>& perm_gen,
                                   const Schedule& schedule, const EpochFn& epoch);

}  // namespace svbnn
