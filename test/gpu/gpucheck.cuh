// Shared by the payload's CUDA programs (docs/real-card.md): every CUDA
// call checked, wall-clock milliseconds comparable across processes, and
// `--name value` arguments. Every line a program prints for qgpu-gpucheck
// is `<kind> key=value ...`.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                               \
    do {                                                                          \
        cudaError_t err_ = (call);                                                \
        if (err_ != cudaSuccess) {                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorString(err_));                                    \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

// Milliseconds since the epoch: run.sh and qgpu-gpucheck line up the
// reports of several processes on this clock.
static long long now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Microseconds on a clock that never jumps, for the latencies.
static double mono_us() {
    using namespace std::chrono;
    return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count() / 1e3;
}

// arg returns the number after --name, or def.
static double arg(int argc, char **argv, const char *name, double def) {
    for (int i = 1; i + 1 < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] == '-' && strcmp(argv[i] + 2, name) == 0) {
            return atof(argv[i + 1]);
        }
    }
    return def;
}
