"""TensorFlow settings the scripts apply before TensorFlow is imported.

Every entry point (the run_* scripts, extract_features.py, the benchmarks, the tests' conftest)
imports this module before any module that imports TensorFlow, because TensorFlow reads these
settings when it loads. A value the user set in the environment is kept.

- `TF_ENABLE_ONEDNN_OPTS=1`: oneDNN's CPU kernels. TensorFlow 2.21 turns them on by itself only on
  CPUs with AVX-512 VNNI, BF16 or AMX; elsewhere it runs its Eigen kernels, which the pip build
  compiles without AVX2/FMA. Measured on an AVX2 CPU with nothing else running
  (benchmarks/RESULTS.md), oneDNN was faster at every shape the scripts run: all-MiniLM-L6-v2
  inference at batch 32 by 4% (16 tokens) to 70% (256 tokens), fine-tuning 8 to 23%, SQuAD
  prediction 20%, a BERT-Base training step 36%. Outputs agree with the Eigen kernels' to float
  rounding (the 1e-5 tests pass either way). `TF_ENABLE_ONEDNN_OPTS=0` restores TensorFlow's choice.
"""
import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
