"""The local engine: continuous batching and CPU kernels for decoder models run in
process by the transformers backend (README.md beside this file)."""
