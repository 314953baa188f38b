// The elementwise functions of svbnn's native loops (fused_forward.cpp, local_moments.cpp):
// float32 versions of svbnn._engine.fused_math's (_kernel_math) hash, uniform, log, exp, cos
// and softplus, operation for operation, so that a loop built from them gives the inductor
// kernel's floats bit for bit (with -ffp-contract=off, as the build sets).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace svbnn_elementwise {

inline uint32_t hash32(uint32_t x) {  // lowbias32, as _kernel_math._hash32
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

inline float unit23(uint32_t h) {  // _kernel_math._unit, float32
    return (static_cast<float>((h >> 9) & 0x7FFFFFu) + 0.5f) * 1.1920928955078125e-07f;
}

inline float log_reduced(float f, float k) {  // _kernel_math._log_reduced
    float s = f / (2.0f + f);
    float z = s * s;
    float w = z * z;
    float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
    float hfsq = 0.5f * f * f;
    return s * (hfsq + r) + k * 9.0580006145e-06f - hfsq + f + k * 6.9313812256e-01f;
}

inline float log_(float x) {  // _kernel_math._log
    int32_t bits = std::bit_cast<int32_t>(x) + (0x3F800000 - 0x3F3504F3);
    int32_t k = (bits >> 23) - 0x7F;
    float f = std::bit_cast<float>((bits & 0x007FFFFF) + 0x3F3504F3) - 1.0f;
    return log_reduced(f, static_cast<float>(k));
}

inline float exp_nonpositive(float x) {  // _kernel_math._exp_nonpositive
    x = x < -104.0f ? -104.0f : x;
    float k = std::rint(x * 1.4426950408889634f);
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 0.50000001201f;
    p = p * (r * r) + r + 1.0f;
    int32_t ki = static_cast<int32_t>(k);
    int32_t k1 = ki >> 1;
    float s1 = std::bit_cast<float>((k1 + 0x7F) << 23);
    float s2 = std::bit_cast<float>((ki - k1 + 0x7F) << 23);
    return p * s1 * s2;
}

inline float cos_2pi(float v) {  // _kernel_math._cos_2pi
    float a = std::fabs(v - 0.5f) - 0.25f;
    float a2 = a * a;
    float p = a2 * 3.8199525848482803f - 15.094642576822984f;
    p = p * a2 + 42.058693944897634f;
    p = p * a2 + -76.70585975306136f;
    p = p * a2 + 81.60524927607504f;
    p = p * a2 - 41.341702240399755f;
    p = p * a2 + 6.283185307179586f;
    return a * p;
}

// softplus(x), log sigmoid(x), sigmoid(x), sigmoid(-x): _kernel_math._softplus_parts.
inline void softplus_parts(float x, float& sp, float& log_sig, float& sig, float& sig_neg) {
    float e = exp_nonpositive(-std::fabs(x));
    float r = 1.0f / (1.0f + e);
    bool big = e > 0.41421356f;
    float l1 = log_reduced(big ? 0.5f * (e - 1.0f) : e, big ? 1.0f : 0.0f);
    sp = (x < 0.0f ? 0.0f : x) + l1;
    log_sig = (x > 0.0f ? 0.0f : x) - l1;
    float er = e * r;
    bool positive = x >= 0.0f;
    sig = positive ? r : er;
    sig_neg = positive ? er : r;
}

}  // namespace svbnn_elementwise
