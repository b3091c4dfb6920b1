"""Ruff's complexity rule (C901, over 15 branches) is on, with a per-file baseline in
pyproject.toml that only shrinks: no file joins it, and a file whose functions are all back under
the bar leaves it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The baseline's size: 19 when the rule came on (2026-12-04), 14 after the long functions of
# rules, runs, ablation, the OTLP mapping and the store were cut, 12 after incident grouping and
# experiment finalizing. Lower it as files leave.
BASELINE_MAX = 12


def _baseline() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C90" in config["select"] and config["mccabe"]["max-complexity"] == 15
    return sorted(f for f, rules in config["per-file-ignores"].items() if "C901" in rules)


def test_the_complexity_baseline_only_shrinks_and_holds_only_files_still_over_the_bar() -> None:
    files = _baseline()
    assert len(files) <= BASELINE_MAX, files
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    done = subprocess.run(
        [
            ruff,
            "check",
            "--isolated",
            "--select",
            "C901",
            "--config",
            "lint.mccabe.max-complexity = 15",
            "--output-format",
            "concise",
            *files,
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    still_over = {
        line.split(":", 1)[0] for line in done.stdout.splitlines() if ":" in line and "C901" in line
    }
    assert set(files) == still_over, f"leave the baseline: {sorted(set(files) - still_over)}"
