// The vectors of the native loops' products (replicated_layers.cpp, local_layers.cpp): the
// CPU's own width, chosen when the library is compiled (16 floats under AVX-512, 8 under AVX,
// else 4), as GCC's and Clang's vector types, whose operations act lane by lane as on one
// float each. A loop written over them does the same operations at every width, so its
// results do not depend on the CPU; a vector type wider than the CPU's registers is split
// through memory instead (docs/performance.md, "The narrow layers' first layer on a CPU
// without AVX-512").
#pragma once

#include <cstring>

namespace svbnn_vectors {

#if defined(__AVX512F__)
constexpr int kWidth = 16;
#elif defined(__AVX__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
typedef float vec __attribute__((vector_size(kWidth * sizeof(float))));

inline vec load(const float* p) {  // unaligned
    vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

}  // namespace svbnn_vectors
