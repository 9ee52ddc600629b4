"""vrampool's PyTorch allocator: its C++ sources (``csrc/``), compiled against the installed PyTorch with
``torch.utils.cpp_extension`` the first time it is needed, then loaded from PyTorch's extension cache."""

from __future__ import annotations

import glob
import hashlib
import os
import pathlib
import shutil
import sys
import sysconfig

from ._library import PACKAGE_DIR, VrampoolError, load, loaded_file

#: The PyTorch releases (major.minor) whose allocator interface the C++ sources implement.
SUPPORTED_TORCH = ("2.11",)

#: The C++ sources, in ``csrc/`` beside this module.
SOURCES = ("allocation.cpp", "private_pools.cpp", "history.cpp", "module.cpp")
CSRC = PACKAGE_DIR / "csrc"

_module = None


def check_torch_version(version: str) -> None:
    """Raises ``VrampoolError`` naming ``version`` where it is not one of ``SUPPORTED_TORCH``."""
    release = version.split("+", 1)[0]
    major_minor = ".".join(release.split(".")[:2])
    if major_minor not in SUPPORTED_TORCH:
        raise VrampoolError(
            f"vrampool's PyTorch allocator implements the allocator interface of PyTorch "
            f"{', '.join(SUPPORTED_TORCH)}; the installed PyTorch is {version}, which vrampool does not support. "
            f"Install PyTorch {SUPPORTED_TORCH[-1]}, or use vrampool through its C API without PyTorch."
        )


def cuda_include_dirs(cpp_extension) -> tuple[bool, list[str]]:
    """Whether to build with PyTorch's CUDA settings (a CUDA toolkit is installed), else the folder holding the CUDA
    runtime headers from the ``nvidia`` pip packages that PyTorch's wheels depend on."""
    if cpp_extension.CUDA_HOME:
        return True, []
    roots = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path]
    for root in roots:
        for header in glob.glob(os.path.join(root, "nvidia", "**", "include", "cuda_runtime_api.h"), recursive=True):
            return False, [os.path.dirname(header)]
    for folder in ("/usr/local/cuda/include", "/usr/include"):
        if os.path.isfile(os.path.join(folder, "cuda_runtime_api.h")):
            return False, [folder]
    raise VrampoolError(
        "no CUDA headers found to build vrampool's PyTorch allocator: install the CUDA toolkit (and set CUDA_HOME) "
        "or the nvidia-cuda-runtime pip package"
    )


def module_name(torch_version: str, library: pathlib.Path) -> str:
    """The extension's name: one per PyTorch version, library and set of sources, so that a change to any of them
    builds anew instead of loading a stale build."""
    digest = hashlib.sha256(str(library).encode())
    for name in (*SOURCES, "allocator.h", "vrampool.h"):
        digest.update((CSRC / name).read_bytes())
    tag = "".join(c if c.isalnum() else "_" for c in torch_version)
    return f"vrampool_torch_{tag}_{digest.hexdigest()[:12]}"


def build(verbose: bool = False):
    """Compiles (once per PyTorch version, library and sources; about a minute) and loads the C++ module of the
    allocator; returns it. Needs a C++ compiler, ninja and the CUDA headers."""
    global _module
    if _module is not None:
        return _module
    import torch
    from torch.utils import cpp_extension

    check_torch_version(torch.__version__)
    if shutil.which("ninja") is None:
        raise VrampoolError("building vrampool's PyTorch allocator needs ninja: `pip install ninja`")
    load()
    library = loaded_file()
    with_cuda, include_dirs = cuda_include_dirs(cpp_extension)
    name = module_name(torch.__version__, library)
    build_dir = pathlib.Path(cpp_extension._get_build_directory(name, verbose))
    if not any(build_dir.glob(f"{name}*.so")):
        print(
            f"vrampool: compiling its allocator for PyTorch {torch.__version__} (once; about a minute)",
            file=sys.stderr,
            flush=True,
        )
    _module = cpp_extension.load(
        name=name,
        sources=[str(CSRC / source) for source in SOURCES],
        extra_cflags=["-O2", "-std=c++17"],
        extra_include_paths=[str(CSRC), *include_dirs],
        extra_ldflags=[
            f"-L{library.parent}",
            f"-Wl,-rpath,{library.parent}",
            f"-l:{library.name}",
            "-lc10_cuda",
        ],
        with_cuda=with_cuda,
        verbose=verbose,
    )
    return _module
