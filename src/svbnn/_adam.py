"""The training loop's Adam: torch's own Adam arithmetic, its state held here. Private.

:func:`svbnn.training.train` trains with Adam by default. ``torch.optim.Adam`` would do,
but every entry of a ``torch.optim.Optimizer`` (its constructor, ``step``, ``zero_grad``,
``state_dict``) imports PyTorch's compiler, ``torch._dynamo``, the first time any of them
runs in a process; on a small table that import takes longer than the whole fit
(docs/performance.md, "A process's first fit"). :class:`Adam` calls the same function
``torch.optim.Adam.step`` calls, :func:`torch.optim.adam.adam`, with the same state and
options, so a run is the same bit for bit (tests/test_adam.py), without that import. Its
state and ``state_dict`` have ``torch.optim.Adam``'s layout, so a checkpoint written
with either loads into the other; the native epochs
(:mod:`svbnn._engine.native_epoch`) read and update the same state.

What it leaves out: parameter groups after the first, hooks (its own and torch's global
optimiser hooks), closures, ``amsgrad``, ``maximize`` and the other options
:func:`svbnn.training.train` never sets; it is not a ``torch.optim.Optimizer``, so
torch's learning-rate schedulers do not take it (the loop sets each step's rate itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam_step

__all__ = ["Adam"]


class Adam:
    """Adam over one group of parameters, as ``torch.optim.Adam(params, lr, betas, eps,
    weight_decay, fused=fused, foreach=None if fused else True)`` steps them.

    Parameters
    ----------
    params : iterable of Tensor
        The trained leaves; a step updates those with a ``.grad``.
    lr : float
        The learning rate: ``param_groups[0]["lr"]``, which the caller may change between
        steps.
    betas, eps, weight_decay
        Adam's options, as ``torch.optim.Adam``'s.
    fused : bool
        torch's one-kernel Adam (floating-point parameters on a CPU or a CUDA device);
        ``False``: its multi-tensor ("foreach") one.
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        fused: bool = True,
    ) -> None:
        # torch.optim.Adam's group, key for key: a checkpoint's group and the run's
        # identity (svbnn.training) read the same options from either.
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": list(params),
                "lr": lr,
                "betas": (float(betas[0]), float(betas[1])),
                "eps": eps,
                "weight_decay": weight_decay,
                "amsgrad": False,
                "maximize": False,
                "foreach": None if fused else True,
                "capturable": False,
                "differentiable": False,
                "fused": fused,
                "decoupled_weight_decay": False,
            }
        ]
        self.state: dict[Tensor, dict[str, Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (``set_to_none``) or zero every parameter's gradient."""
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def _new_state(self, p: Tensor) -> dict[str, Tensor]:
        """A parameter's state before its first step, as ``torch.optim.Adam`` makes it: the
        step count a float32 scalar on the parameter's device under the fused kernel (on
        the CPU, in the default float type, otherwise), and zero moments."""
        if self.param_groups[0]["fused"]:
            step = torch.zeros((), dtype=torch.float32, device=p.device)
        else:
            dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            step = torch.tensor(0.0, dtype=dtype)
        return {
            "step": step,
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every parameter that has a gradient."""
        group = self.param_groups[0]
        params: list[Tensor] = []
        grads: list[Tensor] = []
        exp_avgs: list[Tensor] = []
        exp_avg_sqs: list[Tensor] = []
        steps: list[Tensor] = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adam does not take sparse gradients")
            state = self.state.get(p)
            if not state:
                state = self.state[p] = self._new_state(p)
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        _adam_step(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            foreach=group["foreach"],
            fused=group["fused"],
            amsgrad=False,
            has_complex=any(torch.is_complex(p) for p in params),
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam.state_dict``'s layout: ``{"state": {index: {"step",
        "exp_avg", "exp_avg_sq"}}, "param_groups": [{options..., "params": [indices]}]}``
        (the tensors are the optimiser's own, not copies)."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            "param_groups": [
                {
                    **{k: v for k, v in group.items() if k != "params"},
                    "params": list(range(len(group["params"]))),
                }
            ],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a :meth:`state_dict` (this class's or ``torch.optim.Adam``'s, one group of
        as many parameters), as ``torch.optim.Adam.load_state_dict`` does: the moments
        cast to their parameter's type and device, the step count to the parameter's
        device in float32 under the fused kernel; the group's options replace this one's.

        Raises
        ------
        ValueError
            When the state is of another number of groups or parameters, or holds the
            state of a parameter that is not there.
        """
        groups = state_dict["param_groups"]
        params = self.param_groups[0]["params"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"the optimiser state is of groups of {sizes} parameters; this optimiser has "
                f"one group of {len(params)}"
            )
        fused = bool(groups[0].get("fused"))
        state: dict[Tensor, dict[str, Tensor]] = {}
        for index, values in state_dict["state"].items():
            if not (isinstance(index, int) and 0 <= index < len(params)):
                raise ValueError(f"the optimiser state holds parameter {index!r} of {len(params)}")
            p = params[index]
            loaded: dict[str, Tensor] = {}
            for key, value in values.items():
                if key == "step":
                    loaded[key] = value.to(dtype=torch.float32, device=p.device) if fused else value
                elif p.is_floating_point():
                    loaded[key] = value.to(dtype=p.dtype, device=p.device)
                else:
                    loaded[key] = value.to(device=p.device)
            state[p] = loaded
        self.state = state
        self.param_groups = [{**groups[0], "params": params}]
