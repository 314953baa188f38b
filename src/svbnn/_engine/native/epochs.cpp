// Training epochs of one small network: the steps that svbnn.training's epoch loop runs
// through a graph-free step of svbnn._engine.native_step and torch.optim.Adam(fused=True),
// operation for operation and in the same order, so that a run is the same bit for bit without
// the Python of every step (svbnn._engine.native_epoch says when an epoch runs here).
//
// A step: the minibatch's rows gathered from X and y; the network's forward and backward
// (NativeLocalNegativeElbo's or NativeNegativeElbo's, below); the loss nll + KL / n; torch's
// own fused Adam kernel on the parameters. The ATen operations are the ones the Python step
// calls (torch's operators map onto them one to one), the loops those of loops.h.
#include "epochs.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_log_softmax_backward_data.h>
#include <ATen/ops/add.h>
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/log.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <tuple>
#include <utility>

#include "loops.h"

namespace svbnn {

using at::Tensor;

namespace {

// The sums over an epoch's steps that the training loop records, accumulated as it does.
struct Sums {
    Tensor loss, nll, kl;
    explicit Sums(const at::TensorOptions& opts)
        : loss(at::zeros({}, opts)), nll(at::zeros({}, opts)), kl(at::zeros({}, opts)) {}
    // _GraphFreeStep.finish's loss and KL / n, then svbnn.training.negative_elbo's weight.
    void add(const Tensor& nll_step, const Tensor& kl_step, double n_train, double w) {
        Tensor kl_n = at::div(kl_step, n_train);
        if (w != 1.0) kl_n = at::div(kl_n, w);
        loss = at::add(loss, at::add(nll_step, kl_step, 1.0 / n_train));
        nll = at::add(nll, nll_step);
        kl = at::add(kl, kl_n);
    }
    std::vector<Tensor> with(const std::vector<Tensor>& grads) const {
        std::vector<Tensor> out{loss, nll, kl};
        out.insert(out.end(), grads.begin(), grads.end());
        return out;
    }
};

// torch.optim.adam._fused_adam's step: the step counts, then the kernel.
void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const Adam& adam, double lr) {
    at::_foreach_add_(adam.steps, 1);
    at::_fused_adam_(params, grads, adam.exp_avgs, adam.exp_avg_sqs, {}, adam.steps, lr,
                     adam.beta1, adam.beta2, adam.weight_decay, adam.eps, false, false);
}

int64_t n_batches(const Batches& data) {
    return (data.X.size(0) + data.batch_size - 1) / data.batch_size;
}

// Step b's minibatch (x, y, w): its rows of the order, gathered from X, y and the weights (an
// undefined w where the rows are not weighted).
std::tuple<Tensor, Tensor, Tensor> minibatch(const Batches& data, int64_t b) {
    const Tensor rows = data.order.slice(0, b * data.batch_size,
                                         std::min((b + 1) * data.batch_size, data.X.size(0)));
    return {at::index_select(data.X, 0, rows), at::index_select(data.y, 0, rows),
            data.w == nullptr ? Tensor() : at::index_select(*data.w, 0, rows)};
}

// svbnn.objectives.gaussian_nll(sq, var) = (log(2 pi var) + sq / var) / 2, its operations.
Tensor gaussian_nll(const Tensor& sq, const Tensor& var) {
    return at::mul(at::add(at::log(at::mul(var, 2 * std::numbers::pi)), at::div(sq, var)), 0.5);
}

}  // namespace

