// The Python module of svbnn's native loops: pybind11 functions on at::Tensor that check
// what they are handed, allocate the outputs and call the loops of fused_forward.cpp,
// local_moments.cpp, local_layers.cpp and replicated_layers.cpp (loops.h), and the training
// epochs of epochs.cpp (epochs.h).
// torch.utils.cpp_extension builds the files into one extension module
// (svbnn._engine.native); the Python functions there say when each one serves a call. Every
// function releases the GIL while its loops run, as a ctypes call did.
//
// Only the headers this file needs (not <torch/extension.h>, three times slower to compile).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "epochs.h"
#include "loops.h"

namespace {

namespace py = pybind11;
using at::Tensor;

// A contiguous float32 CPU tensor, or an error naming it.
void check_floats(const Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(), name,
                ": a contiguous float32 CPU tensor is needed");
}

// One network's flat parameters (T,) as one row, or R replicates' (R, T).
std::pair<int64_t, int64_t> rows_of(const Tensor& t) {
    return t.dim() == 2 ? std::pair{t.size(0), t.size(1)} : std::pair{int64_t{1}, t.numel()};
}

void check_like(const Tensor& t, const Tensor& like, const char* name) {
    check_floats(t, name);
    TORCH_CHECK(t.sizes() == like.sizes(), name, ": shaped ", like.sizes(), " expected, got ",
                t.sizes());
}

// A scalar as the float the loops take (as ctypes' c_float(float(t)) rounds it).
float as_float(const Tensor& t) {
    TORCH_CHECK(t.numel() == 1, "a one-element tensor is needed, got ", t.sizes());
    if (t.device().is_cpu() && t.scalar_type() == at::kFloat) return *t.const_data_ptr<float>();
    return static_cast<float>(t.item<double>());
}

using Seven = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

// svbnn._engine.kernels.fused_forward: theta, the KL per row, and the five factors.
Seven fused_forward(const Tensor& mu, const Tensor& rho, const Tensor& alpha, const Tensor& seed,
                    const Tensor& log_lam, const Tensor& log_1mlam, double log_sigma0,
                    double prec0, double inv_tau) {
    check_floats(mu, "mu");
    TORCH_CHECK(mu.dim() == 1 || mu.dim() == 2, "mu: (T,) or (R, T) expected, got ", mu.sizes());
    check_like(rho, mu, "rho");
    check_like(alpha, mu, "alpha");
    TORCH_CHECK(seed.device().is_cpu() && seed.scalar_type() == at::kInt && seed.numel() == 2,
                "seed: two int32 words on the CPU are needed");
    TORCH_CHECK(inv_tau == 2.0 || inv_tau == 1.0, "inv_tau: 1 or 2 expected, got ", inv_tau);
    const Tensor words = seed.contiguous();
    const int32_t* s = words.const_data_ptr<int32_t>();
    const float lam = as_float(log_lam), lam1 = as_float(log_1mlam);
    const auto [rows, n] = rows_of(mu);
    Tensor theta = at::empty_like(mu), a_fac = at::empty_like(mu), r_fac = at::empty_like(mu);
    Tensor kl_mu = at::empty_like(mu), kl_rho = at::empty_like(mu), kl_alpha = at::empty_like(mu);
    Tensor kl = at::empty(mu.sizes().slice(0, mu.dim() - 1), mu.options());
    {
        py::gil_scoped_release unlocked;
        (inv_tau == 2.0 ? svbnn_fused_forward_k2 : svbnn_fused_forward_k1)(
            mu.const_data_ptr<float>(), rho.const_data_ptr<float>(),
            alpha.const_data_ptr<float>(), rows, n, s[0], s[1], lam, lam1,
            static_cast<float>(log_sigma0), static_cast<float>(prec0),
            theta.mutable_data_ptr<float>(), a_fac.mutable_data_ptr<float>(),
            r_fac.mutable_data_ptr<float>(), kl_mu.mutable_data_ptr<float>(),
            kl_rho.mutable_data_ptr<float>(), kl_alpha.mutable_data_ptr<float>(),
            kl.mutable_data_ptr<float>());
    }
    return {theta, kl, a_fac, r_fac, kl_mu, kl_rho, kl_alpha};
}

