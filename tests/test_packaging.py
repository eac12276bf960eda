"""The package metadata installs without warnings (issue 14, point 6).

A newcomer's first `make demo` should show the demo, not setuptools'
deprecation boxes: the license is an SPDX string, every folder of the
package is a declared package with its data files listed, and the Makefile
silences pip's strict-editable notice and nothing else.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_the_license_is_an_spdx_string_that_the_build_backend_understands() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    # A string license is the PEP 639 form; setuptools reads it from 77 on.
    [spec] = [req for req in PYPROJECT["build-system"]["requires"] if req.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", spec.replace(" ", ""))
    assert match is not None, spec
    assert int(match.group(1)) >= 77


def _package_folders() -> dict[str, Path]:
    """Every folder of the installed package, by the package name it installs as."""
    found: dict[str, Path] = {}
    for package, where in SETUPTOOLS["package-dir"].items():
        top = ROOT / where
        for folder in [top, *sorted(p for p in top.rglob("*") if p.is_dir())]:
            parts = folder.relative_to(top).parts
            if "__pycache__" in parts:
                continue
            found[".".join([package, *parts])] = folder
    return found


def test_every_folder_under_the_sources_is_a_declared_package() -> None:
    folders = _package_folders()
    assert "trioplay._demo_data" in folders
    # A folder missing from `packages` is what setuptools calls "would be ignored".
    assert sorted(folders) == sorted(SETUPTOOLS["packages"])


def test_every_data_file_is_declared_as_package_data() -> None:
    data = SETUPTOOLS["package-data"]
    undeclared = []
    for package, folder in _package_folders().items():
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            if path.suffix in {".py", ".pyc"}:
                continue
            patterns = data.get(package, [])
            if not any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns):
                undeclared.append(f"{package}: {path.name}")
    assert undeclared == []
    assert (ROOT / "engine" / "_demo_data" / "leads.csv").is_file()


def test_the_makefile_silences_only_the_strict_editable_notice() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [definition] = re.findall(r"^PIP_INSTALL := (.*)$", makefile, re.M)
    [filter] = re.findall(r'^PYTHONWARNINGS="([^"]+)" \S+ -m pip install', definition)
    installs = [line for line in makefile.splitlines() if "editable_mode=strict" in line]
    assert len(installs) == 2
    assert all(line.startswith("\t$(PIP_INSTALL) -e ") for line in installs), installs
    # The filter, applied as pip's process applies it: the notice setuptools
    # prints after a strict editable install goes, the metadata warnings stay.
    probe = (
        "import warnings\n"
        "warnings.warn('Editable installation.\\n!!\\n\\nStrict editable installation performed')\n"
        "warnings.warn('`project.license` as a TOML table is deprecated')\n"
        "warnings.warn(\"Package 'trioplay._demo_data' is absent from the `packages`\")\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", filter, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "Editable installation" not in done.stderr
    assert "`project.license` as a TOML table is deprecated" in done.stderr
    assert "is absent from the `packages`" in done.stderr
