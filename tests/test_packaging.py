"""What `pip install ".[server]"` gives is enough to run the server: every third-party module the
code imports is declared, and the SDK imports only the base dependencies."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER_PACKAGES = ("config", "core", "ingest", "insights", "replay", "alerts")
OWN = {"ctxobs", *SERVER_PACKAGES}
# Modules that only ever run as their own process with another extra installed (never imported by
# the web or worker processes).
RUN_WITH_EXTRA = {"replay/llamaserver.py": "local-model"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]).lower()


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return {
        "base": {_name(r) for r in project["dependencies"]},
        **{extra: {_name(r) for r in reqs} for extra, reqs in extras.items()},
    }


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, imported when the module is) for each absolute import in PATH. Imports
    inside functions, `if TYPE_CHECKING:` and `try: … except ImportError:` are optional."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, eager: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_eager = eager
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                child_eager = False
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                child_eager = False
            elif isinstance(child, ast.Try) and any(
                "ImportError" in ast.unparse(h.type) for h in child.handlers if h.type is not None
            ):
                child_eager = False
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], child_eager) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], child_eager))
            visit(child, child_eager)

    visit(tree, True)
    return found


def _third_party(package: str) -> list[tuple[str, str, bool]]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module, eager in _imports(path):
            if module in sys.stdlib_module_names or module in OWN or module == "__future__":
                continue
            out.append((str(path.relative_to(ROOT)), module, eager))
    return out


@functools.cache
def _module_distributions() -> dict[str, list[str]]:
    """Which installed distributions provide each top-level module (a scan of every installed
    distribution's files: seconds in a large environment, so made once)."""
    return dict(packages_distributions())


def _distributions(module: str) -> set[str]:
    return {_name(d) for d in _module_distributions().get(module, [])}


@pytest.mark.parametrize("package", [*SERVER_PACKAGES, "ctxobs"])
def test_every_import_is_declared_by_the_install_that_runs_it(package: str) -> None:
    declared = _declared()
    eager_ok = declared["base"] | (set() if package == "ctxobs" else declared["server"])
    lazy_ok = set().union(*(v for k, v in declared.items() if k != "dev"))
    missing = []
    for path, module, eager in _third_party(package):
        dists = _distributions(module)
        if path in RUN_WITH_EXTRA and dists & declared[RUN_WITH_EXTRA[path]]:
            continue
        if not dists:
            missing.append(f"{path}: {module} (not installed at all)")
        elif not dists & (eager_ok if eager else lazy_ok):
            extra = "base dependencies" if package == "ctxobs" else "base or `server` dependencies"
            missing.append(f"{path}: {module} ({', '.join(sorted(dists))}) is not in the {extra}")
    assert not missing, "\n".join(missing)


def test_modules_run_with_another_extra_are_not_imported_by_the_server() -> None:
    for path in RUN_WITH_EXTRA:
        dotted = path.removesuffix(".py").replace("/", ".")
        importers = [
            str(p.relative_to(ROOT))
            for package in SERVER_PACKAGES
            for p in (ROOT / package).rglob("*.py")
            if re.search(rf"^\s*(from|import)\s+{re.escape(dotted)}\b", p.read_text(), re.M)
        ]
        assert importers == [], f"{dotted} needs its extra; imported by {importers}"


def test_the_timeline_chart_is_compact_without_numpy() -> None:
    """The production install has no numpy (nothing in `server` needs it): the chart must still
    be built, with its arrays sent as typed arrays."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"  # `import numpy` now fails, as without it
        "import json\n"
        "from ingest import charts\n"
        "rows = [{'turn': t, 'total_tokens': 10 * t, 'watermark': t / 2000, 'tier': 'ok',"
        " 'kind_tokens': {'history': 8 * t, 'system': 2 * t}, 'n_compression': int(t == 3),"
        " 'n_validation_failed': 0} for t in range(2000)]\n"
        "fig = charts.figure_json(charts.timeline_figure(rows=rows, thresholds=(0.6, 0.7, 0.85, 0.95)))\n"
        "print(json.dumps(fig))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fig = __import__("json").loads(proc.stdout)
    bars = {t["name"]: t for t in fig["data"] if t["type"] == "bar" or t.get("stackgroup")}
    assert bars["history"]["y"]["dtype"] == "i2"  # the smallest type that holds 8 * 1999
    assert len(proc.stdout) < 120_000
    line = next(t for t in fig["data"] if t["name"] == "watermark %")
    assert line["y"]["dtype"] == "f8"
    import base64
    import struct

    values = struct.unpack("<2000d", base64.b64decode(line["y"]["bdata"]))
    assert values[1000] == 50.0 and values[-1] == pytest.approx(99.95)
    history = struct.unpack("<2000h", base64.b64decode(bars["history"]["y"]["bdata"]))
    assert history[:3] == (0, 8, 16) and history[-1] == 8 * 1999