// svbnn._engine.kernels.fused_backward into the factors kl_mu, kl_rho, kl_alpha.
void fused_backward(const Tensor& g_theta, const Tensor& g_kl, const Tensor& theta,
                    const Tensor& a_fac, const Tensor& r_fac, const Tensor& kl_mu,
                    const Tensor& kl_rho, const Tensor& kl_alpha) {
    check_floats(theta, "theta");
    TORCH_CHECK(theta.dim() == 1 || theta.dim() == 2, "theta: (T,) or (R, T) expected");
    check_like(g_theta, theta, "g_theta");
    check_like(a_fac, theta, "a_fac");
    check_like(r_fac, theta, "r_fac");
    check_like(kl_mu, theta, "kl_mu");
    check_like(kl_rho, theta, "kl_rho");
    check_like(kl_alpha, theta, "kl_alpha");
    const auto [rows, n] = rows_of(theta);
    // autograd may hand over an expanded (stride 0) gradient
    const Tensor g = g_kl.contiguous();
    check_floats(g, "g_kl");
    TORCH_CHECK(g.numel() == rows, "g_kl: one value per row expected, got ", g.sizes());
    py::gil_scoped_release unlocked;
    svbnn_fused_backward(g_theta.const_data_ptr<float>(), g.const_data_ptr<float>(),
                         theta.const_data_ptr<float>(), a_fac.const_data_ptr<float>(),
                         r_fac.const_data_ptr<float>(), kl_mu.mutable_data_ptr<float>(),
                         kl_rho.mutable_data_ptr<float>(), kl_alpha.mutable_data_ptr<float>(),
                         rows, n);
}

// svbnn._engine.kernels.local_moments_kl_forward of one network's flat parameters (T,):
// mean, var, the KL's sum (a 0-dim tensor) and the seven factors of the backward.
std::vector<Tensor> local_moments_kl(const Tensor& mu, const Tensor& rho, const Tensor& alpha,
                                     const Tensor& log_lam, const Tensor& log_1mlam,
                                     double log_sigma0, double prec0) {
    check_floats(mu, "mu");
    TORCH_CHECK(mu.dim() == 1, "mu: (T,) expected, got ", mu.sizes());
    check_like(rho, mu, "rho");
    check_like(alpha, mu, "alpha");
    const float lam = as_float(log_lam), lam1 = as_float(log_1mlam);
    std::vector<Tensor> out;
    out.reserve(10);
    for (int i = 0; i < 10; ++i) out.push_back(i == 2 ? at::empty({}, mu.options()) : at::empty_like(mu));
    float kl;
    {
        py::gil_scoped_release unlocked;
        kl = svbnn_local_moments_kl(
            mu.const_data_ptr<float>(), rho.const_data_ptr<float>(), alpha.const_data_ptr<float>(),
            mu.numel(), lam, lam1, static_cast<float>(log_sigma0), static_cast<float>(prec0),
            out[0].mutable_data_ptr<float>(), out[1].mutable_data_ptr<float>(),
            out[3].mutable_data_ptr<float>(), out[4].mutable_data_ptr<float>(),
            out[5].mutable_data_ptr<float>(), out[6].mutable_data_ptr<float>(),
            out[7].mutable_data_ptr<float>(), out[8].mutable_data_ptr<float>(),
            out[9].mutable_data_ptr<float>());
    }
    *out[2].mutable_data_ptr<float>() = kl;
    return out;
}

