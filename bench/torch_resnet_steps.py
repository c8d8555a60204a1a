# bench/torch_resnet_steps.py: PyTorch 1.13's training speed on ../shared/peers/scripts/fmnist.py's
# resnet at batch 128 on in-memory random data of Fashion-MNIST's shape (as `dtrain bench train`
# measures dtrain): SGD 0.01, momentum 0.9, cross-entropy; `--warmup` untimed steps, then
# `--repeats` runs of `--steps` steps; prints the median samples/s. Run as
# ../shared/peers/scripts/train_fmnist.py is run:
#   env OMP_NUM_THREADS=T OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_resnet_steps.py --threads T
# (train_fmnist.py times a whole epoch of the real data, 75 s at 1 thread; this takes seconds, so
# that it can alternate with `dtrain bench train` round by round on a busy machine.)
import argparse, os, sys, time, statistics
import torch, torch.nn as nn
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "peers", "scripts"))
import fmnist
ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--repeats", type=int, default=3)
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.set_num_interop_threads(1); torch.manual_seed(1)
model = fmnist.resnet()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
lossf = nn.CrossEntropyLoss()
xs = [torch.randn(128, 1, 28, 28) for _ in range(8)]
ys = [torch.randint(0, 10, (128,)) for _ in range(8)]
def run(n, k0):
    for s in range(n):
        i = (k0 + s) % 8
        opt.zero_grad(set_to_none=True)
        lossf(model(xs[i]), ys[i]).backward()
        opt.step()
run(a.warmup, 0)
rates = []
for r in range(a.repeats):
    t0 = time.perf_counter(); run(a.steps, r); rates.append(a.steps * 128 / (time.perf_counter() - t0))
print(f"torch resnet threads={a.threads} samples/s {statistics.median(rates):.0f} [{min(rates):.0f} - {max(rates):.0f}]")
