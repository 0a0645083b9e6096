// A kernel image holding only sm_80 machine code and no PTX, used by the tests to check that
// loading it on a newer GPU gives a typed error naming the architecture. Built with:
//   nvcc -fatbin -gencode=arch=compute_80,code=sm_80 -o probe_sm80.fatbin probe_sm80.cu
extern "C" __global__ void probe(int *p) { *p = 1; }
