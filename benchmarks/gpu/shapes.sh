# The Shapes world on the GPU: the demo recipe (batch 64) and shapes_soft_gpu (batch 320,
# per-image batches, bfloat16), run side by side (their wall times overlap: see the logs).
source benchmarks/gpu/env.sh
export TF_FORCE_GPU_ALLOW_GROWTH=true
python3 -m keras_saat.cli train --config shapes_soft --workdir /tmp/w64 > $OUT/shapes_soft.log 2>&1 &
first=$!
python3 -m keras_saat.cli train --config shapes_soft_gpu --workdir /tmp/w320 > $OUT/shapes_soft_gpu.log 2>&1
wait $first
for w in w64 w320; do
  cp /tmp/$w/eval/test/predictions.json $OUT/predictions_$w.json
  cp /tmp/$w/history.json $OUT/history_$w.json
done
tail -5 $OUT/shapes_soft.log $OUT/shapes_soft_gpu.log