std::vector<Tensor> local_gaussian_epoch(const std::vector<Tensor>& params, const Adam& adam,
                                         const Prior& prior, const Batches& data,
                                         const std::vector<int64_t>& outs,
                                         const std::vector<std::optional<at::Generator>>& gens,
                                         const Schedule& schedule) {
    const Tensor &mu = params[0], &rho = params[1], &alpha = params[2];
    const Tensor& log_noise_std = params[3];
    const int64_t p = data.X.size(1), T = mu.numel();
    const int64_t n_layers = static_cast<int64_t>(outs.size());
    const int64_t width = std::max(p, *std::max_element(outs.begin(), outs.end()));
    const auto opts = data.X.options();
    // The moments' outputs and factors, and the gradients' buffers: rewritten every step.
    Tensor mean = at::empty_like(mu), var = at::empty_like(mu);
    std::vector<Tensor> factors;
    for (int i = 0; i < 7; ++i) factors.push_back(at::empty_like(mu));
    Tensor g_mean = at::empty_like(mu), g_var = at::empty_like(mu);
    Tensor work = at::empty({(2 * data.batch_size + 1) * width}, opts);
    Sums sums(opts);
    std::vector<Tensor> grads;
    for (int64_t b = 0; b < n_batches(data); ++b) {
        const auto [xb, yb, wb] = minibatch(data, b);
        const int64_t m = xb.size(0);
        // NativeLocalNegativeElbo.forward: the moments and KL, the draws, the layers
        Tensor kl = at::empty({}, opts);
        *kl.mutable_data_ptr<float>() = svbnn_local_moments_kl(
            mu.const_data_ptr<float>(), rho.const_data_ptr<float>(),
            alpha.const_data_ptr<float>(), T, prior.log_lam, prior.log_1mlam,
            static_cast<float>(prior.log_sigma0), static_cast<float>(prior.prec0),
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
        // The learned noise level's likelihood, gaussian_nll(mse, var), and the output's
        // gradient -(y - out) / (m var); weighted rows: mean(w gaussian_nll(r^2, var)) and
        // -w (y - out) / (m var), the noise level's gradient mean(w) - q.
        const Tensor r = at::sub(yb, hs.back().view(yb.sizes()));
        const Tensor wr = wb.defined() ? at::mul(wb, r) : r;
        const Tensor learned = at::pow(at::exp(log_noise_std), 2);
        const Tensor mse = at::mul(wr, r).mean();
        const Tensor q = at::div(mse, learned);
        const Tensor nll = wb.defined() ? at::mul(wb, gaussian_nll(at::mul(r, r), learned)).mean()
                                        : gaussian_nll(mse, learned);
        const Tensor g_out = at::mul(at::div(wr, learned), -1.0 / static_cast<double>(m));
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
            static_cast<float>(1.0 / schedule.n_train[b]), factors[0].const_data_ptr<float>(),
            factors[1].const_data_ptr<float>(), factors[2].const_data_ptr<float>(),
            factors[3].const_data_ptr<float>(), factors[4].const_data_ptr<float>(),
            factors[5].const_data_ptr<float>(), factors[6].const_data_ptr<float>(),
            g_mu.mutable_data_ptr<float>(), g_rho.mutable_data_ptr<float>(),
            g_alpha.mutable_data_ptr<float>(), T);
        // backward_without_graph's gradients (the noise level's 1 - q, summed), Adam
        grads = {g_mu, g_rho, g_alpha,
                 at::sum(wb.defined() ? at::sub(wb.mean(), q) : at::rsub(q, 1.0))};
        adam_step(params, grads, adam, schedule.lr[b]);
        sums.add(nll, kl, schedule.n_train[b], schedule.kl_weight[b]);
    }
    return sums.with(grads);
}

