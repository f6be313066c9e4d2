# Fixture for tests/diagnose/test_msgindex.py: release 0.2.0 of the same module (one message
# reworded, one new, lines shifted).
import logging
import warnings

logger = logging.getLogger(__name__)


class ParallelConfig:
    """Added in 0.2.0: a docstring that shifts every line below."""

    def verify(self, world_size: int, tp: int) -> None:
        if world_size % tp:
            msg = (f"World size ({world_size}) is not divisible by "
                   f"tensor_parallel_size ({tp}).")
            raise ValueError(msg)
        if tp > 16:
            raise ValueError(f"tensor_parallel_size={tp} is larger than one node allows")
        logger.warning("Using %d GPUs per node; expected %d", tp, 8)
        logger.info("Parallel config verified for %d ranks", world_size)

    def pipeline(self, pp: int) -> None:
        raise ValueError("Pipeline parallelism of " + str(pp) + " stages is unsupported here")

    def dcp(self, dcp: int) -> None:
        if dcp > 1:
            raise ValueError(f"decode_context_parallel_size={dcp} is not supported with this "
                             "attention backend")


def check_backend(name: str) -> None:
    raise NotImplementedError(
        "Attention backend {} is not supported on this platform".format(name))


def deprecated_flag() -> None:
    warnings.warn("The flag --old-parallel " "is deprecated and will " "be removed",
                  DeprecationWarning)
