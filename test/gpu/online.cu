// online: an online service's launches: a tiny kernel, waited for, every
// --gap-us, for --seconds after a warm-up. The latency of each (launch to
// completion, host clock) is what a busy neighbour on the card adds to.
// Prints `online pid= n= p50_us= p99_us= max_us= mean_us= start_ms= end_ms=`.
//
//   online --seconds 4 --gap-us 500
#include "gpucheck.cuh"

#include <unistd.h>

#include <algorithm>
#include <vector>

__global__ void tick(int *counter) {
    if (threadIdx.x == 0) {
        atomicAdd(counter, 1);
    }
}

// percentile is the nearest-rank percentile of sorted v.
static double percentile(const std::vector<double> &v, double p) {
    size_t rank = (size_t)(p / 100 * v.size() + 0.999999);
    return v[rank == 0 ? 0 : rank - 1];
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    double seconds = arg(argc, argv, "seconds", 4);
    int gap_us = (int)arg(argc, argv, "gap-us", 500);
    int *counter = NULL;
    cudaStream_t stream;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaStreamCreate(&stream));
    for (int i = 0; i < 100; i++) {  // warm-up: module load, first launches
        tick<<<1, 32, 0, stream>>>(counter);
        CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<double> us;
    long long start = now_ms(), end = start + (long long)(seconds * 1000);
    while (now_ms() < end) {
        double t0 = mono_us();
        tick<<<1, 32, 0, stream>>>(counter);
        CHECK(cudaGetLastError());
        CHECK(cudaStreamSynchronize(stream));
        us.push_back(mono_us() - t0);
        usleep(gap_us);
    }
    long long stop = now_ms();
    if (us.empty()) {
        fprintf(stderr, "online: no launch in %.1f s\n", seconds);
        return 1;
    }
    double sum = 0;
    for (double x : us) {
        sum += x;
    }
    std::sort(us.begin(), us.end());
    printf("online pid=%d n=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f mean_us=%.1f start_ms=%lld end_ms=%lld\n",
           (int)getpid(), us.size(), percentile(us, 50), percentile(us, 99), us.back(), sum / us.size(),
           start, stop);
    CHECK(cudaFree(counter));
    return 0;
}
