import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "evals" / "tasks"

# Nothing in the tests may reach a network or a GPU by accident.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("OPENAI_API_KEY", None)
os.environ.pop("ACCELOPT_API_KEY", None)


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def softmax_task(tmp_path) -> Path:
    """A private copy of the bundled softmax task."""
    dst = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return dst
