"""The build: pyproject.toml says what the package is; this file only compiles its hot path.

The modules latency_proxy/base/build.py lists are compiled with mypyc when mypy (mypyc) and a
C compiler are there at build time; otherwise, or with LATENCY_PROXY_PURE=1, or when the
compilation fails, the package is built pure: the .py files always ship and always work.
"""

from __future__ import annotations

import glob
import os
import runpy
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = runpy.run_path(os.path.join(HERE, "latency_proxy", "base", "build.py"))
# the compiled modules' one shared library, latency_proxy/hot_path__mypyc.*.so
GROUP = "latency_proxy.hot_path"


def _note(message: str) -> None:
    print(f"latency-proxy build: {message}", file=sys.stderr)


class HotPathDistribution(Distribution):
    """Always has extensions to build (so the wheel is tagged for its platform); which ones,
    if any, is decided only when build_ext runs, not on every metadata step."""

    def has_ext_modules(self) -> bool:
        return True


# the commands that build the package; an editable install (editable_wheel) is not one of
# them: it runs the sources as they are edited, and an extension built from them would
# shadow every later edit. Metadata steps (egg_info, dist_info) finalize build_ext too, and
# running mypy for each of them would triple an install's time.
BUILDS = {"build", "build_ext", "bdist_wheel", "install", "bdist_egg"}


class BuildHotPath(build_ext):
    def finalize_options(self) -> None:
        if not self.distribution.ext_modules:
            if BUILDS.intersection(self.distribution.commands):
                self.distribution.ext_modules = _extensions()
            else:
                _note(f"{' '.join(self.distribution.commands)}: nothing compiled")
        super().finalize_options()

    def run(self) -> None:
        if not self.extensions:
            self._remove_compiled()
            return
        try:
            super().run()
        except Exception as exc:  # a compiler that fails: pure, as without one
            _note(f"compiling failed ({type(exc).__name__}: {exc}); building pure")
            self.extensions = []
            self._remove_compiled()

    def _remove_compiled(self) -> None:
        """A pure build leaves no extension behind: not one an earlier build left in build/
        (a wheel would ship it), nor, built in place, one beside the sources."""
        if getattr(self, "editable_mode", False):
            return
        root = HERE if self.inplace else self.build_lib
        suffixes = tuple(EXTENSION_SUFFIXES)
        for name in (*BUILD["COMPILED"], GROUP + "__mypyc"):
            base = os.path.join(root, *name.split("."))
            for path in glob.glob(glob.escape(base) + ".*"):
                if path.endswith(suffixes):
                    os.remove(path)


def _extensions() -> list:
    if BUILD["pure_requested"]():
        _note(f"{BUILD['PURE_ENV']} is set: building pure")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _note("mypy (mypyc) is not installed: building pure")
        return []
    if not _have_compiler():
        _note("no C compiler or Python headers: building pure")
        return []
    paths = [name.replace(".", "/") + ".py" for name in BUILD["COMPILED"]]
    return mypycify(paths, opt_level="3", debug_level="0", group_name=GROUP)


def _have_compiler() -> bool:
    """A C compiler on PATH and Python.h where the compiler will look for it."""
    from shutil import which

    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    include = sysconfig.get_paths()["include"]
    return which(compiler) is not None and os.path.isfile(os.path.join(include, "Python.h"))


setup(distclass=HotPathDistribution, cmdclass={"build_ext": BuildHotPath})