// svbnn._engine.kernels.local_moments_kl_backward: (g_mu, g_rho, g_alpha).
std::tuple<Tensor, Tensor, Tensor> local_moments_kl_backward(
    const Tensor& g_mean, const Tensor& g_var, const Tensor& g_kl, const Tensor& phi,
    const Tensor& q_mu, const Tensor& var_rho, const Tensor& var_alpha, const Tensor& kl_mu,
    const Tensor& kl_rho, const Tensor& kl_alpha) {
    check_floats(phi, "phi");
    TORCH_CHECK(phi.dim() == 1, "phi: (T,) expected, got ", phi.sizes());
    for (const auto& [t, name] : {std::pair{&q_mu, "q_mu"}, {&var_rho, "var_rho"},
                                  {&var_alpha, "var_alpha"}, {&kl_mu, "kl_mu"},
                                  {&kl_rho, "kl_rho"}, {&kl_alpha, "kl_alpha"}})
        check_like(*t, phi, name);
    // autograd may hand over expanded (stride 0) gradients
    const Tensor gm = g_mean.contiguous(), gv = g_var.contiguous();
    check_like(gm, phi, "g_mean");
    check_like(gv, phi, "g_var");
    const float gk = as_float(g_kl);
    Tensor g_mu = at::empty_like(phi), g_rho = at::empty_like(phi), g_alpha = at::empty_like(phi);
    {
        py::gil_scoped_release unlocked;
        svbnn_local_moments_kl_backward(
            gm.const_data_ptr<float>(), gv.const_data_ptr<float>(), gk,
            phi.const_data_ptr<float>(), q_mu.const_data_ptr<float>(),
            var_rho.const_data_ptr<float>(), var_alpha.const_data_ptr<float>(),
            kl_mu.const_data_ptr<float>(), kl_rho.const_data_ptr<float>(),
            kl_alpha.const_data_ptr<float>(), g_mu.mutable_data_ptr<float>(),
            g_rho.mutable_data_ptr<float>(), g_alpha.mutable_data_ptr<float>(), phi.numel());
    }
    return {g_mu, g_rho, g_alpha};
}

// The widths of a fully connected network whose flat arrays (T,) are mean, var and whose
// input is x (m, p), or an error; each layer holds out * (in + 1) numbers.
void check_local_mlp(const Tensor& mean, const Tensor& var, const Tensor& x,
                     const std::vector<int64_t>& outs) {
    check_floats(mean, "mean");
    TORCH_CHECK(mean.dim() == 1, "mean: (T,) expected, got ", mean.sizes());
    check_like(var, mean, "var");
    check_floats(x, "x");
    TORCH_CHECK(x.dim() == 2, "x: (m, p) expected, got ", x.sizes());
    TORCH_CHECK(!outs.empty(), "outs: at least one layer expected");
    int64_t in = x.size(1), total = 0;
    for (const int64_t o : outs) {
        TORCH_CHECK(o > 0, "outs: positive widths expected");
        total += o * (in + 1);
        in = o;
    }
    TORCH_CHECK(total == mean.numel(), "mean: ", total, " numbers for these widths expected, got ",
                mean.numel());
}

// svbnn._engine.fused.LocalFlatMLP's forward: eps (one (m, out) draw per layer) becomes the
// backward's factor eps / (2 s) in place; returns the output (m, outs[-1]) and the hidden
// activations (m, outs[l]) of every layer but the last.
std::vector<Tensor> local_mlp_forward(const Tensor& mean, const Tensor& var, const Tensor& x,
                                      const std::vector<int64_t>& outs, bool relu,
                                      const std::vector<Tensor>& eps) {
    check_local_mlp(mean, var, x, outs);
    const int64_t m = x.size(0), n_layers = static_cast<int64_t>(outs.size());
    TORCH_CHECK(static_cast<int64_t>(eps.size()) == n_layers, "eps: one draw per layer expected");
    std::vector<float*> eps_ptrs, h_ptrs;
    std::vector<Tensor> result;
    for (int64_t l = 0; l < n_layers; ++l) {
        check_floats(eps[l], "eps");
        TORCH_CHECK(eps[l].dim() == 2 && eps[l].size(0) == m && eps[l].size(1) == outs[l],
                    "eps: (m, out) per layer expected, got ", eps[l].sizes());
        eps_ptrs.push_back(eps[l].mutable_data_ptr<float>());
        result.push_back(at::empty({m, outs[l]}, x.options()));
    }
    // result: the hidden activations, then the output in the last place; returned output first
    for (int64_t l = 0; l + 1 < n_layers; ++l) h_ptrs.push_back(result[l].mutable_data_ptr<float>());
    {
        py::gil_scoped_release unlocked;
        svbnn_local_mlp_forward(x.const_data_ptr<float>(), m, x.size(1),
                                mean.const_data_ptr<float>(), var.const_data_ptr<float>(),
                                n_layers, outs.data(), relu ? 1 : 0, eps_ptrs.data(),
                                h_ptrs.data(), result.back().mutable_data_ptr<float>());
    }
    std::rotate(result.rbegin(), result.rbegin() + 1, result.rend());
    return result;
}

