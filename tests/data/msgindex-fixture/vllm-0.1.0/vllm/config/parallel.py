# Fixture for tests/diagnose/test_msgindex.py: the message shapes the extractor must read (our
# own text in vLLM's module layout; release 0.1.0).
import logging
import warnings

logger = logging.getLogger(__name__)


class ParallelConfig:
    def verify(self, world_size: int, tp: int) -> None:
        if world_size % tp:
            msg = (f"World size ({world_size}) is not divisible by "
                   f"tensor_parallel_size ({tp}).")
            raise ValueError(msg)
        if tp > 8:
            raise ValueError("tensor_parallel_size=%d exceeds the %s limit" % (tp, "node"))
        logger.warning("Using %d GPUs per node; expected %d", tp, 8)
        logger.info("Parallel config verified for %d ranks", world_size)

    def pipeline(self, pp: int) -> None:
        raise ValueError("Pipeline parallelism of " + str(pp) + " stages is unsupported here")


def check_backend(name: str) -> None:
    raise NotImplementedError(
        "Attention backend {} is not supported on this platform".format(name))


def deprecated_flag() -> None:
    warnings.warn("The flag --old-parallel " "is deprecated and will " "be removed",
                  DeprecationWarning)
