# Fixture (release 0.1.0): helpers whose name says warning or error, and a once-logger.
from vllm.logger import init_logger, print_warning_once

logger = init_logger(__name__)


class Runner:
    def _raise_error(self, text: str) -> None:
        raise RuntimeError(text)

    def start(self, ok: bool, gb: float) -> None:
        if not ok:
            self._raise_error(f"Worker failed to start after {gb:.1f} GiB were allocated")
        print_warning_once("Custom allreduce is disabled because this box has no NVLink")
        logger.warning_once("Falling back to eager mode for %s", "capture")
        what = "graph" if gb > 1 else "eager"
        logger.error("Could not run in %s mode", what)
        logger.exception("Unexpected failure in worker loop: %s", gb)