// svbnn._engine.fused.LocalFlatMLP's backward: (g_mean, g_var), and g_x (m, p) with
// input_grad; hs and half_eps as local_mlp_forward left them.
std::vector<Tensor> local_mlp_backward(const Tensor& mean, const Tensor& var, const Tensor& x,
                                       const std::vector<int64_t>& outs, bool relu,
                                       const std::vector<Tensor>& hs,
                                       const std::vector<Tensor>& half_eps, const Tensor& g_out,
                                       bool input_grad) {
    check_local_mlp(mean, var, x, outs);
    const int64_t m = x.size(0), p = x.size(1), n_layers = static_cast<int64_t>(outs.size());
    TORCH_CHECK(static_cast<int64_t>(hs.size()) == n_layers - 1 &&
                    static_cast<int64_t>(half_eps.size()) == n_layers,
                "hs, half_eps: as local_mlp_forward returned them expected");
    std::vector<const float*> h_ptrs, e_ptrs;
    for (int64_t l = 0; l < n_layers; ++l) {
        check_floats(half_eps[l], "half_eps");
        TORCH_CHECK(half_eps[l].numel() == m * outs[l], "half_eps: (m, out) per layer expected");
        e_ptrs.push_back(half_eps[l].const_data_ptr<float>());
        if (l + 1 < n_layers) {
            check_floats(hs[l], "hs");
            TORCH_CHECK(hs[l].numel() == m * outs[l], "hs: (m, out) per hidden layer expected");
            h_ptrs.push_back(hs[l].const_data_ptr<float>());
        }
    }
    // autograd may hand over an expanded (stride 0) gradient
    const Tensor g = g_out.contiguous();
    check_floats(g, "g_out");
    TORCH_CHECK(g.numel() == m * outs.back(), "g_out: (m, outs[-1]) expected, got ", g.sizes());
    const int64_t width = std::max(p, *std::max_element(outs.begin(), outs.end()));
    Tensor g_mean = at::empty_like(mean), g_var = at::empty_like(var);
    Tensor g_x = input_grad ? at::empty_like(x) : Tensor();
    Tensor work = at::empty({(2 * m + 1) * width}, x.options());
    {
        py::gil_scoped_release unlocked;
        svbnn_local_mlp_backward(x.const_data_ptr<float>(), m, p, mean.const_data_ptr<float>(),
                                 var.const_data_ptr<float>(), n_layers, outs.data(),
                                 relu ? 1 : 0, h_ptrs.data(), e_ptrs.data(),
                                 g.const_data_ptr<float>(), g_mean.mutable_data_ptr<float>(),
                                 g_var.mutable_data_ptr<float>(),
                                 input_grad ? g_x.mutable_data_ptr<float>() : nullptr,
                                 work.mutable_data_ptr<float>());
    }
    std::vector<Tensor> out{g_mean, g_var};
    if (input_grad) out.push_back(g_x);
    return out;
}

