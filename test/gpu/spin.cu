// spin: a compute-bound kernel (chains of fused multiply-adds over four
// blocks per SM) launched one at a time for --seconds, each waited for, so
// that the kernels a second measure the share of the card the process gets.
// Prints `progress t_ms=<epoch ms> kernels=<completed>` every 100 ms; a
// process whose launches are held back (HAMi-core's block, a frozen cgroup)
// prints nothing meanwhile.
//
//   spin --seconds 8 --target-ms 2     calibrate kernels of about 2 ms, then run
//   spin --seconds 8 --iters 123456    kernels of a given length (as calibrated)
#include "gpucheck.cuh"

#include <unistd.h>

__global__ void fma_chains(float *out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f, d = blockIdx.x * 1e-3f;
    for (int i = 0; i < iters; i++) {
        a = fmaf(a, 0.999f, 0.001f);
        b = fmaf(b, 0.999f, 0.001f);
        c = fmaf(c, 0.999f, 0.001f);
        d = fmaf(d, 0.999f, 0.001f);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

static const int kThreads = 256;

// kernel_ms times one kernel of iters with events (after a warm-up).
static float kernel_ms(float *out, int blocks, int iters) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    fma_chains<<<blocks, kThreads>>>(out, iters);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(start));
    fma_chains<<<blocks, kThreads>>>(out, iters);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return ms;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    double seconds = arg(argc, argv, "seconds", 8);
    int iters = (int)arg(argc, argv, "iters", 0);
    double target = arg(argc, argv, "target-ms", 2);

    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int blocks = 4 * sms;
    float *out = NULL;
    CHECK(cudaMalloc(&out, sizeof(float) * blocks * kThreads));
    if (iters <= 0) {  // calibrate: run without the library, the others get --iters
        const int probe = 1 << 14;
        iters = (int)(probe * target / kernel_ms(out, blocks, probe));
        if (iters < 1) {
            iters = 1;
        }
    }
    printf("spin pid=%d sms=%d blocks=%d threads=%d iters=%d kernel_ms=%.3f\n", (int)getpid(), sms,
           blocks, kThreads, iters, kernel_ms(out, blocks, iters));

    long long start = now_ms(), end = start + (long long)(seconds * 1000), next = start;
    long long kernels = 0;
    printf("progress t_ms=%lld kernels=0\n", start);
    for (long long now = start; now < end; now = now_ms()) {
        fma_chains<<<blocks, kThreads>>>(out, iters);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        kernels++;
        if (now >= next) {
            printf("progress t_ms=%lld kernels=%lld\n", now_ms(), kernels);
            next = now + 100;
        }
    }
    printf("progress t_ms=%lld kernels=%lld\n", now_ms(), kernels);
    printf("done kernels=%lld seconds=%.3f\n", kernels, (now_ms() - start) / 1e3);
    CHECK(cudaFree(out));
    return 0;
}
