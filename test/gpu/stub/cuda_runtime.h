// A stand-in for CUDA's cuda_runtime.h, for `make gpu-check DRY=1` where
// there is no CUDA: it declares the part of the runtime API the payload's
// programs use, with CUDA's signatures, so that g++ can check their host
// code (hack/gpu-check.sh first turns each `kernel<<<cfg>>>(args)` into
// `(gpucheck_launch(cfg), kernel)(args)`, so the configuration is checked
// too). It is never compiled into anything.
#pragma once

#include <math.h>  // fmaf and the rest, which CUDA's headers bring

#include <cstddef>

#define __global__
#define __device__
#define __host__

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {}
};
extern const uint3 threadIdx, blockIdx;
extern const dim3 blockDim, gridDim;

const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **devPtr, size_t size);
template <class T>
cudaError_t cudaMalloc(T **devPtr, size_t size) {
    return cudaMalloc((void **)devPtr, size);
}
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

__device__ int atomicAdd(int *address, int val);

// A kernel launch's configuration: blocks, threads[, shared bytes[, stream]].
int gpucheck_launch(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = 0);
