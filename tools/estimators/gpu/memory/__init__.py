"""Peak GPU memory of a training step, white-box: fake-tensor trace + caching-allocator replay.

Heavy parts (torch) are imported by the submodules only: ``from
tools.estimators.gpu.memory.estimate import estimate_gpu_memory``.
"""
