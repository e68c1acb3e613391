"""titan: migrate, validate and train torchtitan configs.

This package must stay cheap to import: ``titan-validate FILE.toml`` runs through ``titan.cli``
without importing torch. Modules that need torch import it themselves.

``titan.schemas`` and ``titan.migrate`` live in the checkout's top-level ``schemas/`` and
``migrate/`` folders (setup.py's package-dir; an installed wheel holds them under ``titan/``).
When titan is imported straight from a checkout (its folder on ``sys.path``, as ``torchrun`` with
``PYTHONPATH`` does), :func:`_find_checkout_folders` finds them in that same checkout, never in
another installation's.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"


class _CheckoutFolders:
    """Finds ``titan.schemas`` and ``titan.migrate`` beside this ``titan/`` folder."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201
        package, _, short = fullname.partition(".")
        if package != "titan" or short not in ("schemas", "migrate"):
            return None
        from importlib.util import spec_from_file_location

        folder = _os.path.join(self.root, short)
        return spec_from_file_location(
            fullname, _os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )


def _find_checkout_folders() -> None:
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.isdir(_os.path.join(here, "schemas")):
        return  # installed from a wheel: they are subpackages of this folder
    root = _os.path.dirname(here)
    if not all(
        _os.path.isfile(_os.path.join(root, f, "__init__.py")) for f in ("schemas", "migrate")
    ):
        return
    if not any(isinstance(f, _CheckoutFolders) and f.root == root for f in _sys.meta_path):
        _sys.meta_path.insert(0, _CheckoutFolders(root))


_find_checkout_folders()
