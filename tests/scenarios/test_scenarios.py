from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.runner import ROOT, bundles, run_bundle

pytestmark = pytest.mark.scenarios


@pytest.mark.parametrize("folder", bundles(), ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_scenario(folder: Path) -> None:
    run_bundle(folder)
