"""Values of ``--set``: each checked against the type and range of its setting's default
before any work, so that a bad value is one clear line naming the key, never a failure later."""

from __future__ import annotations

import ast
import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["check_setting"]


# --------------------------------------------------------------------- --set values
@dataclass(frozen=True)
class _Range:
    """An interval of allowed numbers (``None``: unbounded on that side)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, v: float) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return not (self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)))

    def broken_text(self, v: float) -> str:
        """The bound ``v`` breaks, as :meth:`text` writes it (the whole range when it is
        one value)."""
        if self.lo is None or self.hi is None or self.lo == self.hi:
            return self.text()
        if v < self.lo or (self.lo_open and v == self.lo):
            return _Range(self.lo, lo_open=self.lo_open).text()
        return _Range(hi=self.hi, hi_open=self.hi_open).text()

    def text(self) -> str:
        def num(x: float) -> str:
            return f"{x:g}" if x < 1e6 else str(int(x))

        if self.lo is not None and self.hi is not None:
            if self.lo == self.hi:
                return f"equal to {num(self.lo)}"
            left = "(" if self.lo_open else "["
            right = ")" if self.hi_open else "]"
            return f"in {left}{num(self.lo)}, {num(self.hi)}{right}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {num(self.hi)}"
        return "finite"


_UNIT_OPEN = _Range(0.0, 1.0, lo_open=True, hi_open=True)
_UNIT_HALF_OPEN = _Range(0.0, 1.0, lo_open=True)
_SEED = _Range(0, 2**32 - 1)

# Allowed ranges of --set settings where the default's sign alone does not say it
# (otherwise: an int setting must be >= 1, or >= 0 when its default is 0 ("all" / "auto");
# a float setting > 0, or any finite number when its default is 0 or negative).
_SETTING_RANGES: dict[str, _Range] = {
    "teacher_seed": _SEED,
    "xstar_seed": _SEED,
    "occurrence": _Range(0),
    # Quantiles and grids of a single point are degenerate (zero-width intervals).
    "coverage_draws": _Range(2),
    "coverage_grid": _Range(2),
    "n_points": _Range(2),
    "uq_draws": _Range(2),
    "prior_inclusion": _UNIT_OPEN,
    "phi": _UNIT_OPEN,
    "u": _UNIT_OPEN,
    "val_fraction": _UNIT_OPEN,
    "lot_prune_rate": _UNIT_OPEN,
    "agp_density": _UNIT_HALF_OPEN,
    "agp_end_fraction": _UNIT_HALF_OPEN,
    "agp_end": _UNIT_HALF_OPEN,
    "agp_densities": _UNIT_HALF_OPEN,
    "lot_densities": _UNIT_HALF_OPEN,
    "agp_begin": _Range(0.0, 1.0, hi_open=True),
    # Simulation II's f0 reads x1..x5.
    "p": _Range(5),
}

# Per-artifact ranges: the teachers of Simulation I have a fixed input size, the linear toy
# places its coefficients up to x150.
_ARTIFACT_RANGES: dict[tuple[str, str], _Range] = {
    ("table1-dense", "p"): _Range(20, 20),
    ("fig-lambda-dense-teacher", "p"): _Range(20, 20),
    ("table1-sparse", "p"): _Range(100, 100),
    ("fig-lambda-sparse-teacher", "p"): _Range(100, 100),
    ("fig-linear-toy", "p"): _Range(150),
}

# Upper bounds of the sizes: a size beyond them would exhaust memory or run for years,
# so it is refused by name before anything is allocated (not by numpy's out-of-memory).
_SIZE_CAPS: dict[str, int] = {
    "n_train": 10**7,
    "n_test": 10**7,
    "n_points": 10**6,
    "coverage_grid": 10**6,
    "batch_size": 10**7,
    "p": 10**5,
    "hidden": 10**5,
    "fc_hidden": 10**5,
    "coverage_draws": 10**5,
    "uq_draws": 10**5,
    "eval_draws": 10**5,
    "n_predict": 10**5,
    "n_mc": 10**4,
    "default_epochs": 10**7,
    "late_inverse_cdf_epochs": 10**7,
}

_SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "sampler": ("gumbel", "inverse_cdf"),
    "activation": ("relu", "tanh", "sigmoid", "logistic", "identity"),
    "optimizer": ("adam", "rmsprop", "sgd"),
    "prune_scope": ("layer", "global"),
}


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _range_for(artifact: str, key: str, example: Any) -> _Range:
    rule = _ARTIFACT_RANGES.get((artifact, key)) or _SETTING_RANGES.get(key)
    if rule is None:
        if _is_int(example):
            rule = _Range(1 if example >= 1 else 0)
        elif _is_real(example) and example > 0:
            rule = _Range(0.0, lo_open=True)
        else:
            rule = _Range()
    cap = _SIZE_CAPS.get(key)
    if cap is not None and (rule.hi is None or rule.hi > cap):
        rule = replace(rule, hi=cap, hi_open=False)
    return rule


def _check_number(where: str, v: Any, example: Any, rule: _Range) -> int | float:
    if _is_int(example):
        if not _is_int(v):
            raise ValueError(f"{where}: expects an integer, got {v!r}")
        if not rule.contains(int(v)):
            raise ValueError(f"{where}: must be {rule.broken_text(int(v))}, got {v!r}")
        return int(v)
    if not _is_real(v):
        raise ValueError(f"{where}: expects a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) or not rule.contains(f):
        text = rule.broken_text(f) if math.isfinite(f) else rule.text()
        what = "finite" if text == "finite" else f"finite and {text}"
        raise ValueError(f"{where}: must be {what}, got {v!r}")
    return f


def _check_text(where: str, key: str, value: Any) -> str:
    """A text setting: ``value`` must be text, one of the allowed values where fixed."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expects text, got {value!r}")
    choices = _SETTING_CHOICES.get(key)
    if choices is not None and value not in choices:
        raise ValueError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    return value


