"""Host time of the NVFP4 dispatch rules that scalemm.gemm asks for a dense NVFP4 call without a config
(default_nvfp4_skinny_config, default_nvfp4_config, nvfp4_w4a16_on_a, default_nvfp4_w4a16_on_a_config), cached per
shape and, for comparison in the same process, with the caches cleared before every call. No GPU needed:

    python perf/nvfp4_dispatch_host.py
"""
import timeit

from scalemm.cutlass_kernels.configs import sm90

POINTS = {"MiniCPM3 kv_a, 12000 tokens": (12000, 288, 2560), "DeepSeek-V3 kv_a, 4096 tokens": (4096, 576, 7168),
          "4096^3": (4096, 4096, 4096), "16 tokens, 4096^2": (16, 4096, 4096)}


def dispatch(M, N, K, num_sms=sm90.REFERENCE_SMS):
    """What gemm_nvfp4 asks the configs for bf16 activations and no config."""
    if sm90.default_nvfp4_skinny_config(M, N, K, nvfp4_activations=False, num_sms=num_sms) is not None:
        return
    sm90.default_nvfp4_config(M, N, K, num_sms=num_sms)
    if sm90.nvfp4_w4a16_on_a(M, N, K, num_sms=num_sms):
        sm90.default_nvfp4_w4a16_on_a_config(M, N, K, num_sms=num_sms)


def uncached(M, N, K):
    sm90.clear_dispatch_caches()
    dispatch(M, N, K)


def main():
    print(f"{'point':32s}{'cached us':>12s}{'uncached us':>14s}")
    for name, p in POINTS.items():
        t = {f.__name__: min(timeit.repeat(lambda f=f: f(*p), number=500, repeat=5)) / 500 * 1e6
             for f in (dispatch, uncached)}
        print(f"{name:32s}{t['dispatch']:12.1f}{t['uncached']:14.1f}")


if __name__ == "__main__":
    main()
