"""NCCL's result codes and the words NCCL and PyTorch print for each, with the level each reaches the room at.

Facts from NVIDIA's documentation and NCCL's source (written out here, not copied):
- ncclResult_t (numbers, meaning): https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html
  (ncclRemoteError and ncclInProgress since 2.13/2.14: https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2181/
  user-guide/docs/api/types.html)
- the strings ncclGetErrorString returns ("unhandled cuda error", "unhandled system error", "internal error",
  "invalid argument", "invalid usage", "remote process exited or there was a network error"), src/init.cc of
  https://github.com/NVIDIA/nccl (2.18-2.28), as PyTorch prints them in ``NCCL error in: ..., <string>, NCCL version``

Level: ncclRemoteError is a lost peer (NCCL_PEER_LOST, P0); a failed CUDA or system call and an internal check are
NCCL_ERROR (P0: the communicator is dead and the node or fabric is the usual cause); an invalid argument or usage is
the program's own bug (PROGRAM_ERROR, P1); ncclInProgress is not a failure.
"""

PEER, NCCL_ERR, PROGRAM = "peer", "nccl", "program"

# (number, name, the string ncclGetErrorString gives (its first words, before "(run with ..."), class or None)
TABLE = (
    (1, "ncclUnhandledCudaError", "unhandled cuda error", NCCL_ERR),
    (2, "ncclSystemError", "unhandled system error", NCCL_ERR),
    (3, "ncclInternalError", "internal error", NCCL_ERR),
    (4, "ncclInvalidArgument", "invalid argument", PROGRAM),
    (5, "ncclInvalidUsage", "invalid usage", PROGRAM),
    (6, "ncclRemoteError", "remote process exited or there was a network error", PEER),
    (7, "ncclInProgress", "NCCL operation in progress", None),
)
BY_NUMBER = {row[0]: row for row in TABLE}
BY_NAME = {row[1].lower(): row for row in TABLE}
BY_STRING = {row[2].lower(): row for row in TABLE}
