# Fixture (release 0.1.0): a weight loader's messages.
import logging

logger = logging.getLogger(__name__)


def load_weights(path: str) -> None:
    err = "Cannot find any model weights in " + str(path)
    err += " (expected *.safetensors)"
    try:
        open(path)
    except OSError as e:
        raise RuntimeError(err) from e


def iterate(names: list[str]) -> None:
    for n in names:
        if not n:
            logger.error("Empty weight name at position %d of %d", 0, len(names))
        assert n.isidentifier(), f"Weight name {n!r} is not an identifier"
    raise ValueError