// out[i] = src[rows[i]], any dtype (bytes).
void gather_rows(const Tensor& src, const Tensor& rows, const Tensor& out) {
    TORCH_CHECK(src.device().is_cpu() && src.is_contiguous() && src.dim() >= 1,
                "src: a contiguous CPU tensor is needed");
    TORCH_CHECK(rows.device().is_cpu() && rows.is_contiguous() && rows.dim() == 1 &&
                    rows.scalar_type() == at::kLong,
                "rows: a contiguous int64 CPU vector is needed");
    TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() &&
                    out.scalar_type() == src.scalar_type() && out.dim() == src.dim() &&
                    out.size(0) == rows.numel() && out.sizes().slice(1) == src.sizes().slice(1),
                "out: a contiguous CPU tensor of src's dtype, one row per index, is needed");
    const int64_t n_src = src.size(0), n_rows = rows.numel();
    const int64_t* index = rows.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < n_rows; ++i)
        TORCH_CHECK(0 <= index[i] && index[i] < n_src, "rows: index ", index[i],
                    " out of range for ", n_src, " rows");
    const int64_t row_bytes =
        static_cast<int64_t>(src.element_size()) * (src.numel() / std::max<int64_t>(n_src, 1));
    py::gil_scoped_release unlocked;
    svbnn_gather_rows(static_cast<const char*>(src.const_data_ptr()), index, n_rows, row_bytes,
                      static_cast<char*>(out.mutable_data_ptr()));
}

// The checks the three narrow-network functions share: x (R, m, p), theta (R, >= the
// layers' parameters), chained layers of outs[i] outputs.
void check_network(const Tensor& x, const Tensor& theta, const std::vector<int64_t>& outs) {
    check_floats(x, "x");
    check_floats(theta, "theta");
    TORCH_CHECK(x.dim() == 3 && theta.dim() == 2 && theta.size(0) == x.size(0),
                "x (R, m, p) and theta (R, T) expected, got ", x.sizes(), " and ", theta.sizes());
    TORCH_CHECK(!outs.empty(), "outs: at least one layer is needed");
    int64_t in = x.size(2), total = 0;
    for (int64_t o : outs) {
        TORCH_CHECK(o > 0, "outs: positive widths are needed");
        total += o * (in + 1);
        in = o;
    }
    TORCH_CHECK(theta.size(1) >= total, "theta: at least ", total, " parameters a row needed");
}

std::vector<Tensor> hidden(const Tensor& x, const std::vector<int64_t>& outs) {
    std::vector<Tensor> hs;
    hs.reserve(outs.size() - 1);
    for (size_t i = 0; i + 1 < outs.size(); ++i)
        hs.push_back(at::empty({x.size(0), outs[i], x.size(1)}, x.options()));
    return hs;
}

std::vector<float*> pointers(const std::vector<Tensor>& hs) {
    std::vector<float*> ptrs;
    ptrs.reserve(hs.size() + 1);
    for (const Tensor& h : hs) ptrs.push_back(h.mutable_data_ptr<float>());
    ptrs.push_back(nullptr);  // never empty
    return ptrs;
}

// The hidden activations (R, outs[i], m) and the output (R, outs[-1], m), feature-major.
std::pair<std::vector<Tensor>, Tensor> narrow_mlp_forward(const Tensor& theta, const Tensor& x,
                                                          const std::vector<int64_t>& outs,
                                                          bool relu_on) {
    check_network(x, theta, outs);
    std::vector<Tensor> hs = hidden(x, outs);
    Tensor out = at::empty({x.size(0), outs.back(), x.size(1)}, x.options());
    const std::vector<float*> ptrs = pointers(hs);
    {
        py::gil_scoped_release unlocked;
        svbnn_narrow_mlp_forward(x.const_data_ptr<float>(), x.size(0), x.size(1), x.size(2),
                                 theta.const_data_ptr<float>(), theta.stride(0),
                                 static_cast<int64_t>(outs.size()), outs.data(), relu_on,
                                 ptrs.data(), out.mutable_data_ptr<float>());
    }
    return {std::move(hs), out};
}

