"""Distributed training: parallel degrees and meshes, process-group setup, sharded-grad helpers.

Only ``ParallelDims`` is exported here because it is torch-free; the torch modules
(``titan.distributed.process_group``) are imported where they are used.
"""

from titan.distributed.parallel_dims import ParallelDims

__all__ = ["ParallelDims"]
