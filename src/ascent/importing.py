"""Load a user's object named by import path: ``package.module:name`` or ``path/to/file.py:name``.

This is how users extend ascent without forking it: a reward function, an advantage
estimator or a loss is named in the config and loaded here.
"""

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from ascent.errors import InputError, InputNotFound


def load_object(spec: str) -> Any:
    """Return the object that ``spec`` names.

    ``spec`` is ``module.path:attribute`` (the module must be importable) or
    ``some/file.py:attribute`` (the file is loaded as a module of its own). The attribute may
    be dotted (``module:Class.method``). Errors say which part was not found.
    """
    module_part, sep, attr_path = spec.rpartition(":")
    if not sep or not module_part or not attr_path:
        raise InputError(
            f"cannot load {spec!r}: expected 'package.module:name' or 'path/to/file.py:name'"
        )
    module = _load_file(module_part) if module_part.endswith(".py") else _import(module_part)
    obj: Any = module
    for name in attr_path.split("."):
        if not hasattr(obj, name):
            raise InputError(f"cannot load {spec!r}: {module_part!r} has no attribute {name!r}")
        obj = getattr(obj, name)
    return obj


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise InputError(
            f"cannot import module {module_name!r} ({error}); is it installed or on PYTHONPATH?"
        ) from error
    except Exception as error:
        raise _failed_at_import(module_name, error) from error


def _failed_at_import(name: str, error: Exception) -> InputError:
    """The user's module raised while it was imported (a syntax error, an exception at module
    level): named with where, so the user fixes their file; ``--debug`` shows the traceback."""
    where = f" (line {error.lineno})" if isinstance(error, SyntaxError) and error.lineno else ""
    return InputError(
        f"cannot load {name!r}: importing it raised {type(error).__name__}{where}: {error}"
    )


def _load_file(path_text: str) -> Any:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise InputNotFound(f"cannot load {path_text!r}: no such file ({path})")
    # One module per file path, so loading the same file twice gives the same objects.
    module_name = f"ascent_user_{abs(hash(str(path))):x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise _failed_at_import(path_text, error) from error
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
