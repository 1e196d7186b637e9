"""The neutral model layer: architectures, KV layer specs, weights, GPUs and their overheads, allocator replay."""
