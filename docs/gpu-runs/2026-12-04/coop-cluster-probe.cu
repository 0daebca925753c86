// Does the runtime accept a cooperative launch with a 2-CTA cluster, at our attention kernel's shape (1 CTA per SM,
// ~220 KB of shared memory, 384 threads), eagerly and in a captured graph? And does a grid-wide arrival counter work?
#include <cstdio>
#include <cuda_runtime.h>
__global__ void kc(unsigned* counter, unsigned expected, int* ok) {  // cluster given at launch
  if (threadIdx.x == 0) {
    atomicAdd(counter, 1u);
    while (atomicAdd(counter, 0u) < expected) {}
    if (blockIdx.x == 0) *ok = 1;
  }
}
int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int smem = 220 * 1024;
  cudaFuncSetAttribute(kc, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  unsigned* counter; int* ok; cudaMalloc(&counter, 4); cudaMalloc(&ok, 4);
  for (int blocks : {sms, sms - 2, 72}) {
    cudaMemset(counter, 0, 4); cudaMemset(ok, 0, 4);
    cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[2]; at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1; at[1].id = cudaLaunchAttributeCooperative; at[1].val.cooperative = 1;
    cfg.attrs = at; cfg.numAttrs = 2;
    int clusters = -1; cudaLaunchConfig_t q = cfg; q.numAttrs = 1;
    cudaError_t oe = cudaOccupancyMaxActiveClusters(&clusters, kc, &q);
    cudaError_t e = cudaLaunchKernelEx(&cfg, kc, counter, (unsigned)blocks, ok);
    cudaError_t s = cudaDeviceSynchronize(); int h = 0; cudaMemcpy(&h, ok, 4, cudaMemcpyDeviceToHost);
    printf("blocks %d: max active clusters %d (%s); cooperative+cluster launch: %s, sync: %s, grid barrier ok %d\n", blocks,
           clusters, cudaGetErrorName(oe), cudaGetErrorName(e), cudaGetErrorName(s), h);
    cudaGetLastError();
    // captured in a graph
    cudaStream_t st; cudaStreamCreate(&st); cudaGraph_t g; cudaGraphExec_t ge;
    cudaMemset(counter, 0, 4); cudaMemset(ok, 0, 4); cudaDeviceSynchronize();
    cfg.stream = st;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
    cudaError_t ce = cudaLaunchKernelEx(&cfg, kc, counter, (unsigned)blocks, ok);
    cudaError_t ee = cudaStreamEndCapture(st, &g);
    cudaError_t ie = ee == cudaSuccess ? cudaGraphInstantiate(&ge, g, 0) : ee;
    cudaError_t le = ie == cudaSuccess ? cudaGraphLaunch(ge, st) : ie;
    cudaError_t se = cudaStreamSynchronize(st); cudaMemcpy(&h, ok, 4, cudaMemcpyDeviceToHost);
    printf("   in a graph: capture %s, end %s, instantiate %s, launch %s, sync %s, ok %d\n", cudaGetErrorName(ce),
           cudaGetErrorName(ee), cudaGetErrorName(ie), cudaGetErrorName(le), cudaGetErrorName(se), h);
    cudaGetLastError();
  }
  return 0;
}
