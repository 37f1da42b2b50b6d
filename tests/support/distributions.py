"""An installed distribution's metadata, as pip leaves it, without pip: for tests of entry points."""

from __future__ import annotations

from pathlib import Path


def declare_distribution(site: Path, name: str, entry_points: dict[str, dict[str, str]], version: str = "1.0") -> Path:
    """Write ``site/<name>-<version>.dist-info`` with its METADATA and ``entry_points`` (``{group: {name:
    "module:object"}}``); ``importlib.metadata`` finds it once ``site`` is on ``sys.path``."""
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    groups = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()]
    (dist / "entry_points.txt").write_text("\n".join(groups))
    return dist
