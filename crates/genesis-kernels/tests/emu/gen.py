"""Makes the host-emulation source of kernels/attention.cu: the CUDA primitives (cp.async,
ldmatrix, mma, shared memory, global stores) replaced by emu_prims.h's, for attention_emu.cpp.
Usage: python3 gen.py kernels/attention.cu OUT.inc
"""
import sys

src = open(sys.argv[1]).read()
src = src.replace('#include <cuda_bf16.h>\n', '').replace('#include <cuda_fp16.h>\n', '')
a = src.index('__device__ __forceinline__ uint32_t smem_addr(const void* p) {')
b = src.index('// Byte offset of chunk c')
src = src[:a] + '#include "emu_prims.h"\n\n' + src[b:]
src = src.replace('extern __shared__ uint4 smem[];', 'uint4* smem = (uint4*)emu_smem_base();')
old = '*reinterpret_cast<uint32_t*>(p + dt * 8) = Ty<T>::pack(acc[dt][2 * h] * mul, acc[dt][2 * h + 1] * mul);'
assert old in src, "attention.cu's store changed: update gen.py"
src = src.replace(old, 'emu_store32(p + dt * 8, Ty<T>::pack(acc[dt][2 * h] * mul, acc[dt][2 * h + 1] * mul));')
open(sys.argv[2], 'w').write(src)
