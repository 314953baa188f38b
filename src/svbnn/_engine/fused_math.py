"""Building blocks of the fused draw + KL kernel (:func:`svbnn._engine.kernels.fused_forward`):
counter-based noise and inline ``float32`` math.

Private. Written as plain tensor operations so that ``torch.compile`` fuses them into the
kernel's one loop; eager they are ordinary (slower) torch code with the same results.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["counter_index", "counter_noise"]

# Counter-based noise: element i of a draw gets its uniforms by hashing (i, seed), so the
# noise costs a few vectorised integer operations inside the fused loop instead of two
# passes of torch's sequential generator (docs/performance.md, "Where the thresholds and
# layouts come from"). The hash is "lowbias32" (C. Wellons'
# hash-prospector: a 32-bit integer hash with avalanche bias 0.17%), applied twice with the
# two seed words; int32 arithmetic wraps, and right shifts are masked to make them logical.
_H1 = 0x7FEB352D
_H2 = 0x846CA68B - (1 << 32)
_SALT = (0x5BD1E995, 0x68E31DA4, 0x1B873593, 0x27D4EB2F, 0x165667B1)


def _hash32(x: Tensor) -> Tensor:
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * _H1
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * _H2
    return x ^ ((x >> 16) & 0xFFFF)


def _unit(h: Tensor, h2: Tensor | None, dtype: torch.dtype) -> Tensor:
    """A uniform on (0, 1), never 0 or 1: the midpoints ``(k + 1/2) 2^-b`` of ``b = 23``
    random bits (float32), 52 (float64, ``h2``). One bit fewer than the mantissa holds, so
    that ``k + 1/2`` is exact: with 24 bits, ``k + 1/2`` rounds to even above ``2^23`` and
    the largest ``k`` gives exactly 1."""
    if h2 is None:
        return (((h >> 9) & 0x7FFFFF).to(dtype) + 0.5) * 2.0**-23
    hi = ((h >> 6) & 0x3FFFFFF).to(dtype)  # 26 bits
    lo = ((h2 >> 6) & 0x3FFFFFF).to(dtype)  # 26 bits
    return (hi * 2.0**26 + lo + 0.5) * 2.0**-52


def counter_noise(like: Tensor, seed: Tensor) -> tuple[Tensor, Tensor]:
    """``u ~ U(0, 1)`` and ``eps ~ N(0, 1)``, independent, one pair per element of ``like``.

    Element ``i`` (in flat order) gets its bits from hashes of ``(i, seed)``; ``eps`` is
    Box-Muller's ``sqrt(-2 log v1) cos(2 pi v2)``. ``float32``: three hashes, i.e. 64 bits
    after the seed mixing, of which 23 go to ``u``, 23 to the radius ``v1`` (the largest
    ``|eps|`` is 5.8, as with ``torch.rand``'s 24 bits) and 16 to the angle ``v2``. Each
    hash is a sizeable part of the fused loop's time, so the angle, which needs no tail
    resolution, shares the two words. The logarithm and the cosine are the inline
    ``float32`` versions below (:func:`_log`, :func:`_cos_2pi`), within 2 ulp.
    ``float64``: five hashes, 52-bit ``u`` and ``v1``, 23-bit ``v2``. (Pairing elements to
    share one Box-Muller draw, ``r cos t`` and ``r sin t``, is slower compiled: the
    concatenation splits the fused loop.)

    Parameters
    ----------
    like : Tensor
        Shape, dtype and device of the draw: ``float32`` or ``float64``.
    seed : Tensor
        ``(2,)`` ``int32``, drawn from the caller's generator once per draw.

    Returns
    -------
    u, eps : Tensor
        Shaped like ``like``.
    """
    dtype = like.dtype
    base = _hash32(_hash32(counter_index(like) ^ seed[0]) + seed[1])
    if dtype == torch.float64:
        h = [_hash32(base + s) for s in _SALT]
        u = _unit(h[0], h[3], dtype)
        v1 = _unit(h[1], h[4], dtype)
        v2 = _unit(h[2], None, dtype)
    else:
        h2 = _hash32(base + _SALT[0])
        u = _unit(base, None, dtype)
        v1 = _unit(h2, None, dtype)
        angle_bits = ((base & 0xFF) << 8) | (h2 & 0xFF)
        v2 = (angle_bits.to(dtype) + 0.5) * 2.0**-16
    eps = torch.sqrt(-2.0 * _log(v1)) * _cos_2pi(v2)
    return u, eps


# ------------------------------------------------------------------ float32 math, inline
# Compiled for the CPU, torch.log / exp / log1p / cos are calls into the SLEEF library
# inside the fused loop, and a call clobbers every vector register: the loop, which keeps
# dozens of values live, spills and reloads them around each call. Written as arithmetic
# and integer bit operations instead, they stay inline (docs/performance.md, "The fused
# kernel's float32 math").
# Each is accurate to 2 ulp in float32 on its stated domain, the sigmoids to 3 as torch's
# own (tests/test_fused.py checks them against float64); other dtypes use the torch
# functions. The polynomials are musl's logf and Cephes' expf. Their coefficients are
# literals: torch.compile turns a float read from a module global into a graph input, a
# tensor conversion on every call.


def _log_reduced(f: Tensor, k: Tensor) -> Tensor:
    """``log(1 + f) + k log 2`` for ``f`` in ``[sqrt(1/2) - 1, sqrt(2) - 1]`` (musl's
    logf: ``log(1 + f) = 2 atanh(s)``, ``s = f / (2 + f)``, one division)."""
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (0.66666662693 + w * 0.28498786688) + w * (0.40000972152 + w * 0.24279078841)
    hfsq = 0.5 * f * f
    # log 2 = 6.9313812256e-01 + 9.0580006145e-06, the first with 16 bits
    return s * (hfsq + r) + k * 9.0580006145e-06 - hfsq + f + k * 6.9313812256e-01


def _log(x: Tensor) -> Tensor:
    """``log(x)`` for positive normal ``x`` (float32: exponent and mantissa from the bits,
    the mantissa scaled into ``[sqrt(1/2), sqrt(2))``)."""
    if x.dtype != torch.float32:
        return torch.log(x)
    bits = x.view(torch.int32) + (0x3F800000 - 0x3F3504F3)
    k = (bits >> 23) - 0x7F
    f = ((bits & 0x007FFFFF) + 0x3F3504F3).view(torch.float32) - 1.0
    return _log_reduced(f, k.to(torch.float32))


def _exp_nonpositive(x: Tensor) -> Tensor:
    """``exp(x)`` for ``x <= 0``, subnormal results included (float32: ``2^k p(r)``,
    ``|r| <= log(2) / 2``, the power of two as two exact factors ``2^k1 2^(k - k1)``)."""
    if x.dtype != torch.float32:
        return torch.exp(x)
    x = torch.clamp(x, min=-104.0)  # exp(-104) rounds to 0; k >= -151
    k = torch.round(x * 1.4426950408889634)  # x / log 2
    r = x - k * 0.693359375 + k * 2.12194440e-4  # 0.693359375 has 10 bits: k * it is exact
    p = r * 1.9875691500e-4 + 1.3981999507e-3
    for c in (8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 0.50000001201):
        p = p * r + c
    p = p * (r * r) + r + 1.0
    ki = k.to(torch.int32)
    k1 = ki >> 1
    s1 = ((k1 + 0x7F) << 23).view(torch.float32)
    s2 = ((ki - k1 + 0x7F) << 23).view(torch.float32)
    return p * s1 * s2


def _cos_2pi(v: Tensor) -> Tensor:
    """``cos(2 pi v)`` for ``v`` in ``[0, 1]`` (float32: ``sin(2 pi a)``, ``a = |v - 1/2|
    - 1/4`` exact for the angle's 17-bit ``v``, as an odd polynomial: the Taylor series of
    degree 13, whose remainder is below 1e-9 for ``|a| <= 1/4``)."""
    if v.dtype != torch.float32:
        return torch.cos((2.0 * math.pi) * v)
    a = (v - 0.5).abs() - 0.25
    a2 = a * a
    p = a2 * 3.8199525848482803 - 15.094642576822984  # (2 pi)^13 / 13!, (2 pi)^11 / 11!
    for c in (42.058693944897634, -76.70585975306136, 81.60524927607504):
        p = p * a2 + c
    p = p * a2 - 41.341702240399755
    p = p * a2 + 6.283185307179586
    return a * p


def _softplus_parts(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``softplus(x)``, ``log sigmoid(x) = -softplus(-x)``, ``sigmoid(x)`` and
    ``sigmoid(-x)`` from one ``exp`` and one ``log1p`` of ``e = exp(-|x|)`` in ``(0, 1]``,
    all stable (no cancellation) for any ``x``.

    float32: ``log1p(e)`` is :func:`_log_reduced` of ``f = e`` below ``sqrt(2) - 1``, else
    of ``f = (e - 1) / 2`` (``1 + e = 2 (1 + f)``), so ``1 + e`` is never rounded. (One
    division for both ``1 / (1 + e)`` and ``1 / (2 + f)``, as ``1 / ((1 + e)(2 + f))``,
    is 1 ulp less accurate for little gain.)"""
    e = _exp_nonpositive(-x.abs())
    r = 1.0 / (1.0 + e)
    if x.dtype == torch.float32:
        big = e > 0.41421356
        l1 = _log_reduced(torch.where(big, 0.5 * (e - 1.0), e), big.to(torch.float32))
    else:
        l1 = torch.log1p(e)
    softplus = torch.clamp(x, min=0.0) + l1
    log_sigmoid = torch.clamp(x, max=0.0) - l1
    positive = x >= 0
    er = e * r
    return softplus, log_sigmoid, torch.where(positive, r, er), torch.where(positive, er, r)


def counter_index(like: Tensor) -> Tensor:
    """``int32`` indices ``0 .. numel - 1`` in the shape of ``like`` (the noise counters)."""
    return torch.arange(like.numel(), dtype=torch.int32, device=like.device).view(like.shape)