// The weight and bias gradient into grad (R, >= T) from the output's gradient g (R, outs[-1],
// m) and the hidden activations hs that narrow_mlp_forward returned.
void narrow_mlp_backward(const Tensor& theta, const Tensor& x, const std::vector<Tensor>& hs,
                         const Tensor& g, const std::vector<int64_t>& outs, bool relu_on,
                         const Tensor& grad) {
    check_network(x, theta, outs);
    TORCH_CHECK(hs.size() + 1 == outs.size(), "hs: one tensor per hidden layer is needed");
    std::vector<Tensor> hidden_in;
    hidden_in.reserve(hs.size());
    for (size_t i = 0; i < hs.size(); ++i) {
        hidden_in.push_back(hs[i].contiguous());
        check_floats(hidden_in.back(), "hs");
        TORCH_CHECK(hidden_in.back().sizes() == at::IntArrayRef({x.size(0), outs[i], x.size(1)}),
                    "hs: (R, width, m) expected");
    }
    const Tensor g_out = g.contiguous();
    check_floats(g_out, "g");
    TORCH_CHECK(g_out.sizes() == at::IntArrayRef({x.size(0), outs.back(), x.size(1)}),
                "g: (R, out, m) expected, got ", g_out.sizes());
    check_floats(grad, "grad");
    TORCH_CHECK(grad.dim() == 2 && grad.size(0) == x.size(0) && grad.size(1) >= theta.size(1),
                "grad: laid out as theta expected");
    std::vector<const float*> ptrs;
    ptrs.reserve(hidden_in.size() + 1);
    for (const Tensor& h : hidden_in) ptrs.push_back(h.const_data_ptr<float>());
    ptrs.push_back(nullptr);
    py::gil_scoped_release unlocked;
    svbnn_narrow_mlp_backward(x.const_data_ptr<float>(), x.size(0), x.size(1), x.size(2),
                              theta.const_data_ptr<float>(), theta.stride(0),
                              static_cast<int64_t>(outs.size()), outs.data(), relu_on,
                              ptrs.data(), g_out.const_data_ptr<float>(),
                              grad.mutable_data_ptr<float>(), grad.stride(0));
}

// Both, for a network of one output under a Gaussian likelihood; returns the output
// (R, 1, m), the weight gradient into grad.
Tensor narrow_mlp_gaussian_step(const Tensor& theta, const Tensor& x, const Tensor& y,
                                const std::vector<int64_t>& outs, bool relu_on, double v,
                                double g_mean, const Tensor& grad) {
    check_network(x, theta, outs);
    TORCH_CHECK(outs.back() == 1, "outs: a network of one output is needed");
    check_floats(y, "y");
    TORCH_CHECK(y.numel() == x.size(0) * x.size(1), "y: (R, m) expected, got ", y.sizes());
    check_floats(grad, "grad");
    TORCH_CHECK(grad.dim() == 2 && grad.size(0) == x.size(0) && grad.size(1) >= theta.size(1),
                "grad: laid out as theta expected");
    std::vector<Tensor> hs = hidden(x, outs);
    Tensor out = at::empty({x.size(0), 1, x.size(1)}, x.options());
    const std::vector<float*> ptrs = pointers(hs);
    {
        py::gil_scoped_release unlocked;
        svbnn_narrow_mlp_gaussian_step(
            x.const_data_ptr<float>(), x.size(0), x.size(1), x.size(2),
            theta.const_data_ptr<float>(), theta.stride(0), static_cast<int64_t>(outs.size()),
            outs.data(), relu_on, ptrs.data(), out.mutable_data_ptr<float>(),
            y.const_data_ptr<float>(), static_cast<float>(v), static_cast<float>(g_mean),
            grad.mutable_data_ptr<float>(), grad.stride(0));
    }
    return out;
}

