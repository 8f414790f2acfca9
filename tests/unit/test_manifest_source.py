"""The manifests source keeps running while files come and go under it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.ingest.sources import ManifestSource

FLAVOR = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %s}
"""


def test_a_file_deleted_between_listing_and_reading_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text(FLAVOR % "a")
    source = ManifestSource(str(tmp_path))
    listed = [str(tmp_path / "a.yaml"), str(tmp_path / "gone.yaml")]
    monkeypatch.setattr(source, "files", lambda: listed)
    assert [f for f, _, _ in source.fingerprint()] == [str(tmp_path / "a.yaml")]


def test_a_vanished_folder_keeps_the_state_and_a_new_one_is_picked_up(tmp_path: Path) -> None:
    folder = tmp_path / "scenario"
    folder.mkdir()
    (folder / "a.yaml").write_text(FLAVOR % "a")
    source = ManifestSource(str(folder))
    first = source.changes(force=True)
    assert first is not None
    assert [o.name for o in first[0]] == ["a"]
    shutil.rmtree(folder)
    assert source.changes() is None  # logged, nothing published, no exception
    folder.mkdir()
    (folder / "b.yaml").write_text(FLAVOR % "b")
    assert source.changes() is None  # first sight: not yet known to be stable
    later = source.changes()
    assert later is not None
    upserts, deletes = later
    assert [o.name for o in upserts] == ["b"]
    assert deletes == [("ResourceFlavor", "a")]
