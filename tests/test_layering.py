"""The import-linter contracts of pyproject.toml ([tool.importlinter]) hold: the apps' layers
(config > alerts | replay > ingest > core > ctxobs), ingest used by alerts and replay only through
its facade, and an SDK without Django. Runs the real `lint-imports`."""

from __future__ import annotations

import subprocess
import sys
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