// The checks both kinds of epoch share: params (T,) alike and Adam's state of each, X (n, p)
// float32, layers of outs[i] outputs chained from p whose parameters are T, and one value per
// step of the n_epochs epochs in each schedule. Returns the number of steps of an epoch.
int64_t check_epochs(const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
                     const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& steps,
                     const Tensor& X, int64_t batch_size, const std::vector<int64_t>& outs,
                     int64_t n_epochs, const std::vector<double>& n_train,
                     const std::vector<double>& kl_weight, const std::vector<double>& lr) {
    const size_t k = params.size();
    TORCH_CHECK(k >= 3 && exp_avgs.size() == k && exp_avg_sqs.size() == k && steps.size() == k,
                "params, exp_avgs, exp_avg_sqs, steps: one each per parameter expected");
    const Tensor& mu = params[0];
    check_floats(mu, "mu");
    TORCH_CHECK(mu.dim() == 1, "mu: (T,) expected, got ", mu.sizes());
    for (size_t i = 0; i < k; ++i) {
        check_like(params[i], i < 3 ? mu : params[i], "params");  // mu, rho, alpha alike
        check_like(exp_avgs[i], params[i], "exp_avgs");
        check_like(exp_avg_sqs[i], params[i], "exp_avg_sqs");
        TORCH_CHECK(steps[i].device().is_cpu() && steps[i].numel() == 1,
                    "steps: one CPU scalar per parameter expected");
    }
    check_floats(X, "X");
    TORCH_CHECK(X.dim() == 2 && X.size(0) > 0, "X: (n, p) expected, got ", X.sizes());
    TORCH_CHECK(batch_size > 0, "batch_size: positive expected");
    TORCH_CHECK(n_epochs > 0, "n_epochs: positive expected");
    TORCH_CHECK(!outs.empty(), "outs: at least one layer expected");
    int64_t in = X.size(1), total = 0;
    for (const int64_t o : outs) {
        TORCH_CHECK(o > 0, "outs: positive widths expected");
        total += o * (in + 1);
        in = o;
    }
    TORCH_CHECK(total == mu.numel(), "mu: ", total, " numbers for these widths expected");
    const int64_t n_steps = (X.size(0) + batch_size - 1) / batch_size;
    const auto all = static_cast<size_t>(n_steps * n_epochs);
    TORCH_CHECK(n_train.size() == all && kl_weight.size() == all && lr.size() == all,
                "n_train, kl_weight, lr: one per step of the n_epochs epochs expected");
    return n_steps;
}

// The rows' weights of a weighted likelihood, or none: (n,) float32 on the CPU, contiguous.
void check_row_weights(const std::optional<Tensor>& w, const Tensor& X) {
    if (!w.has_value()) return;
    check_floats(*w, "w");
    TORCH_CHECK(w->dim() == 1 && w->size(0) == X.size(0) && w->is_contiguous(),
                "w: the n rows' weights (n,), contiguous, expected, got ", w->sizes());
}

const Tensor* weights(const std::optional<Tensor>& w) { return w.has_value() ? &*w : nullptr; }

// svbnn._engine.native_epoch's epochs of the local sampler's network (epochs.cpp): params mu,
// rho, alpha (T,) and log_noise_std (), Adam's state of each, X (n, p) and y (n,) float32,
// row_w the rows' weights (n,) of a weighted likelihood or None, the generator of each
// epoch's order of the rows (the minibatches'), one generator per layer (None: torch's
// default), and per step of the n_epochs epochs the KL's divisor n / w, its weight w and the
// learning rate; gates: also the gate statistics after each epoch. Returns svbnn::run_epochs'
// means (E, 3) and statistics (E, 2), then the last step's gradients.
std::vector<Tensor> local_gaussian_epochs(
    const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
    const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& steps,
    const Tensor& log_lam, const Tensor& log_1mlam, double log_sigma0, double prec0,
    const Tensor& X, const Tensor& y, const std::optional<Tensor>& row_w,
    const std::optional<at::Generator>& perm_gen, int64_t n_epochs, bool gates,
    int64_t batch_size, const std::vector<int64_t>& outs,
    const std::vector<std::optional<at::Generator>>& gens, const std::vector<double>& n_train,
    const std::vector<double>& kl_weight, const std::vector<double>& lr, double beta1,
    double beta2, double eps, double weight_decay) {
    const int64_t k = check_epochs(params, exp_avgs, exp_avg_sqs, steps, X, batch_size, outs,
                                   n_epochs, n_train, kl_weight, lr);
    TORCH_CHECK(params.size() == 4 && params[3].numel() == 1,
                "params: mu, rho, alpha and one log_noise_std expected");
    check_floats(y, "y");
    TORCH_CHECK(y.dim() == 1 && y.size(0) == X.size(0), "y: (n,) expected, got ", y.sizes());
    check_row_weights(row_w, X);
    TORCH_CHECK(outs.back() == 1 && gens.size() == outs.size(),
                "outs, gens: one per layer, the last of one output, expected");
    const svbnn::Prior prior{as_float(log_lam), as_float(log_1mlam), log_sigma0, prec0};
    const svbnn::Adam adam{exp_avgs, exp_avg_sqs, steps, beta1, beta2, eps, weight_decay};
    py::gil_scoped_release unlocked;
    return svbnn::run_epochs(
        n_epochs, X.size(0), k, params[2], gates, perm_gen, {n_train, kl_weight, lr},
        [&](const Tensor& order, const svbnn::Schedule& schedule) {
            return svbnn::local_gaussian_epoch(params, adam, prior,
                                               {X, y, order, batch_size, weights(row_w)}, outs,
                                               gens, schedule);
        });
}

