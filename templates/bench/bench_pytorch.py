"""hvd-cluster bench, PyTorch: a CIFAR-style ResNet (plain torch.nn, no torchvision) trains on
synthetic 32x32 images with Horovod. Rank 0 prints its progress; after the warm-up steps every
rank times the same number of steps and prints its images/s; then rank 0 times allreduce per
message size on the same ranks. Output lines are parsed by `hvd-cluster bench` (same lines as
bench_tensorflow.py):

  HVD_BENCH_STEP phase=warmup|measure step=I steps=N elapsed=SECONDS      (rank 0)
  HVD_BENCH_RANK rank=R size=N host=H framework=pytorch images_per_sec=X seconds=S
  HVD_BW size_mib=M ms=T algbw_mibps=A busbw_mibps=B ok=True|False         (rank 0, N > 1)
"""
import argparse
import os
import socket
import time

# name: basic blocks in each of the 3 stages (16, 32, 64 channels); depth = 6 * blocks + 2
MODELS = {"resnet8": 1, "resnet14": 2, "resnet20": 3}
IMAGE = 32
CLASSES = 10


def arguments():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="resnet8")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="steps before timing")
    p.add_argument("--sizes-mib", default="1,16", help="allreduce message sizes")
    p.add_argument("--run-id", default="", help="a word naming this run (to stop it)")
    return p.parse_args()


args = arguments()
started = time.perf_counter()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import horovod.torch as hvd  # noqa: E402

hvd.init()
rank, size, host = hvd.rank(), hvd.size(), socket.gethostname()
# Ranks on one node share its cores.
torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
torch.manual_seed(rank)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        stages, cin = [], 16
        for stage, cout in enumerate([16, 32, 64]):
            for b in range(blocks):
                stages.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


model = ResNet(MODELS[args.model])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
# Every rank starts from rank 0's weights and optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
images = torch.rand(args.batch_size, 3, IMAGE, IMAGE)
labels = torch.randint(0, CLASSES, (args.batch_size,))
model.train()


def train_step():
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()


def progress(phase, step, steps):
    if rank == 0:
        print(f"HVD_BENCH_STEP phase={phase} step={step} steps={steps} "
              f"elapsed={time.perf_counter() - started:.1f}", flush=True)


for i in range(args.warmup):
    train_step()
    progress("warmup", i + 1, args.warmup)
t0 = time.perf_counter()
for i in range(args.steps):
    train_step()
    progress("measure", i + 1, args.steps)
seconds = time.perf_counter() - t0
print(f"HVD_BENCH_RANK rank={rank} size={size} host={host} framework=pytorch "
      f"images_per_sec={args.batch_size * args.steps / seconds:.3f} seconds={seconds:.3f}", flush=True)

if size > 1:
    for mib in [int(m) for m in args.sizes_mib.split(",") if m]:
        t = torch.ones(mib * 1024 * 1024 // 4)
        hvd.allreduce(t, op=hvd.Sum, name=f"bench_warm_{mib}")
        rounds = 3
        t1 = time.perf_counter()
        for i in range(rounds):
            out = hvd.allreduce(t, op=hvd.Sum, name=f"bench_bw_{mib}_{i}")
        dt = (time.perf_counter() - t1) / rounds
        if rank == 0:
            busbw = mib / dt * 2 * (size - 1) / size
            print(f"HVD_BW size_mib={mib} ms={dt * 1000:.1f} algbw_mibps={mib / dt:.1f} "
                  f"busbw_mibps={busbw:.1f} ok={float(out[0]) == float(size)}", flush=True)
hvd.shutdown()
