import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "evals" / "tasks"
FIXTURES = ROOT / "tests" / "fixtures"

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


def has_nki_simulator() -> bool:
    from accelopt.tools.backends.nki import nki_api

    return nki_api()[0] is not None


def has_trainium() -> bool:
    from accelopt.tools.backends.nki import neuron_devices

    return bool(neuron_devices())


def pytest_collection_modifyitems(config, items):
    needs = {"gpu": (has_gpu, "needs a CUDA GPU"),
             "nki_sim": (has_nki_simulator, "needs the real NKI simulator (AWS Neuron SDK)"),
             "trainium": (has_trainium, "needs a Trainium NeuronCore")}
    for marker, (present, reason) in needs.items():
        if any(marker in item.keywords for item in items) and not present():
            for item in items:
                if marker in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def softmax_task(tmp_path) -> Path:
    """A private copy of the bundled softmax task."""
    dst = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", dst)
    return dst
