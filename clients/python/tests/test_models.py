"""The checked-in models are what generate.sh makes of docs/openapi.json today."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_models_match_the_openapi_document() -> None:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            ["bash", str(HERE / "generate.sh"), d],
            check=True,
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
        )
        fresh = (Path(d) / "models.py").read_text()
    checked_in = (HERE / "src" / "auditmem" / "models.py").read_text()
    assert fresh == checked_in, (
        "src/auditmem/models.py is not what docs/openapi.json generates: run "
        "`bash clients/python/generate.sh` and commit the result"
    )