// svbnn._engine.native_epoch's epochs of the Gumbel sampler's network under a categorical
// likelihood (epochs.cpp): params mu, rho, alpha (T,), Adam's state of each, X (n, p) float32,
// y (n,) the class indices (int64, each below outs[-1]), row_w as above, the draw's 1 / tau
// (2 or 1), ReLU or no hidden activation, the generator of the orders and of the draws' seeds
// (None: torch's default), and per step as above. Returns as local_gaussian_epochs.
std::vector<Tensor> gumbel_categorical_epochs(
    const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
    const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& steps,
    const Tensor& log_lam, const Tensor& log_1mlam, double log_sigma0, double prec0,
    double inv_tau, const Tensor& X, const Tensor& y, const std::optional<Tensor>& row_w,
    const std::optional<at::Generator>& perm_gen, int64_t n_epochs, bool gates,
    int64_t batch_size, const std::vector<int64_t>& outs, bool relu,
    const std::optional<at::Generator>& gen, const std::vector<double>& n_train,
    const std::vector<double>& kl_weight, const std::vector<double>& lr, double beta1,
    double beta2, double eps, double weight_decay) {
    const int64_t k = check_epochs(params, exp_avgs, exp_avg_sqs, steps, X, batch_size, outs,
                                   n_epochs, n_train, kl_weight, lr);
    TORCH_CHECK(params.size() == 3, "params: mu, rho, alpha expected");
    TORCH_CHECK(inv_tau == 2.0 || inv_tau == 1.0, "inv_tau: 1 or 2 expected, got ", inv_tau);
    TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == at::kLong && y.dim() == 1 &&
                    y.size(0) == X.size(0) && y.is_contiguous(),
                "y: the n rows' classes (int64) expected");
    check_row_weights(row_w, X);
    const int64_t* classes = y.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < y.size(0); ++i)
        TORCH_CHECK(0 <= classes[i] && classes[i] < outs.back(), "y: class ", classes[i],
                    " out of range for ", outs.back(), " outputs");
    const svbnn::Prior prior{as_float(log_lam), as_float(log_1mlam), log_sigma0, prec0};
    const svbnn::Adam adam{exp_avgs, exp_avg_sqs, steps, beta1, beta2, eps, weight_decay};
    py::gil_scoped_release unlocked;
    return svbnn::run_epochs(
        n_epochs, X.size(0), k, params[2], gates, perm_gen, {n_train, kl_weight, lr},
        [&](const Tensor& order, const svbnn::Schedule& schedule) {
            return svbnn::gumbel_categorical_epoch(params, adam, prior, inv_tau,
                                                   {X, y, order, batch_size, weights(row_w)}, outs,
                                                   relu, gen, schedule);
        });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "svbnn's native loops (svbnn._engine.native)";
    m.def("fused_forward", &fused_forward);
    m.def("fused_backward", &fused_backward);
    m.def("local_moments_kl", &local_moments_kl);
    m.def("local_moments_kl_backward", &local_moments_kl_backward);
    m.def("local_mlp_forward", &local_mlp_forward);
    m.def("local_mlp_backward", &local_mlp_backward);
    m.def("gather_rows", &gather_rows);
    m.def("narrow_mlp_forward", &narrow_mlp_forward);
    m.def("narrow_mlp_backward", &narrow_mlp_backward);
    m.def("narrow_mlp_gaussian_step", &narrow_mlp_gaussian_step);
    m.def("local_gaussian_epochs", &local_gaussian_epochs);
    m.def("gumbel_categorical_epochs", &gumbel_categorical_epochs);
}
