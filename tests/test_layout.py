"""The layout shows the method: simclr_tf/ has few entries, one per floor of the import
graph; no module imports a floor above its own; the loss imports little; every
'module:attr' a table names resolves (docs/design.md, "The layers")."""
import ast
import importlib
import os
import subprocess
import sys

import pytest

from simclr_tf.config.tables import encoders as encoder_table
from simclr_tf.config.tables import modes as mode_table
from simclr_tf.config.tables import train_modes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "simclr_tf")
# Floor of each top-level entry, bottom up (docs/design.md): an import goes down.
FLOORS = {"config": 1, "rundir": 2, "method": 3, "augment": 3, "models": 3, "data": 4,
          "evaluation": 4, "weights": 4, "run": 5}


def _modules():
    """(dotted name, path) of every module of the package."""
    for folder, dirs, names in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], REPO).replace(os.sep, ".")
                yield dotted.removesuffix(".__init__"), path


def _imported(path):
    """Every simclr_tf module or name a file imports, at the top or inside a function."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "simclr_tf":
                yield from (f"simclr_tf.{alias.name}" for alias in node.names)
            elif node.module.startswith("simclr_tf."):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("simclr_tf."))


def _floor(dotted):
    parts = dotted.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def test_the_package_has_one_entry_per_floor():
    entries = sorted(e for e in os.listdir(PACKAGE) if e != "__pycache__")
    assert entries == sorted(["__init__.py", *FLOORS]), entries
    assert len(entries) <= 12


def test_no_module_imports_a_floor_above_its_own():
    upward = []
    for dotted, path in _modules():
        own = _floor(dotted)
        for target in _imported(path):
            if own is not None and (_floor(target) or 0) > own:
                upward.append(f"{dotted} -> {target}")
    assert len(list(_modules())) > 100  # the package was read
    assert not upward, upward


def _import_graph(root):
    """{module: the modules of the package it imports (at the top or in a function;
    `from package import module` is an edge to the module)} of the package at `root`."""
    modules = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], os.path.dirname(root)).replace(
                    os.sep, ".").removesuffix(".__init__")
                modules[dotted] = path
    graph = {}
    for dotted, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    named = f"{node.module}.{alias.name}"
                    edges.add(named if named in modules else node.module)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
        graph[dotted] = {target for target in edges if target in modules} - {dotted}
    return graph


def import_circles(graph):
    """The strongly connected parts of more than one module (each a circle of imports)."""
    order, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return circles


def test_no_import_circle_anywhere_in_the_package():
    """config/ had one through 10 of its files (issue 64); lazy imports count too."""
    graph = _import_graph(PACKAGE)
    assert len(graph) > 100 and import_circles(graph) == []


def test_the_control_an_import_circle_is_found(tmp_path):
    package = tmp_path / "simclr_tf"
    (package / "config").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "config" / "__init__.py").write_text("")
    (package / "config" / "rules.py").write_text(
        "def f():\n    from simclr_tf.config import table  # lazy, still a circle\n")
    (package / "config" / "table.py").write_text("from simclr_tf.config import rules\n")
    assert import_circles(_import_graph(str(package))) == [
        ["simclr_tf.config.rules", "simclr_tf.config.table"]]


def test_the_control_an_upward_import_is_found(tmp_path):
    path = tmp_path / "losses.py"
    path.write_text("def f():\n    from simclr_tf.run import experiment\n")
    assert [t for t in _imported(str(path)) if _floor(t) > FLOORS["method"]] == [
        "simclr_tf.run"]


@pytest.mark.large  # 6.2 s: a fresh process imports TensorFlow
def test_the_loss_and_the_pretraining_objective_import_little():
    """NT-Xent's module in a fresh process: at most 15 modules of the package, and
    neither TFDS nor the folder scanner (TensorFlow itself imports scikit-learn)."""
    code = ("import sys, importlib\n"
            "for name in sys.argv[1:]:\n"
            "    importlib.import_module(name)\n"
            "    ours = sorted(m for m in sys.modules if m.startswith('simclr_tf'))\n"
            "    print(name, len(ours), 'tensorflow_datasets' in sys.modules,\n"
            "          'simclr_tf.data.image_scan' in sys.modules)\n")
    result = subprocess.run(
        [sys.executable, "-c", code, "simclr_tf.method.losses",
         "simclr_tf.method.objectives.pretrain"], capture_output=True, text=True,
        cwd=REPO, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0][0] == "simclr_tf.method.losses" and int(rows[0][1]) <= 15, rows
    assert rows[1][0] == "simclr_tf.method.objectives.pretrain" and int(rows[1][1]) <= 20
    assert all(row[2:] == ["False", "False"] for row in rows), rows


@pytest.mark.parametrize("table", ["encoders", "modes", "train_modes"])
def test_every_module_and_attribute_a_table_names_resolves(table):
    from helpers import toy_mode  # pylint: disable=import-outside-toplevel
    named = {
        "encoders": [spec.builder for spec in encoder_table.ENCODERS.values()
                     if isinstance(spec.builder, str)],
        # The built-in modes name none (run/experiment.py calls theirs by name); the
        # tests' toy mode names its function as a mode registered from outside does.
        "modes": [part for row in (*mode_table.MODES.values(), toy_mode.MODE)
                  for part in row.parts],
        # The built-in rows name none (method/train.py's objective_class names theirs): a
        # registered row's, here one like the tests' toy objective's.
        "train_modes": [row.objective for row in train_modes.TRAIN_MODES.values()
                        if row.objective] + ["simclr_tf.method.objectives.pretrain:Pretrain"],
    }[table]
    assert len(named) >= (3 if table == "encoders" else 1)
    for entry in named:
        module, _, attribute = entry.partition(":")
        assert hasattr(importlib.import_module(module), attribute), entry


def test_the_built_in_modes_and_objectives_are_called_by_name():
    """The default path is calls an editor follows: each built-in --mode's functions
    (run/experiment.py's mode_functions) and --train_mode's objective (method/train.py's
    objective_class) are named there, and the TF-free tables hold no 'module:attr' string
    for them (one truth)."""
    from simclr_tf.method import train  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    for mode in mode_table.MODES.values():
        functions = experiment.mode_functions(mode)
        assert not mode.parts and functions and all(callable(f) for f in functions), mode
    for row in train_modes.TRAIN_MODES.values():
        assert row.objective == "" and issubclass(train.objective_class(row.name), object)
    assert train.objective_class("pretrain").__name__ == "Pretrain"
