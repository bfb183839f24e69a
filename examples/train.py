"""A short real Horovod training job on synthetic data (Keras + Gloo allreduce).

    hvd-cluster run profiles/local.toml --send examples/train.py -- python train.py

Every rank trains the same small model on its own shard; gradients are averaged with
allreduce each step. Rank 0 prints the hosts that took part and the final loss, and writes
each step's loss for TensorBoard into the job's log folder (HVD_CLUSTER_LOG_DIR, which
`hvd-cluster run` sets; `hvd-cluster tensorboard` serves it).
"""
import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd_tf  # noqa: E402
import horovod.tensorflow.keras as hvd  # noqa: E402

hvd.init()
steps = int(os.environ.get("TRAIN_STEPS", "30"))
rng = np.random.default_rng(hvd.rank())
true_w = np.arange(1, 9, dtype=np.float32).reshape(8, 1)
x = rng.normal(size=(64 * steps, 8)).astype(np.float32)
y = x @ true_w + 0.01 * rng.normal(size=(64 * steps, 1)).astype(np.float32)

model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size()))
model.compile(optimizer=opt, loss="mse")


class LossForTensorBoard(tf.keras.callbacks.Callback):
    """Each step's loss as a TensorBoard scalar (rank 0 only: one run per job), written when
    training ends so that no step waits for the file."""

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = log_dir
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float((logs or {}).get("loss", 0.0)))

    def on_train_end(self, logs=None):
        writer = tf.summary.create_file_writer(self.log_dir)
        with writer.as_default():
            for step, loss in enumerate(self.losses):
                tf.summary.scalar("loss", loss, step=step)
        writer.flush()


callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
log_dir = os.environ.get("HVD_CLUSTER_LOG_DIR")
if hvd.rank() == 0 and log_dir:
    callbacks.append(LossForTensorBoard(log_dir))
history = model.fit(
    x, y, batch_size=64, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks,
)
loss = float(history.history["loss"][-1])
hosts = hvd_tf.allgather_object(socket.gethostname(), name="hosts")
weights = hvd_tf.allgather_object(float(np.sum(model.get_weights()[0])), name="w")
print(f"TRAIN_RANK rank={hvd.rank()} host={socket.gethostname()} loss={loss:.4f}", flush=True)
if hvd.rank() == 0:
    same = max(weights) - min(weights) < 1e-4
    print(f"TRAIN_DONE size={hvd.size()} hosts={sorted(set(hosts))} steps={steps} loss={loss:.4f} "
          f"weights_in_sync={same}", flush=True)
