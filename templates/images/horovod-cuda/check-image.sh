#!/bin/bash
# The CUDA image's own check, run as the last step of its build (no GPU needed, none used):
# a broken CUDA build fails the build. Output kept in /opt/hvd/check-image.txt.
#  1. tensorflow, torch, horovod.tensorflow, horovod.torch import; both frameworks and horovod
#     say they were built with CUDA (and horovod with NCCL, Gloo and MPI);
#  2. every CUDA library the frameworks load by name (TF dlopens them at GPU start) loads, and
#     cuDNN is the 8.6 TF 2.12 needs;
#  3. `horovodrun --check-build` lists NCCL among the tensor operations, Gloo and MPI;
#  4. ldd of horovod's and torch's shared objects: nothing missing but the driver's libcuda.so.1;
#  5. 2-rank Gloo jobs on CPU tensors (a torch and a TensorFlow allreduce) with horovodrun.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL=2
PY=${HVD_VENV:-/opt/hvd/venv}/bin/python
SP=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
fail() { echo "check-image: FAILED: $*" >&2; exit 1; }

echo "== 1. imports and build flags"
# horovod.torch before horovod.tensorflow: the other order aborts the process here
# ("random_device could not be read": torch's wheel is built with the old C++ ABI, TF's with the new)
$PY - <<'PY'
import torch
import horovod.torch as hvd
import tensorflow as tf
import horovod.tensorflow as htf
info = tf.sysconfig.get_build_info()
print("tensorflow", tf.__version__, "built with CUDA:", tf.test.is_built_with_cuda(),
      "cuda", info.get("cuda_version"), "cudnn", info.get("cudnn_version"))
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
      "cuda available here:", torch.cuda.is_available())
print("horovod.torch: cuda_built", hvd.cuda_built(), "nccl_built", hvd.nccl_built(),
      "gloo_built", hvd.gloo_built(), "mpi_built", hvd.mpi_built())
print("horovod.tensorflow: cuda_built", htf.cuda_built(), "nccl_built", htf.nccl_built())
assert tf.test.is_built_with_cuda(), "tensorflow is not a CUDA build"
assert torch.version.cuda, "torch is not a CUDA build"
assert torch.backends.cudnn.version() is not None and torch.backends.cudnn.version() >= 8600, "torch does not load cuDNN >= 8.6"
assert hvd.cuda_built() and htf.cuda_built(), "horovod is not built with CUDA"
assert hvd.nccl_built() and htf.nccl_built(), "horovod is not built with NCCL"
assert hvd.gloo_built() and hvd.mpi_built(), "horovod lacks Gloo or MPI"
PY

echo "== 2. the CUDA libraries load by name (ld.so.conf.d: $(tr '\n' ' ' < /etc/ld.so.conf.d/zz-hvd-cuda.conf))"
$PY - <<'PY'
import ctypes
names = ["libcudart.so.11.0", "libcublas.so.11", "libcublasLt.so.11", "libcufft.so.10", "libcurand.so.10",
         "libcusolver.so.11", "libcusparse.so.11", "libcudnn.so.8", "libnccl.so.2", "libnvrtc.so.11.2"]
for n in names:
    ctypes.CDLL(n)
cudnn = ctypes.CDLL("libcudnn.so.8")
cudnn.cudnnGetVersion.restype = ctypes.c_size_t
v = cudnn.cudnnGetVersion()
nccl = ctypes.CDLL("libnccl.so.2")
nv = ctypes.c_int()
assert nccl.ncclGetVersion(ctypes.byref(nv)) == 0
print("loaded:", " ".join(names))
print("cuDNN", v, "NCCL", nv.value)
assert v >= 8600, f"cuDNN {v} < 8.6 (TensorFlow 2.12 needs 8.6)"
PY
command -v ptxas > /dev/null && ptxas --version | tail -n 1

echo "== 3. horovodrun --check-build"
out=$(horovodrun --check-build)
echo "$out"
grep -q '\[X\] TensorFlow' <<< "$out" || fail "horovod without TensorFlow"
grep -q '\[X\] PyTorch' <<< "$out" || fail "horovod without PyTorch"
grep -q '\[X\] MPI' <<< "$out" || fail "horovod without MPI"
grep -q '\[X\] Gloo' <<< "$out" || fail "horovod without Gloo"
grep -q '\[X\] NCCL' <<< "$out" || fail "horovod without NCCL"

echo "== 4. ldd: horovod's and torch's shared objects"
find "$SP/horovod" "$SP/torch/lib" -name '*.so*' -type f > /tmp/objects
# (ldd fails on an object that is not dynamic: counted as a finding, not a crash of this script)
# (horovod's TensorFlow op library finds libtensorflow_{cc,framework}.so.2 in the process, loaded by
# `import tensorflow` first; for ldd, their folder is named)
{ LD_LIBRARY_PATH=$SP/tensorflow xargs -a /tmp/objects ldd 2>&1 || true; } > /tmp/ldd.txt
grep -q 'not a dynamic executable' /tmp/ldd.txt && fail "not dynamic: $(grep -B1 'not a dynamic' /tmp/ldd.txt)"
missing=$(awk '/not found/ {print $1}' /tmp/ldd.txt | sort | uniq -c)
echo "$(wc -l < /tmp/objects) objects; not found: ${missing:-nothing}"
[ -z "$missing" ] || echo "  needing libcuda.so.1 (the driver's, from the node at run time):" \
  $(awk '/^\// {f=$1} /libcuda.so.1 => not found/ {sub(/:$/, "", f); n=split(f, p, "/"); print p[n]}' /tmp/ldd.txt)
others=$(awk '$2 != "libcuda.so.1"' <<< "$missing")
[ -z "$others" ] || fail "libraries not found: $others"
for f in "$SP"/horovod/torch/mpi_lib_v2*.so "$SP"/horovod/tensorflow/mpi_lib*.so; do
  echo "$(basename "$f"): $(ldd "$f" | awk '/nccl|cuda|cudart/ {printf "%s ", $1 "->" $3}')"
done
rm -f /tmp/objects /tmp/ldd.txt

echo "== 5. 2-rank Gloo jobs on CPU tensors, one per framework"
# (one process initialising both horovod.torch and horovod.tensorflow segfaults here: one framework
# per job, as training jobs are)
cd /tmp
timeout 300 horovodrun -np 2 -H localhost:2 --gloo "$PY" -c '
import torch, horovod.torch as hvd
hvd.init()
t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="t")
print("rank", hvd.rank(), "of", hvd.size(), "torch allreduce", t.item(), flush=True)
' 2>&1 | grep -v '^20..-..-.. ' | tee /tmp/job.log
[ "$(grep -c 'of 2 torch allreduce 3.0' /tmp/job.log)" = 2 ] || fail "the 2-rank torch job did not finish on both ranks"
timeout 300 horovodrun -np 2 -H localhost:2 --gloo "$PY" -c '
import tensorflow as tf, horovod.tensorflow as hvd
hvd.init()
f = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum, name="f")
print("rank", hvd.rank(), "of", hvd.size(), "tf allreduce", float(f[0]), flush=True)
' 2>&1 | grep -v '^20..-..-.. ' | tee /tmp/job.log
[ "$(grep -c 'of 2 tf allreduce 3.0' /tmp/job.log)" = 2 ] || fail "the 2-rank TensorFlow job did not finish on both ranks"
rm -f /tmp/job.log
echo "check-image: OK"
