"""Process-wide runtime settings, in one place.

    memory        glibc malloc settings for TensorFlow's large CPU tensors (`tune_malloc`)
    cpu_kernels   oneDNN's CPU kernels (`prefer_onednn`, `onednn_enabled`)
    precision     mixed-precision policies, TF32, the CPU's bfloat16 support
    xla           XLA's persistent compilation cache and GPU compiler flags
    tf_logs       TensorFlow's C++ start-up lines kept off a command's stderr

Most are read once, before or when TensorFlow starts, so the command line sets them
first; none of these modules imports TensorFlow when it is imported.
"""
