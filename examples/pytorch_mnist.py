"""Data-parallel PyTorch training with Horovod, MNIST-style: 28x28 grey images of 10 classes.

    hvd-cluster run profiles/local-pytorch.toml --send examples/pytorch_mnist.py -- python pytorch_mnist.py
    # or, inside the master's container, as the tutorials write it:
    horovodrun -np 3 --hostfile /horovod/generated/hostfile --mpi-args "--display-map" \\
        bash -c 'python /shared/pytorch_mnist.py'

The nodes have no internet, so the data set is generated (once, by rank 0, with a fixed seed)
onto /shared: every class is a random 28x28 prototype, every image one prototype plus noise,
a task a small network learns within a few epochs. Every rank prints its rank and host; rank
0 prints the epoch's loss and accuracy averaged over all ranks (an allreduce).
"""
import argparse
import os
import socket
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import horovod.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--data-dir", default="/shared/data/mnist-synthetic")
parser.add_argument("--epochs", type=int, default=int(os.environ.get("EPOCHS", "5")))
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.02)
parser.add_argument("--train-size", type=int, default=9000)
args = parser.parse_args()

hvd.init()
torch.manual_seed(1234)
# a few cores per node: one thread per rank keeps the ranks from fighting over them
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
rank, size, host = hvd.rank(), hvd.size(), socket.gethostname()
print(f"PT_RANK rank={rank} size={size} local_rank={hvd.local_rank()} host={host} "
      f"torch={torch.__version__}", flush=True)


def make_data(path, n, seed):
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(7))
    labels = torch.randint(0, 10, (n,), generator=g)
    images = prototypes[labels] + 0.6 * torch.randn(n, 1, 28, 28, generator=g)
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save({"images": images, "labels": labels}, tmp)
    os.replace(tmp, path)


def load(path, wait=120.0):
    deadline = time.time() + wait
    while not os.path.exists(path):  # another node's write may take a moment to show over NFS
        if time.time() > deadline:
            raise SystemExit(f"{path} did not appear on {host}")
        time.sleep(0.5)
    d = torch.load(path)
    return torch.utils.data.TensorDataset(d["images"], d["labels"])


train_file = os.path.join(args.data_dir, "train.pt")
test_file = os.path.join(args.data_dir, "test.pt")
if rank == 0:
    os.makedirs(args.data_dir, exist_ok=True)
    if not os.path.exists(train_file):
        make_data(train_file, args.train_size, seed=1)
        make_data(test_file, args.train_size // 6, seed=2)
hvd.allreduce(torch.tensor(0.0), name="data_ready")  # a barrier: rank 0 has written the data
train_set, test_set = load(train_file), load(test_file)

train_sampler = torch.utils.data.distributed.DistributedSampler(train_set, num_replicas=size, rank=rank)
test_sampler = torch.utils.data.distributed.DistributedSampler(test_set, num_replicas=size, rank=rank)
train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=256, sampler=test_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5)
        self.conv2 = nn.Conv2d(8, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


model = Net()
# the usual Horovod recipe: scale the learning rate by the number of ranks, wrap the optimizer,
# start every rank from rank 0's weights and optimizer state
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     op=hvd.Average)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def average(value, name):
    return hvd.allreduce(torch.tensor(float(value)), name=name, op=hvd.Average).item()


for epoch in range(1, args.epochs + 1):
    model.train()
    train_sampler.set_epoch(epoch)
    total, batches = 0.0, 0
    for images, labels in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        total, batches = total + loss.item(), batches + 1
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        for images, labels in test_loader:
            correct += (model(images).argmax(1) == labels).sum().item()
            seen += len(labels)
    loss = average(total / max(batches, 1), f"loss_{epoch}")
    accuracy = average(correct / max(seen, 1), f"accuracy_{epoch}")
    if rank == 0:
        print(f"PT_EPOCH epoch={epoch} loss={loss:.4f} accuracy={accuracy:.3f} size={size}", flush=True)

print(f"PT_DONE rank={rank} host={host}", flush=True)
