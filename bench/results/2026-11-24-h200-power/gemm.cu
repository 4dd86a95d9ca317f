// Clock/power reference load: a bf16 8192^3 cuBLAS GEMM in a loop for ~secs seconds.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  int n = 8192;
  double secs = argc > 1 ? atof(argv[1]) : 5.0;
  __nv_bfloat16 *a, *b, *c;
  cudaMalloc(&a, 2ull * n * n);
  cudaMalloc(&b, 2ull * n * n);
  cudaMalloc(&c, 2ull * n * n);
  cudaMemset(a, 0x3c, 2ull * n * n);
  cudaMemset(b, 0x3c, 2ull * n * n);
  cublasHandle_t h;
  cublasCreate(&h);
  float al = 1, be = 0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  int iters = 0;
  float ms = 0;
  cudaEventRecord(e0);
  while (ms < secs * 1000) {
    for (int i = 0; i < 20; ++i)
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &al, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                   &be, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    iters += 20;
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
  }
  printf("gemm %d iters %.1f ms: %.1f TFLOP/s\n", iters, ms,
         2.0 * n * n * (double)n * iters / (ms * 1e-3) / 1e12);
}
