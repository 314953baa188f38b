"""The UCI data of the ``uci`` artifact as replicated-network problems: the standard splits
of one data set, standardised and stacked along a leading replicate axis, and their
validation problems (see :mod:`svbnn_experiments.uci`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from svbnn.data import (
    UCI_DATASETS,
    Standardization,
    UCISplit,
    load_uci,
    standardize,
    validation_split,
)

from .common import derive_seed

__all__ = ["UCIProblem", "load_problem"]

SEED_UCI_VAL, SEED_UCI_TRAIN, SEED_UCI_PREDICT = 21, 22, 23


def _dataset_code(name: str) -> int:
    """The data set's index in ``UCI_DATASETS`` (99 for others), used in derived seeds."""
    return UCI_DATASETS.index(name) if name in UCI_DATASETS else 99


@dataclass
class UCIProblem:
    """The standardised splits of one data set, stacked for a replicated network.

    Attributes
    ----------
    name : str
    X_train, y_train : Tensor
        ``(S, n, p)`` and ``(S, n)``, standardised.
    X_test, y_test_std : Tensor
        ``(S, n_test_max, p)`` and ``(S, n_test_max)`` standardised, zero-padded when the
        test parts differ in size (``test_mask`` marks the real rows).
    test_mask : ndarray of bool, shape (S, n_test_max)
    y_test : ndarray, shape (S, n_test_max)
        Test targets in original units (padding 0).
    stats : list of Standardization
    splits : list of int
    """

    name: str
    X_train: Tensor
    y_train: Tensor
    X_test: Tensor
    y_test_std: Tensor
    test_mask: NDArray[np.bool_]
    y_test: NDArray[np.float64]
    stats: list[Standardization]
    splits: list[int]

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[1])

    def to(self, device: str | torch.device) -> UCIProblem:
        """The same problem with its tensors on ``device`` (the numpy arrays stay)."""
        return replace(
            self,
            X_train=self.X_train.to(device),
            y_train=self.y_train.to(device),
            X_test=self.X_test.to(device),
            y_test_std=self.y_test_std.to(device),
        )

    @property
    def p(self) -> int:
        return int(self.X_train.shape[2])


def _stack(
    parts: Sequence[UCISplit], name: str, splits: list[int]
) -> tuple[UCIProblem, list[UCISplit]]:
    sizes = {s.n_train for s in parts}
    if len(sizes) != 1:
        raise ValueError(
            f"{name}: the splits have different training sizes {sorted(sizes)}; the "
            "replicated fit needs equal sizes"
        )
    std_parts, stats = [], []
    for s in parts:
        st, stat = standardize(s)
        std_parts.append(st)
        stats.append(stat)
    n_test = max(s.n_test for s in parts)
    S, p = len(parts), parts[0].n_features
    X_test = np.zeros((S, n_test, p))
    y_test_std = np.zeros((S, n_test))
    y_test = np.zeros((S, n_test))
    mask = np.zeros((S, n_test), dtype=bool)
    for i, (s, st) in enumerate(zip(parts, std_parts, strict=True)):
        k = s.n_test
        X_test[i, :k], y_test_std[i, :k], y_test[i, :k] = st.X_test, st.y_test, s.y_test
        mask[i, :k] = True
    prob = UCIProblem(
        name=name,
        X_train=torch.tensor(np.stack([s.X_train for s in std_parts]), dtype=torch.float32),
        y_train=torch.tensor(np.stack([s.y_train for s in std_parts]), dtype=torch.float32),
        X_test=torch.tensor(X_test, dtype=torch.float32),
        y_test_std=torch.tensor(y_test_std, dtype=torch.float32),
        test_mask=mask,
        y_test=y_test,
        stats=stats,
        splits=splits,
    )
    return prob, std_parts


def load_problem(
    name: str, n_splits: int, data_dir: str | None, *, val_fraction: float | None, seed: int
) -> tuple[UCIProblem, UCIProblem | None]:
    """The first ``n_splits`` splits of ``name``, and their validation problems.

    Returns
    -------
    full : UCIProblem
        Training parts (standardised with their own statistics) and test parts.
    val : UCIProblem or None
        Per split, the training part cut into a sub-training part and a validation part
        (in the ``test`` slots), standardised with the sub-training statistics; ``None``
        when ``val_fraction`` is ``None``.
    """
    first = load_uci(name, 0, data_dir)
    count = min(n_splits, first.n_splits)
    parts = [first] + [load_uci(name, i, data_dir) for i in range(1, count)]
    splits = list(range(count))
    full, _ = _stack(parts, name, splits)
    if val_fraction is None:
        return full, None
    code = _dataset_code(name)
    vparts = [
        validation_split(s, val_fraction, random_state=derive_seed(seed, SEED_UCI_VAL, code, i))
        for i, s in zip(splits, parts, strict=True)
    ]
    val, _ = _stack(vparts, name, splits)
    return full, val
