"""hvd-cluster bench, TensorFlow: a CIFAR-style ResNet (Keras) trains on synthetic 32x32 images
with Horovod. Rank 0 prints its progress; after the warm-up steps every rank times the same
number of steps and prints its images/s; then rank 0 times allreduce per message size on the
same ranks. Output lines are parsed by `hvd-cluster bench` (same lines as bench_pytorch.py):

  HVD_BENCH_STEP phase=warmup|measure step=I steps=N elapsed=SECONDS      (rank 0)
  HVD_BENCH_RANK rank=R size=N host=H framework=tensorflow images_per_sec=X seconds=S
  HVD_BW size_mib=M ms=T algbw_mibps=A busbw_mibps=B ok=True|False         (rank 0, N > 1)
"""
import argparse
import os
import socket
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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

import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

hvd.init()
rank, size, host = hvd.rank(), hvd.size(), socket.gethostname()
# Ranks on one node share its cores.
threads = max(1, (os.cpu_count() or 1) // max(1, hvd.local_size()))
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(1)
layers = tf.keras.layers


def basic_block(x, filters, stride):
    y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
    y = layers.BatchNormalization()(y)
    y = layers.ReLU()(y)
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = layers.BatchNormalization()(y)
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
        shortcut = layers.BatchNormalization()(shortcut)
    return layers.ReLU()(layers.Add()([y, shortcut]))


def resnet(blocks):
    inputs = tf.keras.Input((IMAGE, IMAGE, 3))
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for stage, filters in enumerate([16, 32, 64]):
        for b in range(blocks):
            x = basic_block(x, filters, 2 if stage > 0 and b == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, layers.Dense(CLASSES)(x))


model = resnet(MODELS[args.model])
optimizer = tf.keras.optimizers.SGD(0.01 * size, momentum=0.9)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
tf.random.set_seed(rank)
images = tf.random.uniform([args.batch_size, IMAGE, IMAGE, 3])
labels = tf.random.uniform([args.batch_size], maxval=CLASSES, dtype=tf.int64)
# Every rank starts from rank 0's weights.
hvd.broadcast_variables(model.variables, root_rank=0)


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def progress(phase, step, steps):
    if rank == 0:
        print(f"HVD_BENCH_STEP phase={phase} step={step} steps={steps} "
              f"elapsed={time.perf_counter() - started:.1f}", flush=True)


for i in range(args.warmup):
    train_step().numpy()
    progress("warmup", i + 1, args.warmup)
t0 = time.perf_counter()
for i in range(args.steps):
    train_step().numpy()
    progress("measure", i + 1, args.steps)
seconds = time.perf_counter() - t0
print(f"HVD_BENCH_RANK rank={rank} size={size} host={host} framework=tensorflow "
      f"images_per_sec={args.batch_size * args.steps / seconds:.3f} seconds={seconds:.3f}", flush=True)

if size > 1:
    for mib in [int(m) for m in args.sizes_mib.split(",") if m]:
        t = tf.ones([mib * 1024 * 1024 // 4], tf.float32)
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
