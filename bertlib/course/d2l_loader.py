"""Import d2l's PyTorch code (`d2l.torch`, Dive into Deep Learning 1.0.3) where torchvision is absent.

The course compares its attention and encoder with d2l's (Zhang et al., https://d2l.ai). Two things in
the d2l 1.0.3 wheel get in the way: its requirements pin old numpy/pandas/matplotlib (installing it
normally downgrades Colab's numpy), and d2l/torch.py imports torchvision at the top although only its
image chapters use it. So d2l is installed without its pins (`pip install --no-deps d2l==1.0.3`), and
`load_d2l` imports d2l.torch like this:

1. d2l.torch already imported: hand it back.
2. torchvision imports: a plain import.
3. torchvision is absent: import every other top-level dependency of d2l.torch first (so none of them
   can see what comes next), put placeholder modules named torchvision and torchvision.transforms into
   sys.modules, import d2l.torch, and remove the placeholders again, also when the import fails.
   Afterwards `importlib.util.find_spec("torchvision")` is None as before, so transformers still sees
   no torchvision. d2l.torch keeps its references to the placeholders: using one of d2l's image helpers
   raises an AttributeError that says torchvision is missing.

A missing d2l, or a missing dependency that d2l.torch imports at the top, is an ImportError that says
what to pip install. Leaves out: d2l's MXNet, TensorFlow and JAX code, and any other d2l version
(the classes compared in the tests are those of 1.0.3). Placeholders live in sys.modules for the
duration of one import: import d2l.torch from one thread while no other thread is importing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

D2L_VERSION = "1.0.3"
INSTALL_COMMAND = f"pip install --no-deps d2l=={D2L_VERSION}"

# What d2l/torch.py (1.0.3) imports at its top, besides torchvision and the standard library:
# import name -> pip package name.
D2L_DEPENDENCIES = {
    "numpy": "numpy",
    "torch": "torch",
    "PIL": "pillow",
    "pandas": "pandas",
    "requests": "requests",
    "IPython": "ipython",
    "matplotlib": "matplotlib",
    "matplotlib_inline": "matplotlib-inline",
    "scipy": "scipy",
}
# The submodules d2l.torch reaches into at import time; imported before the placeholders go in.
_SUBMODULES = ("torch.utils.data", "IPython.display", "matplotlib.pyplot", "matplotlib_inline.backend_inline",
               "scipy.spatial")
# What d2l.torch does with torchvision at import time: `import torchvision` and `from torchvision import transforms`.
PLACEHOLDER_NAMES = ("torchvision", "torchvision.transforms")


class TorchvisionPlaceholder(ModuleType):
    """Stands in for torchvision while d2l.torch is imported; any use of it says torchvision is missing."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # import machinery probes (__path__, __file__...): behave like a plain module
            raise AttributeError(name)
        raise AttributeError(
            f"{self.__name__}.{name}: torchvision is not installed, so d2l.torch was loaded without it by "
            "bertlib.course.d2l_loader; d2l's image helpers need a torchvision that matches your torch"
        )


def _torchvision_imports() -> bool:
    """True if torchvision is importable; an installed torchvision that fails to import is an error."""
    if sys.modules.get("torchvision") is not None:
        return True
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        importlib.import_module("torchvision")
    except Exception as error:
        raise ImportError(
            "torchvision is installed but does not import (usually a build that does not match torch "
            f"{_torch_version()}): uninstall it (`pip uninstall torchvision`) or install the matching build. "
            f"Original error: {type(error).__name__}: {error}"
        ) from error
    return True


def _torch_version() -> str:
    """The installed torch version, for error messages."""
    import torch

    return torch.__version__


def _check_dependencies() -> None:
    """Raise one ImportError that lists every missing top-level dependency of d2l.torch with its pip name."""
    if importlib.util.find_spec("d2l") is None:
        raise ImportError(
            f"d2l is not installed. Install it without its pinned requirements: {INSTALL_COMMAND} "
            "(its pins would downgrade numpy, pandas and matplotlib)"
        )
    missing = [pip for name, pip in D2L_DEPENDENCIES.items() if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"d2l.torch imports {', '.join(missing)} at the top, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed here: pip install {' '.join(missing)}"
        )


def _import_with_placeholders() -> ModuleType:
    """Import d2l.torch with torchvision placeholders in sys.modules, and take them out again afterwards."""
    for name in (*D2L_DEPENDENCIES, *_SUBMODULES):  # loaded now, so nothing but d2l.torch sees a placeholder
        importlib.import_module(name)
    placeholders = {name: TorchvisionPlaceholder(name) for name in PLACEHOLDER_NAMES}
    placeholders["torchvision"].transforms = placeholders["torchvision.transforms"]
    saved = {name: sys.modules[name] for name in PLACEHOLDER_NAMES if name in sys.modules}  # e.g. a None block
    sys.modules.update(placeholders)
    try:
        return importlib.import_module("d2l.torch")
    finally:
        for name, placeholder in placeholders.items():
            if sys.modules.get(name) is placeholder:
                del sys.modules[name]
        sys.modules.update(saved)


def load_d2l() -> ModuleType:
    """The `d2l.torch` module (d2l's PyTorch code), imported even where torchvision is not installed."""
    if "d2l.torch" in sys.modules:
        return sys.modules["d2l.torch"]
    _check_dependencies()
    if _torchvision_imports():
        return importlib.import_module("d2l.torch")
    return _import_with_placeholders()


def loaded_without_torchvision(d2l: ModuleType) -> bool:
    """True if this d2l.torch module was imported with bertlib's torchvision placeholder."""
    return isinstance(getattr(d2l, "torchvision", None), TorchvisionPlaceholder)
