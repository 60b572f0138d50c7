# Source in a device call after the TensorFlow wheel's parts are in /tmp/parts (README.md).
# Installs once per machine into /tmp/site, then sets the environment for TensorFlow 2.21's
# CUDA 12 build on a CUDA 13 machine.
if [ ! -d /tmp/site/tensorflow ]; then
  cat /tmp/parts/tfpart_* > /tmp/tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site /tmp/tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl .whl/small/*.whl
  PYTHONPATH=/tmp/site python3 .whl/small/cuda12_links.py /tmp/cuda12 > /tmp/links.txt
fi
export PYTHONPATH=/tmp/site:$PWD${SHIM:+:$SHIM}
export LD_LIBRARY_PATH=$(sed -n 's/^LD_DIRS=//p' /tmp/links.txt):/usr/local/cuda/lib64
export XLA_FLAGS="--xla_gpu_cuda_data_dir=/usr/local/cuda ${XLA_EXTRA:-}"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1
