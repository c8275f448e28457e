"""The layers of ``src/ascent`` (README: Layers): no import cycle between modules or between
packages, and no import from a lower layer to a higher one. Every import counts: at module
level, inside functions, and under ``TYPE_CHECKING``."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Each top-level package or module of ascent, by layer: an import goes to a lower layer, or
# stays inside its own package. Packages of one layer do not import each other.
LAYERS = [
    ["errors"],
    ["importing", "batch", "config", "sandbox", "http_client"],
    ["algos", "controller", "vision", "distributed"],
    ["moe"],  # a mixture of experts' routing, replay and expert parallelism
    ["engine"],
    ["models", "data"],
    ["rollout"],  # the generation service: engines and backends
    ["rewards", "teacher"],  # scoring; where rewards sit on tokens; a teacher's log-probs
    ["agents", "serve"],  # on top of generation (episodes are scored by rewards)
    ["gateway"],  # outside agents: serve's routes per episode, calls recorded as samples
    ["workers"],  # the RL roles, the rollout role among them
    ["trainer", "service"],
    ["quickstart", "doctor", "configdoc", "report"],  # report: reads run directories only
    ["cli"],
    ["__main__"],
]
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every ascent module ``path`` imports: ``from a import b`` counts ``a.b`` where that is
    a module, else ``a``; ``import a.b.c`` counts ``a.b.c``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in modules else module)
    return {target for target in found if target.split(".")[0] == "ascent"}


def import_graph() -> dict[str, set[str]]:
    """Module -> the ascent modules it imports."""
    paths = {module_name(path): path for path in (SRC / "ascent").rglob("*.py")}
    return {name: imports_of(path, name, set(paths)) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def top(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def test_no_module_imports_a_module_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_no_package_cycle():
    packages: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        packages.setdefault(top(module), set()).update(top(t) for t in targets)
    assert cycles(packages) == []


def test_every_package_has_a_layer_and_imports_only_lower_layers():
    upward = []
    for module, targets in import_graph().items():
        own = top(module)
        if own == "__init__":
            continue
        assert own in LAYER_OF, f"{own} has no layer: add it to LAYERS and the README's map"
        for target in targets:
            other = top(target)
            if other not in (own, "__init__") and LAYER_OF[other] >= LAYER_OF[own]:
                upward.append(f"{module} imports {target}")
    assert upward == [], "\n".join(sorted(upward))
