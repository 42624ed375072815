import os, sys, torch
sys.path.insert(0, "perf")
from gemm_sweep import bench
H, G = 1024, 128
h = torch.rand(H, G, device="cuda"); ht = h.t().contiguous(); cur = torch.rand(G, device="cuda")
h0 = torch.rand(H, device="cuda"); c0 = torch.rand((), device="cuda")
out = torch.empty(G, device="cuda")
fns = {
  "[H,G].amax(0)": lambda i: h.amax(0),
  "[G,H].amax(1)": lambda i: ht.amax(1),
  "[H,G] cat+copy": lambda i: h.copy_(torch.cat((cur[None], h[:-1]))),
  "[G,H] cat+copy": lambda i: ht.copy_(torch.cat((cur[:, None], ht[:, :-1]), 1)),
  "[H] amax": lambda i: h0.amax(0),
  "[H] cat+copy": lambda i: h0.copy_(torch.cat((c0[None], h0[:-1]))),
  "empty launch (zero_)": lambda i: out.zero_(),
}
for k, v in bench(fns, 1).items():
    print(f"{k:24s} {v:8.2f} us")
