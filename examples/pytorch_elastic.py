"""Elastic PyTorch training with Horovod, ResNet-style: survives workers leaving, grows when
new ones join.

    hvd-cluster run profiles/local-pytorch.toml --elastic --send examples/pytorch_elastic.py -- \\
        python pytorch_elastic.py --train-dir /shared/data/synthetic-images/train \\
        --val-dir /shared/data/synthetic-images/val
    hvd-cluster scale profiles/local-pytorch.toml --workers 3   # meanwhile: the world grows
    # or, inside the master's container, as the tutorials write it:
    horovodrun -np 2 --min-np 1 --max-np 4 --host-discovery-script /horovod/generated/discoverHosts.sh \\
        bash -c 'python /shared/pytorch_elastic.py --train-dir=... --val-dir=... --batch-size=32'

The nodes have no internet: the images (3x32x32, 10 classes, each class a random prototype plus
noise) are generated into --train-dir / --val-dir with a fixed seed by whichever rank finds
them missing (the same bytes from any rank, written atomically). Model, optimizer, sampler
position, epoch and step live in an hvd.elastic.TorchState committed every step: a reset after
a lost or added worker resumes from the last commit. Rank 0 also writes the step to a JSON
checkpoint on /shared, where a restarted job resumes from.
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import horovod.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--train-dir", default="/shared/data/synthetic-images/train")
parser.add_argument("--val-dir", default="/shared/data/synthetic-images/val")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--base-lr", type=float, default=0.0125)
parser.add_argument("--total-steps", type=int, default=int(os.environ.get("TOTAL_STEPS", "300")))
parser.add_argument("--step-sleep", type=float, default=float(os.environ.get("STEP_SLEEP", "0")))
parser.add_argument("--checkpoint", default=os.environ.get("CHECKPOINT", "/shared/elastic_checkpoint.json"))
# Touch this file to end the job cleanly at the next step (all ranks agree through an allreduce).
parser.add_argument("--stop-file", default=os.environ.get("STOP_FILE", "/shared/elastic_stop"))
args = parser.parse_args()

torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
host = socket.gethostname()


def data(directory, n, seed):
    path = os.path.join(directory, "images.pt")
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        g = torch.Generator().manual_seed(seed)
        prototypes = torch.rand(10, 3, 32, 32, generator=torch.Generator().manual_seed(11))
        labels = torch.randint(0, 10, (n,), generator=g)
        images = prototypes[labels] + 0.8 * torch.randn(n, 3, 32, 32, generator=g)
        tmp = f"{path}.tmp-{host}-{os.getpid()}"
        torch.save({"images": images, "labels": labels}, tmp)
        os.replace(tmp, path)
    d = torch.load(path)
    return torch.utils.data.TensorDataset(d["images"], d["labels"])


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layers = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


hvd.init()
torch.manual_seed(42)
train_set = data(args.train_dir, 4096, seed=1)
val_set = data(args.val_dir, 512, seed=2)

model = ResNet()
optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
train_sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True)
train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)

start = 0
if os.path.exists(args.checkpoint):
    with open(args.checkpoint) as f:
        start = json.load(f).get("step", 0)
if hvd.rank() == 0 and os.path.exists(args.stop_file):
    os.remove(args.stop_file)


def validate():
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(hvd.rank() * 64, len(val_set), hvd.size() * 64):
            images, labels = val_set[lo:lo + 64]
            correct += (model(images).argmax(1) == labels).sum().item()
    model.train()
    return hvd.allreduce(torch.tensor(float(correct)), op=hvd.Sum, name="val_correct").item() / len(val_set)


def stop_requested():
    stop = 1.0 if hvd.rank() == 0 and os.path.exists(args.stop_file) else 0.0
    return hvd.allreduce(torch.tensor(stop), op=hvd.Sum, name="stop").item() > 0


@hvd.elastic.run
def train(state):
    model.train()
    while state.step < args.total_steps:
        # the sampler yields only what this epoch has not yet processed (after a reset too):
        # `idx` counts batches since the last reset, as record_batch wants it
        for idx, (images, labels) in enumerate(train_loader):
            if state.step >= args.total_steps or stop_requested():
                return
            # the learning rate follows the world size (the usual Horovod scaling)
            for group in optimizer.param_groups:
                group["lr"] = args.base_lr * hvd.size()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            loss = hvd.allreduce(loss.detach(), name="loss").item()
            state.step += 1
            state.batch += 1
            state.train_sampler.record_batch(idx, args.batch_size)
            if hvd.rank() == 0:
                print(f"ELASTIC step={state.step} size={hvd.size()} epoch={state.epoch} loss={loss:.4f}",
                      flush=True)
                with open(args.checkpoint + ".tmp", "w") as f:
                    json.dump({"step": state.step, "size": hvd.size(), "loss": loss}, f)
                os.replace(args.checkpoint + ".tmp", args.checkpoint)
            state.commit()
            if args.step_sleep:
                time.sleep(args.step_sleep)
        accuracy = validate()
        if hvd.rank() == 0:
            print(f"ELASTIC_EPOCH epoch={state.epoch} step={state.step} val_accuracy={accuracy:.3f}", flush=True)
        state.epoch += 1
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch)
        state.commit()


def on_reset():
    print(f"RESET rank={hvd.rank()} size={hvd.size()} host={host}", flush=True)


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, train_sampler=train_sampler,
                               epoch=0, batch=0, step=start)
state.register_reset_callbacks([on_reset])
train(state)
print(f"ELASTIC_DONE rank={hvd.rank()} size={hvd.size()} host={host} step={state.step}", flush=True)
