"""Elastic Horovod training: survives workers leaving and grows when new ones join.

    hvd-cluster run profiles/local.toml --elastic --send examples/elastic_train.py -- python elastic_train.py
    hvd-cluster scale profiles/local.toml --workers 3      # meanwhile: the job's world size grows

The state (model, optimizer, step) is committed every step and checkpointed to /shared, so a
reset after a lost worker resumes from the last commit, and a restarted job from the file.
"""
import json
import os
import socket
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

TOTAL = int(os.environ.get("TOTAL_STEPS", "200"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.5"))
CHECKPOINT = os.environ.get("CHECKPOINT", "/shared/elastic_checkpoint.json")
# Touch this file to end the job cleanly at the next step (all ranks agree through an allreduce).
STOP_FILE = os.environ.get("STOP_FILE", "/shared/elastic_stop")

hvd.init()
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)), tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(0.01)
x, y = tf.random.uniform([32, 4], seed=1), tf.random.uniform([32, 1], seed=2)


@tf.function
def train_step(allreduce=True):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    if allreduce:
        tape = hvd.DistributedGradientTape(tape)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


train_step(allreduce=False)  # creates the optimizer's slots before the state is synced

start = 0
if hvd.rank() == 0 and os.path.exists(STOP_FILE):
    os.remove(STOP_FILE)
if os.path.exists(CHECKPOINT):
    with open(CHECKPOINT) as f:
        start = json.load(f).get("step", 0)


@hvd.elastic.run
def train(state):
    while state.step < TOTAL:
        stop = 1.0 if hvd.rank() == 0 and os.path.exists(STOP_FILE) else 0.0
        if float(hvd.allreduce(tf.constant(stop), op=hvd.Sum, name="stop").numpy()) > 0:
            break
        loss = train_step()
        joined = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="joined").numpy())
        state.step += 1
        if hvd.rank() == 0:
            print(f"ELASTIC step={state.step} size={hvd.size()} joined={joined} loss={float(loss):.4f}", flush=True)
            with open(CHECKPOINT + ".tmp", "w") as f:
                json.dump({"step": state.step, "size": hvd.size(), "loss": float(loss)}, f)
            os.replace(CHECKPOINT + ".tmp", CHECKPOINT)
        state.commit()
        time.sleep(SLEEP)


state = hvd.elastic.TensorFlowKerasState(model, opt, step=start)
state.register_reset_callbacks([lambda: print(f"RESET rank={hvd.rank()} size={hvd.size()} host={socket.gethostname()}", flush=True)])
train(state)
print(f"ELASTIC_DONE rank={hvd.rank()} size={hvd.size()} host={socket.gethostname()} step={state.step}", flush=True)