std::vector<Tensor> gumbel_categorical_epoch(const std::vector<Tensor>& params, const Adam& adam,
                                             const Prior& prior, double inv_tau,
                                             const Batches& data,
                                             const std::vector<int64_t>& outs, bool relu,
                                             const std::optional<at::Generator>& gen,
                                             const Schedule& schedule) {
    const Tensor &mu = params[0], &rho = params[1], &alpha = params[2];
    const int64_t p = data.X.size(1), T = mu.numel();
    const int64_t n_layers = static_cast<int64_t>(outs.size());
    const auto opts = data.X.options();
    auto* const forward = inv_tau == 2.0 ? svbnn_fused_forward_k2 : svbnn_fused_forward_k1;
    Sums sums(opts);
    std::vector<Tensor> grads;
    for (int64_t b = 0; b < n_batches(data); ++b) {
        const auto [xb, yb, wb] = minibatch(data, b);
        const int64_t m = xb.size(0);
        // FusedEngine's counter seed, then NativeNegativeElbo.forward: the draw and KL
        const Tensor seed = at::randint(-(int64_t{1} << 31), (int64_t{1} << 31) - 1, {2}, gen,
                                        opts.dtype(at::kInt));
        const int32_t* s = seed.const_data_ptr<int32_t>();
        Tensor theta = at::empty_like(mu), a_fac = at::empty_like(mu), r_fac = at::empty_like(mu);
        Tensor g_mu = at::empty_like(mu), g_rho = at::empty_like(mu),
               g_alpha = at::empty_like(mu);  // the KL's factors, then the gradients
        Tensor kl = at::empty({}, opts);
        forward(mu.const_data_ptr<float>(), rho.const_data_ptr<float>(),
                alpha.const_data_ptr<float>(), 1, T, s[0], s[1], prior.log_lam, prior.log_1mlam,
                static_cast<float>(prior.log_sigma0), static_cast<float>(prior.prec0),
                theta.mutable_data_ptr<float>(), a_fac.mutable_data_ptr<float>(),
                r_fac.mutable_data_ptr<float>(), g_mu.mutable_data_ptr<float>(),
                g_rho.mutable_data_ptr<float>(), g_alpha.mutable_data_ptr<float>(),
                kl.mutable_data_ptr<float>());
        // The gradient of the mean over the m rows, as autograd forms it: a float32 -1 / m.
        const double g_mean = at::div(at::full({}, -1.0, opts), m).item<double>();
        // _categorical_step: the layers forward (one replicate, feature-major), the
        // likelihood, its gradient in the output as autograd forms it, the layers back
        std::vector<Tensor> hs;
        std::vector<float*> h_ptrs;
        for (int64_t l = 0; l + 1 < n_layers; ++l) {
            hs.push_back(at::empty({1, outs[l], m}, opts));
            h_ptrs.push_back(hs.back().mutable_data_ptr<float>());
        }
        h_ptrs.push_back(nullptr);
        const Tensor out = at::empty({1, outs.back(), m}, opts);
        svbnn_narrow_mlp_forward(xb.const_data_ptr<float>(), 1, m, p, theta.const_data_ptr<float>(),
                                 T, n_layers, outs.data(), relu ? 1 : 0, h_ptrs.data(),
                                 out.mutable_data_ptr<float>());
        const Tensor log_p = at::log_softmax(out.transpose(1, 2), -1);  // (1, m, C)
        const Tensor target = yb.view({1, m}).unsqueeze(-1);
        const int64_t last[] = {-1};  // (an IntArrayRef: a braced {-1} could be a dtype)
        const Tensor log_lik = at::gather(log_p, -1, target).squeeze(-1);
        Tensor nll, g;
        if (wb.defined()) {  // each row's term and its gradient times the row's weight
            const Tensor w = wb.view({1, m});
            nll = at::mul(w, log_lik).mean(last).neg();
            g = at::zeros_like(log_p).scatter_(-1, target, at::mul(w, g_mean).unsqueeze(-1));
        } else {
            nll = log_lik.mean(last).neg();
            g = at::zeros_like(log_p).scatter_(-1, target, g_mean);
        }
        g = at::_log_softmax_backward_data(g, log_p, -1, log_p.scalar_type());
        const Tensor g_out = g.transpose(1, 2).contiguous();
        Tensor grad = at::empty({1, T}, opts);
        std::vector<const float*> hidden(h_ptrs.begin(), h_ptrs.end());
        svbnn_narrow_mlp_backward(xb.const_data_ptr<float>(), 1, m, p,
                                  theta.const_data_ptr<float>(), T, n_layers, outs.data(),
                                  relu ? 1 : 0, hidden.data(), g_out.const_data_ptr<float>(),
                                  grad.mutable_data_ptr<float>(), T);
        // The draw's backward with the KL's gradient 1 / n, into the factors
        const Tensor g_kl = at::mul(at::ones({1}, opts), 1.0 / schedule.n_train[b]);
        svbnn_fused_backward(grad.const_data_ptr<float>(), g_kl.const_data_ptr<float>(),
                             theta.const_data_ptr<float>(), a_fac.const_data_ptr<float>(),
                             r_fac.const_data_ptr<float>(), g_mu.mutable_data_ptr<float>(),
                             g_rho.mutable_data_ptr<float>(), g_alpha.mutable_data_ptr<float>(),
                             1, T);
        grads = {g_mu, g_rho, g_alpha};
        adam_step(params, grads, adam, schedule.lr[b]);
        sums.add(nll.view(kl.sizes()), kl, schedule.n_train[b], schedule.kl_weight[b]);
    }
    return sums.with(grads);
}

std::vector<Tensor> run_epochs(int64_t n_epochs, int64_t n, int64_t k, const Tensor& alpha,
                               bool gates, const std::optional<at::Generator>& perm_gen,
                               const Schedule& schedule, const EpochFn& epoch) {
    std::vector<Tensor> means, stats, grads;
    const int64_t T = alpha.size(-1);
    for (int64_t e = 0; e < n_epochs; ++e) {
        const Tensor order = at::randperm(n, perm_gen, at::TensorOptions().dtype(at::kLong));
        const auto part = [&](const std::vector<double>& v) {
            return std::vector<double>(v.begin() + e * k, v.begin() + (e + 1) * k);
        };
        const std::vector<double> n_train = part(schedule.n_train),
                                  kl_weight = part(schedule.kl_weight), lr = part(schedule.lr);
        std::vector<Tensor> out = epoch(order, {n_train, kl_weight, lr});
        // svbnn.training._native_epochs: each sum over the k steps, divided by k
        const Tensor loss = at::div(out[0], k);
        means.push_back(at::stack({loss, at::div(out[1], k), at::div(out[2], k)}));
        if (gates) {
            // svbnn.selection._gate_sums over the flat gates, then gate_statistics' means
            const Tensor phi = at::sigmoid(alpha);
            const int64_t last[] = {-1};
            const Tensor total = at::sum(phi, last);
            const Tensor opened =
                at::bitwise_and(at::gt(phi, 0.1), at::lt(phi, 0.9)).to(phi.scalar_type());
            stats.push_back(at::stack({at::div(total, T), at::div(at::sum(opened, last), T)}));
        }
        grads.assign(out.begin() + 3, out.end());
        if (!std::isfinite(loss.item<double>())) break;
    }
    std::vector<Tensor> result{at::stack(means),
                               gates ? at::stack(stats) : at::empty({0, 2}, alpha.options())};
    result.insert(result.end(), grads.begin(), grads.end());
    return result;
}

}  // namespace svbnn
