// Host cost of kernel launches: plain, cluster attribute, programmatic (PDL) attribute, and pairs.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

struct Params { char pad[1024]; int x; };  // about SparseAttentionParams' size

__global__ void work_kernel(const __grid_constant__ Params p) {
  if (threadIdx.x == 0 && p.x == 12345) printf("x\n");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__global__ void dep_kernel(const __grid_constant__ Params p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && p.x == 12345) printf("y\n");
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main() {
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Params p{}; p.x = 1;
  auto launch = [&](void* fn, unsigned grid, unsigned block, int cluster, bool pdl) {
    cudaLaunchConfig_t c{}; c.gridDim = dim3(grid); c.blockDim = dim3(block); c.stream = s;
    cudaLaunchAttribute a[2]; int n = 0;
    if (cluster > 1) { a[n].id = cudaLaunchAttributeClusterDimension; a[n].val.clusterDim.x = cluster; a[n].val.clusterDim.y = 1; a[n].val.clusterDim.z = 1; ++n; }
    if (pdl) { a[n].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[n].val.programmaticStreamSerializationAllowed = 1; ++n; }
    c.attrs = a; c.numAttrs = n;
    return cudaLaunchKernelEx(&c, (void(*)(Params))fn, p);
  };
  struct Cfg { const char* name; int mode; };
  std::vector<Cfg> cfgs = {{"plain 132x384", 0}, {"cluster2 132x384", 1}, {"pdl dep 256x256", 2},
                           {"plain dep 256x256 (no pdl attr)", 3}, {"pair cluster + pdl dep", 4}, {"pair cluster + plain dep", 5},
                           {"pair plain + pdl dep", 6}};
  for (auto& cfg : cfgs) {
    for (int rep = 0; rep < 2; ++rep) {
      double best = 1e30;
      for (int round = 0; round < 5; ++round) {
        CK(cudaStreamSynchronize(s));
        const int calls = 30;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          switch (cfg.mode) {
            case 0: CK(launch((void*)work_kernel, 132, 384, 1, false)); break;
            case 1: CK(launch((void*)work_kernel, 132, 384, 2, false)); break;
            case 2: CK(launch((void*)dep_kernel, 256, 256, 1, true)); break;
            case 3: CK(launch((void*)dep_kernel, 256, 256, 1, false)); break;
            case 4: CK(launch((void*)work_kernel, 132, 384, 2, false)); CK(launch((void*)dep_kernel, 256, 256, 1, true)); break;
            case 5: CK(launch((void*)work_kernel, 132, 384, 2, false)); CK(launch((void*)dep_kernel, 256, 256, 1, false)); break;
            case 6: CK(launch((void*)work_kernel, 132, 384, 1, false)); CK(launch((void*)dep_kernel, 256, 256, 1, true)); break;
          }
          CK(cudaGetLastError());
        }
        auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
      }
      CK(cudaStreamSynchronize(s));
      printf("LAUNCH_COST %-36s rep %d: %.2f us per iteration\n", cfg.name, rep, best);
    }
  }
  return 0;
}