def _parse_literal(where: str, value: str) -> Any:
    """Read command-line text as a Python literal (``nan`` and ``inf`` as floats)."""
    text = value.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        try:
            # "nan" and "inf" are no Python literals: read them, to refuse them by name.
            return float(text)
        except ValueError:
            raise ValueError(f"{where}: cannot read {text!r} as a value") from None


def _check_list(
    where: str, artifact: str, key: str, value: Any, default: list[Any] | tuple[Any, ...]
) -> list[Any] | tuple[Any, ...]:
    """A list setting: a non-empty list of numbers (one number: a list of one), each in the
    range of the setting; a tuple when the default is one."""
    if _is_real(value):
        value = [value]  # one number for a list setting: a list of one (noise_grid=0.5)
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"{where}: expects a non-empty list such as {list(default)!r}, got {value!r}"
        )
    example = default[0] if default else 1.0
    rule = _range_for(artifact, key, example)
    items = [
        _check_number(f"{where} (item {i + 1})", v, example, rule) for i, v in enumerate(value)
    ]
    return tuple(items) if isinstance(default, tuple) else items


def check_setting(artifact: str, key: str, value: Any, default: Any) -> Any:
    """Check one ``--set`` value against the type and range of the setting's default.

    Integer settings take integers only (``1.5`` is refused, not truncated) within their
    range (sizes have an upper bound too: ``n_train`` and ``n_test`` at most 10^7, network
    widths and ``p`` 10^5, draws 10^5); float settings take finite numbers within theirs;
    list settings take a non-empty list of such numbers (or one number, a list of one);
    text settings take text (one of the allowed values, where there is a fixed set); flags
    take ``True`` or ``False``. A text ``value`` (from the command line) is first read as
    a Python literal, except for text settings, which take it as is.

    Parameters
    ----------
    artifact : str
        Artifact name (some ranges depend on it).
    key : str
    value : Any
        The given value: text from ``--set KEY=VALUE``, or a Python object.
    default : Any
        The setting's default (its type is the setting's type).

    Returns
    -------
    Any
        The value, converted (a float setting given ``2`` gets ``2.0``).

    Raises
    ------
    ValueError
        Naming ``--set KEY``, the value and what is expected.
    """
    where = f"--set {key}"
    if isinstance(default, str):
        return _check_text(where, key, value)
    if isinstance(value, str):
        value = _parse_literal(where, value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expects True or False, got {value!r}")
        return value
    if isinstance(default, (list, tuple)):
        return _check_list(where, artifact, key, value, default)
    if _is_real(default):
        return _check_number(where, value, default, _range_for(artifact, key, default))
    # A setting of another type (none today): take the value as given.
    return value
