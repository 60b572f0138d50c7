"""The package's structure rules (CONTRIBUTING.md), checked on its source."""

import ast
import collections
from pathlib import Path

from keras_saat import workdir
from keras_saat.layers import available_attentions

PACKAGE = Path(__file__).parents[1] / "keras_saat"
MODULES = sorted(PACKAGE.rglob("*.py"))
# Where attention names may appear in comparisons: the registry and the attention classes.
ATTENTION_HOMES = {"attention_registry.py", "soft_attention.py", "hard_attention.py"}


def parsed(path):
    return ast.parse(path.read_text(), str(path))


def test_no_two_modules_share_a_file_name():
    names = collections.Counter(p.name for p in MODULES if p.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []


def test_the_data_package_imports_no_higher_package():
    higher = tuple(f"keras_saat.{p}" for p in ("encoders", "models", "training", "serving"))
    found = []
    for path in sorted((PACKAGE / "data").rglob("*.py")):
        for node in ast.walk(parsed(path)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.startswith(higher)]
    assert found == []


def test_each_workdir_file_name_is_spelled_once():
    names = {
        value for key, value in vars(workdir).items() if key.isupper() and isinstance(value, str)
    }
    found = []
    for path in MODULES:
        if path.name == "workdir.py":
            continue
        for node in ast.walk(parsed(path)):
            # A file name anywhere; a folder name ("features" is also a dict key) where a
            # path is joined: `workdir / "features"`.
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                node = node.right
            elif not (isinstance(node, ast.Constant) and "." in str(node.value)):
                continue
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert found == []


def test_no_comparison_on_attention_names_outside_the_attention_classes():
    names = set(available_attentions())
    found = []
    for path in MODULES:
        if path.name in ATTENTION_HOMES:
            continue
        for node in ast.walk(parsed(path)):
            if not isinstance(node, ast.Compare):
                continue
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
