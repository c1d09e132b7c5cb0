"""No pointer to what does not exist (issue 71): every dotted `simclr_tf.` name, every
'module:attr' and `file.py:function` reference and every file path that README.md,
docs/ and the docstrings and comments of the code name resolves in the clone.

Resolved statically, from each module's source (what it defines at the top, what it
imports, a class's methods and attributes), so the check imports nothing and a renamed
function fails it by name. A class with a base outside the package (a Keras layer)
may inherit the attribute named: an attribute of such a class that it does not
define is let through.
"""
import ast
import functools
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DOTTED = re.compile(r"(?<![\w./-])(simclr_tf(?:\.[A-Za-z_]\w*)+)(?::([A-Za-z_]\w*))?")
FILE_FUNCTION = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py):([A-Za-z_]\w*|\d+)\b")
# A path of the clone: a folder of it, then more of it (docs/x.md, simclr_tf/run/loop.py).
PATH = re.compile(r"(?<![\w./-])((?:simclr_tf|docs|scripts|dev|tests|flags|colabs)"
                  r"/[\w./-]*\w\.(?:py|md|flags|ipynb))\b")

FILE_ENDINGS = {"log", "json", "txt", "md", "py", "npz", "csv"}
# A path of the docs' examples: scripts/NAME.py, tests/test_x.py.
PLACEHOLDER = re.compile(r"NAME|\b(test_)?x\.py$|[<*]")


