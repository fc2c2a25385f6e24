// memcap: what cudaMemGetInfo says the card holds, then one allocation per
// size given (GiB), each written once and freed before the next. Prints
// `memcap pid= total_bytes= free_bytes=` and `alloc bytes= result=ok|<error>`.
//
//   memcap 3 5     under a 4 GiB slice: 3 GiB succeeds, 5 GiB fails
#include "gpucheck.cuh"

#include <unistd.h>

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cudaFree(0));  // create the context: HAMi-core counts it
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    printf("memcap pid=%d total_bytes=%zu free_bytes=%zu\n", (int)getpid(), total_bytes, free_bytes);
    for (int i = 1; i < argc; i++) {
        size_t bytes = (size_t)(atof(argv[i]) * (1 << 30));
        void *p = NULL;
        cudaError_t err = cudaMalloc(&p, bytes);
        if (err == cudaSuccess) {
            err = cudaMemset(p, 1, bytes);  // touch it: the card really holds it
            if (err == cudaSuccess) {
                err = cudaDeviceSynchronize();
            }
            CHECK(cudaFree(p));
        }
        cudaGetLastError();  // an allocation failure is not sticky: clear it
        printf("alloc bytes=%zu result=%s\n", bytes, err == cudaSuccess ? "ok" : cudaGetErrorName(err));
    }
    return 0;
}
