"""Everything else is in pyproject.toml. This only puts the top-level templates/ and static/ into
the wheel, as config/templates and config/static, so that a non-editable install serves its
pages from site-packages with no checkout next to it (config/settings.py looks there first)."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("templates", "static")


class BuildPyWithSiteFiles(build_py):
    def run(self) -> None:
        super().run()
        # An editable install reads them from the checkout itself.
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED:
            shutil.copytree(ROOT / name, Path(self.build_lib) / "config" / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithSiteFiles})
