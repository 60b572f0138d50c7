"""The package's structure rules (CONTRIBUTING.md), checked on its source."""

import ast
import collections
import sys
from pathlib import Path

from keras_saat import workdir
from keras_saat.layers import available_attentions

PACKAGE = Path(__file__).parents[1] / "keras_saat"
MODULES = sorted(PACKAGE.rglob("*.py"))
# Where attention names may appear in comparisons: the registry and the attention classes.
ATTENTION_HOMES = {"attention_registry.py", "soft_attention.py", "hard_attention.py"}


# The dependency layers of CONTRIBUTING.md, from the bottom up: a module imports from its
# own layer or the ones below, never from one above (imports inside functions count).
LAYERS = [
    # registration names the modules that register Keras classes as strings: it imports none.
    ("foundation", {"errors", "io_utils", "registries", "workdir", "_lazy", "runtime", "export_formats", "registration"}),
    ("text", {"text"}),
    ("images", {"images"}),
    ("data", {"data"}),
    ("model parts", {"layers", "decoding", "losses", "encoders"}),
    ("config", {"config", "config_choices", "config_files", "config_ranges"}),
    ("models", {"models"}),
    ("training and scoring", {"training", "callbacks", "evaluation"}),
    ("serving", {"serving"}),
    ("export", {"export"}),
    ("experiment", {"experiment"}),
    ("beam pipelines", {"beam"}),
    ("command line", {"cli"}),
]  # fmt: skip
# The checkout's own packages, which the wheel does not ship: the package never imports them.
UNSHIPPED = {"tests", "benchmarks"}


def parsed(path):
    return ast.parse(path.read_text(), str(path))


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path):
    """The keras_saat modules `path` imports anywhere in it (functions included), each
    resolved to a module of the package (`from keras_saat.x import name` -> keras_saat.x,
    or keras_saat.x.name where that is a module)."""
    modules = {module_name(p) for p in MODULES}
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(parsed(path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != own:
                found.add(target)
    return found


def unit(module):
    """A module's place in LAYERS: the package or top-level module it belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_and_top_level_module_has_a_layer():
    placed = [name for _, names in LAYERS for name in names]
    assert len(placed) == len(set(placed))
    units = {unit(module_name(p)) for p in MODULES} - {None}
    assert sorted(units - set(placed)) == [] and sorted(set(placed) - units) == []


def test_no_module_imports_from_a_higher_layer():
    layer_of = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
    upward = []
    for path in MODULES:
        own = unit(module_name(path))
        if own is None:  # keras_saat/__init__.py: the public names, loaded on first use
            continue
        for target in sorted(imported_modules(path)):
            other = unit(target)
            if other is not None and layer_of[other] > layer_of[own]:
                upward.append(
                    f"{module_name(path)} ({LAYERS[layer_of[own]][0]}) imports {target} "
                    f"({LAYERS[layer_of[other]][0]})"
                )
    assert upward == []


def test_the_package_imports_neither_the_tests_nor_the_benchmarks():
    found = []
    for path in MODULES:
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{module_name(path)} imports {n}" for n in names if n.split(".")[0] in UNSHIPPED
            ]
    assert found == []


def test_no_import_cycles():
    """Strongly connected components of the module graph, package re-exports aside."""
    graph = {}
    for path in MODULES:
        own = module_name(path)
        targets = imported_modules(path)
        if path.name == "__init__.py":  # a package re-exporting its own modules
            targets = {t for t in targets if not t.startswith(own + ".")}
        graph[own] = {t for t in targets if t != own.rpartition(".")[0]}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


def test_no_package_module_is_over_400_lines():
    long = [
        f"{p.relative_to(PACKAGE)}: {n}"
        for p in MODULES
        if (n := len(p.read_text().splitlines())) > 400
    ]
    assert long == []


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
            found += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.startswith(higher)]
    assert found == []


# Inside data/: the readers know no cache or pipeline, the cache knows no pipeline.
DATA_ROOMS = {
    "readers": ("keras_saat.data.feature_cache", "keras_saat.data.pipeline"),
    "feature_cache": ("keras_saat.data.pipeline",),
}


def test_the_data_rooms_import_downwards_only():
    found = []
    for room, above in DATA_ROOMS.items():
        for path in sorted((PACKAGE / "data" / room).rglob("*.py")):
            for node in ast.walk(parsed(path)):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                found += [f"{path.relative_to(PACKAGE)}: {n}" for n in names if n.startswith(above)]
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
