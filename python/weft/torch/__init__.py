"""PyTorch layers on weft's vocabulary parallelism (needs torch; `import weft` does not).

- VocabParallelCrossEntropy: the output layer and softmax cross-entropy with the
  vocabulary sharded over a group; forward runs passes S and C1, backward T (and C2 for
  "naive" and "alg1").
- VocabParallelEmbedding: the input embedding sharded the same way.
- shard_vocab: this rank's padded shard of a whole [V, ...] tensor.
- pipeline_schedule: 1F1B, plain or interleaved, with the vocabulary passes placed on
  every stage (schedule.py).
- the torch.distributed backend "weft" (registered on import; weft.torch.distributed):
  `dist.init_process_group("weft")` under weftrun, DistributedDataParallel on weft;
  repair(), after a peer failure (is_peer_failure), gives the survivors' process group.
- ActivationOffload: the tensors saved for backward written to the SSD tier in the
  forward pass and read back ahead of need in backward (offload.py).
"""

import torch  # noqa: F401  (fails here, with ImportError, when PyTorch is missing)

from .cross_entropy import VocabParallelCrossEntropy, VocabParallelCrossEntropyFunction
from .embedding import VocabParallelEmbedding, VocabParallelEmbeddingFunction
from .offload import ActivationOffload, OffloadStats
from .schedule import check_schedule, pipeline_schedule
from .shard import shard_vocab

if torch.distributed.is_available():  # a torch built without it has no backends to add
    from . import distributed
    from .distributed import (ProcessGroupWeft, WeftStore, init_process_group,
                              is_peer_failure, repair)
    from .elastic import ElasticState

__all__ = ["VocabParallelCrossEntropy", "VocabParallelCrossEntropyFunction",
           "VocabParallelEmbedding", "VocabParallelEmbeddingFunction", "shard_vocab",
           "ActivationOffload", "OffloadStats",
           "pipeline_schedule", "check_schedule",
           "distributed", "ProcessGroupWeft", "WeftStore", "init_process_group",
           "is_peer_failure", "repair", "ElasticState"]
