"""Dependencies point one way: the lower packages never import the gateway or the worker, and no package
(nor any layer of the gateway) imports, directly or not, one that imports it back."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import depthserve

ROOT = Path(depthserve.__file__).parent
LOWER = ("balancer", "codec", "protocol", "discovery", "jobs", "telemetry", "model", "weights", "scaling")
UPPER = ("gateway", "worker", "cli", "local_cluster")


def unit(module: str) -> str:
    """The unit a module belongs to: a package under depthserve, or one layer (sub-package or module) of the
    gateway, which is where layers matter most."""
    parts = module.split(".")[1:]
    if not parts:
        return "depthserve"
    if parts[0] == "gateway" and len(parts) > 1:
        return f"gateway.{parts[1]}"
    return parts[0]


def imports() -> Iterator[tuple[str, str, str]]:
    """(importing unit, imported unit, file) for every depthserve import in the source, TYPE_CHECKING ones too."""
    for path in ROOT.rglob("*.py"):
        module = ".".join(("depthserve", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("depthserve"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("depthserve")]
            else:
                continue
            for name in names:
                if unit(name) != unit(module):
                    yield unit(module), unit(name), str(path.relative_to(ROOT))


def test_lower_packages_never_import_the_gateway_or_the_worker() -> None:
    wrong = [(f, dst) for src, dst, f in imports() if src in LOWER and dst.split(".")[0] in UPPER]
    assert wrong == []


def test_no_package_or_gateway_layer_imports_itself_back() -> None:
    graph: dict[str, set[str]] = {}
    for src, dst, _ in imports():
        graph.setdefault(src, set()).add(dst)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False

    cycles = sorted((a, b) for a, targets in graph.items() for b in targets if reaches(b, a))
    assert cycles == []


def test_the_gateway_is_layered() -> None:
    """The layers exist as sub-packages, not as one flat folder."""
    layers = {path.name for path in (ROOT / "gateway").iterdir() if (path / "__init__.py").exists()}
    assert {"http", "oip", "edge", "upstream", "dispatch"} <= layers
    flat = [path.name for path in (ROOT / "gateway").glob("*.py") if path.name != "__init__.py"]
    assert len(flat) <= 5, flat  # the app, its server, its errors and metrics sit on top of the layers
