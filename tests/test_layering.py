"""The import-linter contracts of pyproject.toml ([tool.importlinter]) hold: the apps' layers
(config > experiments > alerts | replay > insights > ingest > core > ctxobs), ingest used by the
apps above it only through its facade, and an SDK without Django. Runs the real `lint-imports`.
The templates keep the same layers (what they name and include, which no import shows)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_the_layers_and_the_sdk_contract_hold() -> None:
    result = lint_imports("--contract", "layers", "--contract", "sdk-without-django")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout, result.stdout


def test_every_contract_holds() -> None:
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken." in result.stdout, result.stdout


# --- templates: the same layers, for what no import shows ------------------------------------
# A template names another app's pages ({% url 'replay:endpoints' %}) and includes its templates
# ({% include "replay/_style.html" %}) without an import, so lint-imports cannot see it; an app
# left out (CTXOBS_APPS) would then break a page of an app below it. Templates of an app may
# name its own url namespace and templates and those of apps in lower layers; templates/ itself
# (base.html, 404.html, registration/) belongs to the project on top.
_URL_NAME = re.compile(r"""\{%\s*url\s+['"]([a-z_]+):""")
_TEMPLATE_REF = re.compile(r"""\{%\s*(?:include|extends)\s+['"]([a-z_]+)/""")


def _layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    return [{part.strip() for part in layer.split("|")} for layer in contract["layers"]]


def _template_reaches(app: str, other: str, layers: list[set[str]]) -> bool:
    """May a template of APP name OTHER's pages or templates? Same app, or a strictly lower layer."""
    if app == other:
        return True
    index = {name: i for i, layer in enumerate(layers) for name in layer}
    return index[other] > index[app]


def template_layer_breaks(templates: Path = ROOT / "templates") -> list[str]:
    layers = _layers()
    known = {name for layer in layers for name in layer}
    breaks = []
    for path in sorted(templates.rglob("*.html")):
        app = path.relative_to(templates).parts[0]
        if app not in known:
            continue  # the project's own templates sit on top
        text = path.read_text()
        for pattern, what in ((_URL_NAME, "names a page of"), (_TEMPLATE_REF, "includes a template of")):
            for other in pattern.findall(text):
                if other in known and not _template_reaches(app, other, layers):
                    breaks.append(f"{path.relative_to(templates)} {what} {other}")
    return breaks


def test_templates_reach_only_their_own_app_and_lower_layers() -> None:
    assert template_layer_breaks() == []


def test_the_template_check_sees_a_template_that_reaches_up(tmp_path: Path) -> None:
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "page.html").write_text(
        "<a href=\"{% url 'replay:endpoints' project.pk %}\">x</a>{% include \"alerts/_row.html\" %}"
        "<a href=\"{% url 'core:home' %}\">ok</a>{% include \"ingest/_own.html\" %}"
    )
    (tmp_path / "replay").mkdir()
    (tmp_path / "replay" / "side.html").write_text(
        "{% url 'alerts:detail' 1 2 %}{% url 'ingest:turn' 1 's' 1 %}")
    breaks = template_layer_breaks(tmp_path)
    assert [b.split(" ", 1)[1] for b in breaks] == [
        "names a page of replay", "includes a template of alerts", "names a page of alerts"], breaks
