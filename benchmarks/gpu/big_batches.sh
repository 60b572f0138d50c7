# The big-batch Shapes recipes on a GPU, one after another: shapes_soft_gpu (batch 320)
# pre-trains the Shapes CNN, and shapes_soft_b1024 and shapes_soft_b2048 start from its
# world, CNN and cached features (copied with their times, so the cache stays valid): the
# rows differ only in the decoder's recipe.
#   source .gpu/go/install.sh && bash benchmarks/gpu/big_batches.sh OUT_DIR [--set ...]
# OUT_DIR gets each run's log, history.json and test predictions, and times.txt (the
# wall seconds of each training run). Extra arguments go to every `keras-saat train`.
set -u
out=$1; shift
mkdir -p "$out"
work=$(mktemp -d)
export TF_FORCE_GPU_ALLOW_GROWTH=true
for recipe in shapes_soft_gpu shapes_soft_b1024 shapes_soft_b2048; do
  dir=$work/$recipe
  if [ "$recipe" != shapes_soft_gpu ]; then
    mkdir -p "$dir"
    first=$work/shapes_soft_gpu
    cp -rp "$first/data" "$first/features" "$first/backbone.json" "$first/backbone.weights.h5" "$dir/"
  fi
  start=$(date +%s)
  python3 -m keras_saat.cli train --config "$recipe" --workdir "$dir" "$@" > "$out/$recipe.log" 2>&1
  status=$?
  echo "$recipe $(( $(date +%s) - start )) s, exit $status" >> "$out/times.txt"
  cp "$dir/history.json" "$out/history_$recipe.json" 2>/dev/null
  cp "$dir/eval/test/predictions.json" "$out/predictions_$recipe.json" 2>/dev/null
  tail -3 "$out/$recipe.log"
done
cat "$out/times.txt"
