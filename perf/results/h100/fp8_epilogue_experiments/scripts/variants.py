from scalemm.cutlass_kernels import GemmConfig as G
C = lambda n, **k: G(128, n, 128, 2, 1, "cooperative", **k)
P = lambda n, **k: G(128, n, 128, 2, 1, "pingpong", **k)
FAST = {
    "c256": C(256), "c256_e4": C(256, epilogue_stages=4), "c256_e9": C(256, epilogue_stages=9),
    "c192": C(192), "c192_e7": C(192, epilogue_stages=7),
    "c128": C(128), "c128_e5": C(128, epilogue_stages=5),
    "p128": P(128), "p128_e9": P(128, epilogue_stages=9),
    "p192": P(192), "p192_e13": P(192, epilogue_stages=13),
}
FULL = {
    "f192o": C(192, promotion_chunks=2, promotion_overlap=True),
    "f192o_e7": C(192, promotion_chunks=2, promotion_overlap=True, epilogue_stages=7),
    "f256": C(256, promotion_chunks=2), "f256_e9": C(256, promotion_chunks=2, epilogue_stages=9),
    "f128o": C(128, promotion_chunks=2, promotion_overlap=True),
    "f128o_e5": C(128, promotion_chunks=2, promotion_overlap=True, epilogue_stages=5),
}
