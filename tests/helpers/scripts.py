"""A script of scripts/ as a module, to call its functions and its `main` in process."""
import importlib.util
import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "scripts")


def load_script(name):
    """scripts/<name>.py, executed as the module `name` (registered in sys.modules while
    it runs: a dataclass of the script looks its module up)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
