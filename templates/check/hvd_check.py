"""hvd-cluster acceptance check: every rank allreduces a known tensor and reports its host and
the controller Horovod runs on (mpi or gloo);
rank 0 times allreduce for a few message sizes. Output lines are parsed by `hvd-cluster check`.
TensorFlow where the image has it (our images), else PyTorch (a user's image may carry only
one); never both in one process (their Horovod modules clash)."""
import os
import socket
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
try:
    import tensorflow as tf  # noqa: E402
    import horovod.tensorflow as hvd  # noqa: E402

    def filled(n, v):
        return tf.fill([n], float(v))
except ImportError:
    import torch  # noqa: E402
    import horovod.torch as hvd  # noqa: E402

    def filled(n, v):
        return torch.full([n], float(v))

hvd.init()
rank, size, host = hvd.rank(), hvd.size(), socket.gethostname()
value = hvd.allreduce(filled(4, rank + 1), op=hvd.Sum, name="known").numpy()
expected = size * (size + 1) / 2
controller = "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "none"
print(f"HVD_RANK rank={rank} size={size} host={host} sum={value[0]:g} expected={expected:g} "
      f"ok={bool(np.allclose(value, expected))} controller={controller}", flush=True)
for mib in [int(m) for m in os.environ.get("HVD_CHECK_SIZES_MIB", "1,16,64").split(",") if m]:
    t = filled(mib * 1024 * 1024 // 4, 1)
    hvd.allreduce(t, op=hvd.Sum, name=f"warm_{mib}")
    iters = 3
    t0 = time.perf_counter()
    for i in range(iters):
        out = hvd.allreduce(t, op=hvd.Sum, name=f"bw_{mib}_{i}")
    dt = (time.perf_counter() - t0) / iters
    if rank == 0:
        busbw = mib / dt * 2 * (size - 1) / size if size > 1 else 0.0
        print(f"HVD_BW size_mib={mib} ms={dt * 1000:.1f} algbw_mibps={mib / dt:.1f} busbw_mibps={busbw:.1f} "
              f"ok={float(out[0]) == float(size)}", flush=True)
