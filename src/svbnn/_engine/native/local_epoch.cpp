// One training epoch of the local sampler's network under a Gaussian likelihood of one output
// with a learned noise level, trained by Adam: the steps that svbnn.training's epoch loop runs
// through svbnn._engine.native_step.NativeLocalNegativeElbo and torch.optim.Adam(fused=True),
// operation for operation and in the same order, so that a run is the same bit for bit
// without the Python of every step (svbnn._engine.native_epoch says when it serves an epoch).
//
// A step: the minibatch's rows gathered from X and y; the weights' moments and KL
// (local_moments.cpp); one N(0, 1) draw (m, out) per layer from that layer's generator, as
// torch.randn draws it; the layers forward (local_layers.cpp); the Gaussian negative
// log-likelihood at the learned variance, as svbnn.objectives.gaussian_nll forms it, and its
// gradient in the output; the layers and the moments back; the loss nll + KL / n; then torch's
// own fused Adam kernel on the four parameters. The ATen operations are the ones the Python
// step calls (torch's operators map onto them one to one).
#include "local_epoch.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/log.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "loops.h"

namespace svbnn {

using at::Tensor;

std::vector<Tensor> local_gaussian_epoch(
    const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
    const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& steps, float log_lam,
    float log_1mlam, double log_sigma0, double prec0, const Tensor& X, const Tensor& y,
    const Tensor& order, int64_t batch_size, const std::vector<int64_t>& outs,
    const std::vector<std::optional<at::Generator>>& gens, const std::vector<double>& n_train,
    const std::vector<double>& kl_weight, const std::vector<double>& lr,
    const AdamSettings& adam) {
    const Tensor &mu = params[0], &rho = params[1], &alpha = params[2];
    const Tensor& log_noise_std = params[3];
    const int64_t n = X.size(0), p = X.size(1), T = mu.numel();
    const int64_t n_layers = static_cast<int64_t>(outs.size());
    const int64_t n_batches = (n + batch_size - 1) / batch_size;
    const int64_t width = std::max(p, *std::max_element(outs.begin(), outs.end()));
    const auto opts = X.options();
    // The moments' outputs and factors, and the gradients' buffers: rewritten every step.
    Tensor mean = at::empty_like(mu), var = at::empty_like(mu);
    std::vector<Tensor> factors;
    for (int i = 0; i < 7; ++i) factors.push_back(at::empty_like(mu));
    Tensor g_mean = at::empty_like(mu), g_var = at::empty_like(mu);
    Tensor work = at::empty({(2 * batch_size + 1) * width}, opts);
    Tensor tot_loss = at::zeros({}, opts), tot_nll = at::zeros({}, opts),
           tot_kl = at::zeros({}, opts);
    std::vector<Tensor> grads;
    for (int64_t b = 0; b < n_batches; ++b) {
        const Tensor rows = order.slice(0, b * batch_size, std::min((b + 1) * batch_size, n));
        const int64_t m = rows.numel();
        const Tensor xb = at::index_select(X, 0, rows), yb = at::index_select(y, 0, rows);
        // NativeLocalNegativeElbo.forward
        Tensor kl = at::empty({}, opts);
        *kl.mutable_data_ptr<float>() = svbnn_local_moments_kl(
            mu.const_data_ptr<float>(), rho.const_data_ptr<float>(),
            alpha.const_data_ptr<float>(), T, log_lam, log_1mlam,
            static_cast<float>(log_sigma0), static_cast<float>(prec0),
            mean.mutable_data_ptr<float>(), var.mutable_data_ptr<float>(),
            factors[0].mutable_data_ptr<float>(), factors[1].mutable_data_ptr<float>(),
            factors[2].mutable_data_ptr<float>(), factors[3].mutable_data_ptr<float>(),
            factors[4].mutable_data_ptr<float>(), factors[5].mutable_data_ptr<float>(),
            factors[6].mutable_data_ptr<float>());
        std::vector<Tensor> eps, hs;
        std::vector<float*> eps_ptrs, h_ptrs;
        for (int64_t l = 0; l < n_layers; ++l) {
            eps.push_back(at::randn({m, outs[l]}, gens[l], opts));
            eps_ptrs.push_back(eps.back().mutable_data_ptr<float>());
            hs.push_back(at::empty({m, outs[l]}, opts));  // the last one: the output
            h_ptrs.push_back(hs.back().mutable_data_ptr<float>());
        }
        svbnn_local_mlp_forward(xb.const_data_ptr<float>(), m, p, mean.const_data_ptr<float>(),
                                var.const_data_ptr<float>(), n_layers, outs.data(), 1,
                                eps_ptrs.data(), h_ptrs.data(), h_ptrs.back());
        const Tensor r = at::sub(yb, hs.back().view(yb.sizes()));
        const Tensor learned = at::pow(at::exp(log_noise_std), 2);
        const Tensor mse = at::mul(r, r).mean();
        const Tensor q = at::div(mse, learned);
        // gaussian_nll(mse, learned): 0.5 * (log(2 pi var) + mse / var)
        const Tensor nll = at::mul(
            at::add(at::log(at::mul(learned, 2 * std::numbers::pi)), at::div(mse, learned)), 0.5);
        const Tensor g_out = at::mul(at::div(r, learned), -1.0 / static_cast<double>(m));
        std::vector<const float*> hidden(h_ptrs.begin(), h_ptrs.end() - 1);
        std::vector<const float*> half_eps(eps_ptrs.begin(), eps_ptrs.end());
        svbnn_local_mlp_backward(xb.const_data_ptr<float>(), m, p, mean.const_data_ptr<float>(),
                                 var.const_data_ptr<float>(), n_layers, outs.data(), 1,
                                 hidden.data(), half_eps.data(), g_out.const_data_ptr<float>(),
                                 g_mean.mutable_data_ptr<float>(),
                                 g_var.mutable_data_ptr<float>(), nullptr,
                                 work.mutable_data_ptr<float>());
        // Fresh gradients every step, as the Python step hands its own over to Adam.
        Tensor g_mu = at::empty_like(mu), g_rho = at::empty_like(mu),
               g_alpha = at::empty_like(mu);
        svbnn_local_moments_kl_backward(
            g_mean.const_data_ptr<float>(), g_var.const_data_ptr<float>(),
            static_cast<float>(1.0 / n_train[b]), factors[0].const_data_ptr<float>(),
            factors[1].const_data_ptr<float>(), factors[2].const_data_ptr<float>(),
            factors[3].const_data_ptr<float>(), factors[4].const_data_ptr<float>(),
            factors[5].const_data_ptr<float>(), factors[6].const_data_ptr<float>(),
            g_mu.mutable_data_ptr<float>(), g_rho.mutable_data_ptr<float>(),
            g_alpha.mutable_data_ptr<float>(), T);
        const Tensor one_minus_q = at::rsub(q, 1.0);
        // _GraphFreeStep.finish, then svbnn.training.negative_elbo's KL weight
        const Tensor loss = at::add(nll, kl, 1.0 / n_train[b]);
        Tensor kl_n = at::div(kl, n_train[b]);
        if (kl_weight[b] != 1.0) kl_n = at::div(kl_n, kl_weight[b]);
        // backward_without_graph, then Adam's step (torch.optim.adam._fused_adam)
        grads = {g_mu, g_rho, g_alpha, at::sum(one_minus_q)};
        at::_foreach_add_(steps, 1);
        at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr[b], adam.beta1,
                         adam.beta2, adam.weight_decay, adam.eps, false, false);
        tot_loss = at::add(tot_loss, loss);
        tot_nll = at::add(tot_nll, nll);
        tot_kl = at::add(tot_kl, kl_n);
    }
    std::vector<Tensor> result{tot_loss, tot_nll, tot_kl};
    result.insert(result.end(), grads.begin(), grads.end());
    return result;
}

}  // namespace svbnn
