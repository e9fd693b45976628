"""npm packages for the optional client tiers: one install per version in a cache folder outside the
repository, shared by every test process (an flock), bounded in time, skipping with the reason.

`npm_package("@openai/codex")` resolves `latest` with one `npm view` a process, installs
`<cache>/<package>@<version>` once (`npm install --prefix … --no-audit --no-fund`) and returns that
folder; an install already there is reused, offline too. The cache is `$AGY_PROVIDER_NPM_CACHE`,
else `$XDG_CACHE_HOME/agy-provider/npm`, else `~/.cache/agy-provider/npm`.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# An install is a few hundred MB at worst (Codex's platform binary); on a slow link or a loaded
# machine that can take minutes. Past this bound the tier skips rather than stalls the suite.
INSTALL_TIMEOUT = 600.0
# `npm view` is one small registry request.
VIEW_TIMEOUT = 60.0
# What a folder name may hold: a package name (scope included) and a semver version.
_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def cache_root() -> Path:
    """Where the npm installs live (outside the repository, kept between runs)."""
    explicit = os.environ.get("AGY_PROVIDER_NPM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agy-provider" / "npm"


def enable_hint(package: str, version: str = "latest") -> str:
    """The command that makes a skipped tier run: the install this module would make."""
    if version == "latest":  # the folder is named by the version the registry gives
        version = f"$(npm view {package}@latest version)"
    folder = cache_root() / f"{_folder_name(package)}@{version}"
    return f'npm install --no-audit --no-fund --prefix "{folder}" {package}@{version}'


def _complete(folder: Path, package: str, version: str) -> bool:
    """Whether `folder` holds `package` at `version` (ours or one installed by hand)."""
    try:
        manifest = json.loads((folder / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("version") == version


def _folder_name(package: str) -> str:
    return package.replace("/", "+")


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed for this client tier (apt-get install nodejs npm)")
    return npm


def _installed(package: str) -> list[tuple[tuple[int, ...], Path]]:
    """Complete installs of `package` in the cache, newest version first."""
    found = []
    for folder in cache_root().glob(_folder_name(package) + "@*"):
        version = folder.name.rsplit("@", 1)[1]
        if _VERSION.match(version) and _complete(folder, package, version):
            key = tuple(int(p) for p in version.split("-")[0].split("."))
            found.append((key, folder))
    return sorted(found, reverse=True)


@functools.cache
def _latest(package: str) -> str | None:
    """The registry's `latest` version of `package` (once a process), None when it cannot say."""
    try:
        done = subprocess.run(
            [_npm(), "view", "--fetch-retries=1", f"{package}@latest", "version"],
            capture_output=True,
            text=True,
            timeout=VIEW_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and _VERSION.match(version) else None


def npm_package(package: str, version: str = "latest") -> Path:
    """The folder (an npm `--prefix`) holding `package` at `version`, installed once; skips the
    calling test, saying why and how to enable it, where it cannot be had."""
    if not _NAME.match(package):
        raise ValueError(f"not an npm package name: {package!r}")
    if version == "latest":
        resolved = _latest(package)
        if resolved is None:
            cached = _installed(package)
            if cached:  # offline, or the registry is slow: the newest install we already have
                return cached[0][1]
            pytest.skip(
                f"the npm registry did not say which {package} is latest and none is cached; "
                f"to enable: {enable_hint(package)}"
            )
        version = resolved
    if not _VERSION.match(version):
        raise ValueError(f"not a version: {version!r}")
    folder = cache_root() / f"{_folder_name(package)}@{version}"
    if _complete(folder, package, version):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One install a version across the xdist workers: the others wait for it, then reuse it.
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(folder, package, version):
            _install(package, version, folder)
    return folder


def _install(package: str, version: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    argv = [_npm(), "install", "--no-audit", "--no-fund", "--prefix", str(folder)]
    try:
        done = subprocess.run(
            [*argv, f"{package}@{version}"],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm install {package}@{version} took over {INSTALL_TIMEOUT:.0f} s; "
            f"to enable: {enable_hint(package, version)}"
        )
    if done.returncode != 0:
        pytest.skip(
            f"npm install {package}@{version} failed: {done.stderr.strip()[-300:]}; "
            f"to enable: {enable_hint(package, version)}"
        )
