# Sourced by the benchmark scripts: the CPU's name for the reports (MT_CPU, exported: bench/gpt,
# bench/sgemm and the report scripts print it), where this machine's OpenMP OpenBLAS is (by the
# compiler's multiarch triplet, as the Makefile finds it) and PyTorch's best kernels on this CPU
# (ATEN_CPU_CAPABILITY: avx512 where the CPU has AVX512F, BW, VL and DQ, which ATen's avx512
# kernels need; avx2 with AVX2 and FMA; else default: a capability the CPU lacks dies with
# SIGILL). TORCH_BEST is the environment of torch's best setting, for `env $TORCH_BEST python3 ...`.
BLAS=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
# x86's /proc/cpuinfo names the model; aarch64's gives part numbers, which lscpu names
MT_CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
[ -n "$MT_CPU" ] || MT_CPU=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' |
    head -n 1)
export MT_CPU="${MT_CPU:-$(uname -m)}"
if cpu_has avx512f && cpu_has avx512bw && cpu_has avx512vl && cpu_has avx512dq; then
    TORCH_ISA=avx512
elif cpu_has avx2 && cpu_has fma; then
    TORCH_ISA=avx2
else
    TORCH_ISA=default
fi
TORCH_BEST="LD_LIBRARY_PATH=$BLAS ATEN_CPU_CAPABILITY=$TORCH_ISA"