def _pages():
    docs = os.path.join(REPO, "docs")
    pages = [os.path.join(REPO, name) for name in (
        "README.md", "scripts/README.md", "dev/README.md", "run.py")]
    pages += sorted(os.path.join(docs, name) for name in os.listdir(docs)
                    if name.endswith(".md"))
    for folder in ("simclr_tf", "scripts", "dev"):
        for root, dirs, names in os.walk(os.path.join(REPO, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            pages += sorted(os.path.join(root, n) for n in names if n.endswith(".py"))
    return pages


class Index:
    """The modules of a source tree at `root`, read (never imported)."""

    def __init__(self, root):
        self.root = root

    def module_path(self, dotted):
        base = os.path.join(self.root, *dotted.split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(path):
                return path
        return None

    @functools.lru_cache(maxsize=None)
    def tree(self, path):
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read())

    def _scope_names(self, body):
        """{name: node or None} a module or class body defines or imports."""
        names = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            names[name.id] = None
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names[node.target.id] = None
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names[(alias.asname or alias.name).split(".")[0]] = ("import", node, alias)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for part in ("body", "orelse", "finalbody"):
                    names.update(self._scope_names(getattr(node, part, [])))
                for handler in getattr(node, "handlers", []):
                    names.update(self._scope_names(handler.body))
        return names

    def _lazy(self, path, tree, rest):
        """Whether a module's `__getattr__` answers `rest[0]`: a string it holds (`if
        name == "X"`, a table of exports), or a name of the module of the package it
        forwards to (`importlib.import_module(f"{__name__}.run_config")`)."""
        name = rest[0]
        getattr_ = [node for node in tree.body
                    if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
        if not getattr_:
            return False
        strings = {node.value for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        if name in strings:
            return True
        package = os.path.relpath(os.path.dirname(path), self.root).replace(os.sep, ".")
        for node in ast.walk(getattr_[0]):
            if isinstance(node, ast.JoinedStr) and isinstance(node.values[-1], ast.Constant):
                tail = str(node.values[-1].value)
                if tail.startswith(".") and self.module_path(package + tail) is not None:
                    if self.resolves(".".join([package + tail, *rest])):
                        return True
        return False

    def _class_has(self, cls, attribute):
        names = self._scope_names(cls.body)
        if attribute in names:
            return True
        for node in ast.walk(cls):  # self.attribute = ... in its methods
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and node.attr == attribute
                    and isinstance(node.ctx, ast.Store)):
                return True
        return bool(cls.bases)  # inherited: let through (see the module docstring)

    def resolves(self, dotted):
        """Whether `dotted` (a.b.c, its head a package of the tree) names a module
        or something a module defines."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            path = self.module_path(".".join(parts[:cut]))
            if path is not None:
                return self._resolves_in(path, parts[cut:])
        return False

    def _resolves_in(self, path, rest):
        if not rest:
            return True
        tree = self.tree(path)
        names = self._scope_names(tree.body)
        head = rest[0]
        if head not in names:
            return self._lazy(path, tree, rest)
        node = names[head]
        if isinstance(node, tuple):  # imported: follow it when it is ours
            _, statement, alias = node
            if isinstance(statement, ast.ImportFrom) and statement.level == 0:
                target = f"{statement.module}.{alias.name}"
                if self.module_path(statement.module.split(".")[0]) is not None:
                    return self.resolves(".".join([target, *rest[1:]]))
            return True  # another library's: not ours to check
        if isinstance(node, ast.ClassDef) and len(rest) > 1:
            return self._class_has(node, rest[1]) if len(rest) == 2 else True
        return True


def dead_pointers(text, index, *, here=REPO):
    """[(pointer, why)] of `text`'s pointers that do not resolve against `index` (a
    tree whose package is `simclr_tf`); file paths are looked up under `here`."""
    dead = []
    for dotted, attribute in DOTTED.findall(text):
        if dotted.rsplit(".", 1)[-1] in FILE_ENDINGS:  # a file's name: simclr_tf.log
            continue
        if not index.resolves(dotted):
            dead.append((dotted, "no such module or name"))
        elif attribute and not index.resolves(f"{dotted}.{attribute}"):
            dead.append((f"{dotted}:{attribute}", "no such name"))
    for path, target in FILE_FUNCTION.findall(text):
        found = _find_file(path, here)
        if found is None:
            dead.append((f"{path}:{target}", "no such file"))
        elif target.isdigit():
            with open(found, encoding="utf-8") as f:
                if int(target) > len(f.read().splitlines()):
                    dead.append((f"{path}:{target}", "no such line"))
        elif not re.search(rf"^\s*(def|class) {target}\b|^{target}\s*=",
                           open(found, encoding="utf-8").read(), re.M):
            dead.append((f"{path}:{target}", "the file defines no such name"))
    for path in PATH.findall(text):
        if PLACEHOLDER.search(path):
            continue
        if _find_file(path, here) is None:
            dead.append((path, "no such file"))
    return dead


# `module.name` in backticks, the docs' short form (`losses.nt_xent`, `Trainer.apply`,
# `modes.train.train`): checked when its head names a module of the package (by the end
# of its dotted name) or one of its classes; `config.x` is a Config field.
SHORT = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
# A variable's attribute in a docstring, not a module's name.
VARIABLES = {"weights.prefix"}


class ShortNames:
    """The modules and classes of the package at `index.root`, by their last name."""

    def __init__(self, index):
        self.index, self.modules, self.classes = index, [], {}
        package = os.path.join(index.root, "simclr_tf")
        for root, dirs, names in os.walk(package):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    dotted = os.path.relpath(path[:-3], index.root).replace(
                        os.sep, ".").removesuffix(".__init__")
                    self.modules.append(dotted)
                    for node in index.tree(path).body:
                        if isinstance(node, ast.ClassDef):
                            self.classes.setdefault(node.name, []).append(
                                f"{dotted}.{node.name}")

    def candidates(self, parts):
        """[(a full name, the rest)] the head of `parts` may stand for; [] for none."""
        if parts[0] == "config":
            return [("simclr_tf.config.run_config.Config", parts[1:])]
        for cut in range(len(parts) - 1, 0, -1):
            suffix = "." + ".".join(parts[:cut])
            found = [m for m in self.modules if m.endswith(suffix)]
            if parts[0] == "run" and cut == 1:
                found.append("run")  # run.py, the CLI
            if found:
                return [(module, parts[cut:]) for module in found]
        return [(cls, parts[1:]) for cls in self.classes.get(parts[0], [])]

    def dead(self, text):
        dead = []
        for token in SHORT.findall(text):
            parts = token.split(".")
            if parts[0] == "simclr_tf" or parts[-1] in FILE_ENDINGS or token in VARIABLES:
                continue
            candidates = self.candidates(parts)
            if candidates and not any(self.index.resolves(".".join([name, *rest]))
                                      for name, rest in candidates):
                dead.append((token, "no module or class of that name defines it"))
        return dead


def _find_file(path, here):
    """The file `path` names: from the clone's top, or a path inside simclr_tf/
    written without it (`method/losses.py`), or a file of that name anywhere."""
    for candidate in (os.path.join(here, path), os.path.join(here, "simclr_tf", path)):
        if os.path.isfile(candidate):
            return candidate
    if "/" not in path:
        for root, dirs, names in os.walk(here):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            if path in names:
                return os.path.join(root, path)
    return None


@pytest.mark.parametrize("page", _pages(), ids=lambda p: os.path.relpath(p, REPO))
def test_every_pointer_resolves(page):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    index = _index()
    assert dead_pointers(text, index) + _short_names().dead(text) == []


@functools.lru_cache(maxsize=None)
def _index():
    return Index(REPO)


@functools.lru_cache(maxsize=None)
def _short_names():
    return ShortNames(_index())


def test_the_check_finds_a_renamed_function_module_and_file(tmp_path):
    """The planted fault: a function renamed after the docs named it."""
    package = tmp_path / "simclr_tf" / "method"
    package.mkdir(parents=True)
    (tmp_path / "simclr_tf" / "__init__.py").write_text(
        'def __getattr__(name):\n    if name == "SimCLR":\n        return 1\n')
    (package / "__init__.py").write_text("")
    (package / "losses.py").write_text(
        "from simclr_tf.method.collectives import gather\nimport tensorflow as tf\n\n"
        "LARGE = 1\n\n\nclass Out:\n    loss: float\n\n    def acc(self):\n"
        "        self.seen = 1\n\n\ndef nt_xent_renamed():\n    pass\n")
    (package / "collectives.py").write_text("def gather():\n    pass\n")
    index = Index(str(tmp_path))
    text = ("`simclr_tf.method.losses.nt_xent` `simclr_tf.method.losses.nt_xent_renamed` "
            "simclr_tf.method.losses.Out.acc, simclr_tf.method.losses.Out.seen and "
            "simclr_tf.method.losses.Out.gone. simclr_tf.method.losses.gather "
            "simclr_tf.method.losses.tf.function simclr_tf.SimCLR simclr_tf.Nothing "
            "'simclr_tf.method.losses:LARGE' 'simclr_tf.method.losses:SMALL' "
            "simclr_tf.method.evaluators, losses.py:nt_xent_renamed losses.py:nt_xent "
            "losses.py:3 losses.py:300 gone.py:f simclr_tf/method/losses.py "
            "docs/gone.md\n")
    assert dead_pointers(text, index, here=str(tmp_path)) == [
        ("simclr_tf.method.losses.nt_xent", "no such module or name"),
        ("simclr_tf.method.losses.Out.gone", "no such module or name"),
        ("simclr_tf.Nothing", "no such module or name"),
        ("simclr_tf.method.losses:SMALL", "no such name"),
        ("simclr_tf.method.evaluators", "no such module or name"),
        ("losses.py:nt_xent", "the file defines no such name"),
        ("losses.py:300", "no such line"),
        ("gone.py:f", "no such file"),
        ("docs/gone.md", "no such file")]
    short = ShortNames(index).dead(
        "`losses.nt_xent(z1, z2)` `losses.nt_xent_renamed()` `method.losses.LARGE` `Out.acc` "
        "`Out.gone` `collectives.gather` `collectives.scatter` `tf.function` "
        "`losses.py` `numpy.mean`")
    assert short == [
        ("losses.nt_xent", "no module or class of that name defines it"),
        ("Out.gone", "no module or class of that name defines it"),
        ("collectives.scatter", "no module or class of that name defines it")]
