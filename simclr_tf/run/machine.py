"""The CPU kind a run or a measurement is on (TF-free: read from /proc/cpuinfo).

The same command gives other digits on each CPU kind (oneDNN picks its kernels by the
instruction sets it finds), and other speeds: every measurement names the kind it was
made on, by these flags. A CPU "computes bfloat16 natively" when it has AVX512_BF16
(AMD EPYC Zen 4 and later, Intel Cooper Lake and later) or AMX (Intel Sapphire Rapids
and later); elsewhere oneDNN emulates bfloat16, slower than float32
(docs/performance.md).
"""
import os
import platform

# The instruction sets that change TensorFlow's CPU kernels, in the order they are named.
KIND_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
# The flags by which a CPU computes bfloat16 natively, the one named first preferred.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_info(path="/proc/cpuinfo"):
    """(model name, set of flags) of the first CPU listed in `path`; ("unknown CPU",
    empty set) where there is no such file (not Linux)."""
    model, flags = None, set()
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("model name") and model is None:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                if model is not None and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or "unknown CPU", flags


def cpu_kind(path="/proc/cpuinfo"):
    """e.g. "AMD EPYC, 2 cores, avx2/avx512f/avx512_vnni/avx512_bf16"; the SIMD part
    is "no AVX2" on older CPUs. `ONEDNN_MAX_CPU_ISA`, which caps what oneDNN uses, is
    named when set."""
    model, flags = cpu_info(path)
    simd = "/".join(f for f in KIND_FLAGS if f in flags) or "no AVX2"
    kind = f"{model}, {os.cpu_count()} cores, {simd}"
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"{kind}, ONEDNN_MAX_CPU_ISA={cap}" if cap else kind


def native_bfloat16(path="/proc/cpuinfo"):
    """The flag by which this CPU computes bfloat16 natively (amx_bf16 before
    avx512_bf16), or None; None too when ONEDNN_MAX_CPU_ISA caps oneDNN below it."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap and not (cap.startswith("AVX512_CORE_BF16") or cap.startswith("AVX512_CORE_AMX")
                    or cap in ("ALL", "AVX10_1_512", "AVX10_1_512_AMX",
                               "AVX10_1_512_AMX_FP16", "AVX512_CORE_FP16")):
        return None
    _, flags = cpu_info(path)
    return next((flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags), None)


# What --mixed_precision=bfloat16 gained on a CPU that computes it natively, measured
# side by side (docs/performance.md, "bfloat16 on a CPU"): the hint quotes it.
BFLOAT16_HINT = (
    "this CPU computes bfloat16 natively ({flag}): --mixed_precision=bfloat16 trains "
    "about {speedup} faster here, with other digits and the same accuracy within the "
    "spread of seeds (docs/performance.md#bfloat16-on-a-cpu).")
BFLOAT16_SPEEDUP = "1.3-1.6x"


def bfloat16_hint(*, mixed_precision, given, all_cpu, path="/proc/cpuinfo"):
    """The one-line hint a new training run prints where bfloat16 would help and was
    not chosen, or None: float32 (`mixed_precision` 'none') not given explicitly
    (`given`: the user chose it), every replica on a CPU (`all_cpu`:
    `preflight.all_cpu(strategy)`), and the CPU computes bfloat16 natively."""
    if mixed_precision != "none" or given or not all_cpu:
        return None
    flag = native_bfloat16(path)
    if flag is None:
        return None
    return BFLOAT16_HINT.format(flag=flag, speedup=BFLOAT16_SPEEDUP)
