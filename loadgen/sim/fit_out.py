"""The fit's outputs, checked before any work: a fit takes seconds to minutes, and finding
then that its file cannot be written, or that it would replace the capture it read, loses
both the work and the input.

The fitted preset goes to --out and fit.json beside it. Neither may be an input file nor a
file inside an input directory; --out may not be named fit.json (the summary would replace
it) nor be a directory; its folder is created as loadgen's --out is, and a file is made and
removed there to prove it can be written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

SUMMARY = "fit.json"


def prepare(out: str, sources: Sequence[str]) -> tuple[Path, Path]:
    """(the preset's path, fit.json's) once both can be written without touching an input;
    ValueError naming --out and the problem."""
    preset = Path(out)
    summary = preset.parent / SUMMARY
    if preset.name == SUMMARY:
        raise ValueError(f"--out {out}: {SUMMARY} is written beside the preset; name it otherwise")
    if preset.is_dir():
        raise ValueError(f"--out {out}: a directory; give the fitted preset's file name")
    for written in (preset, summary):
        if source := _input_at(written, sources):
            raise ValueError(f"--out {out}: writing {written} would replace the input {source}")
    try:
        preset.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=preset.parent):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    return preset, summary


def _input_at(written: Path, sources: Sequence[str]) -> str | None:
    """The source that `written` is, or lies inside of; None when it is none of them."""
    target = written.resolve()
    for source in sources:
        path = Path(source).resolve()
        if target == path or (path.is_dir() and target.parent == path and target.exists()):
            return source
    return None
