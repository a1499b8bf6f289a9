import json
import shutil

from accelopt.nodes.common import task_of
from tests.conftest import TASKS


def test_the_task_is_loaded_once_and_again_after_an_edit(tmp_path):
    root = tmp_path / "softmax"
    shutil.copytree(TASKS / "softmax", root)
    first = task_of(str(root))
    assert task_of(str(root)) is first  # nodes share one validated task per content
    spec = json.loads((root / "task.json").read_text())
    spec["description"] = "edited " + spec["description"] + " (longer)"
    (root / "task.json").write_text(json.dumps(spec))
    edited = task_of(str(root))
    assert edited is not first and edited.spec.description.startswith("edited ")
