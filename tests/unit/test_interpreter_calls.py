"""Triton's interpreter patches the language once per launch, not once per nested @jit call
(tools/harness/interpreter_calls.py), and computes the same thing."""

import json
import subprocess
import sys

from accelopt.tools.inductor_seed import seed_source
from tests.conftest import FIXTURES, ROOT

SCRIPT = '''
import json, sys
import torch
from triton.runtime import interpreter
import triton.language as tl

patches = []
patch_lang = interpreter._patch_lang
def counted(fn):
    patches.append(fn.__name__)
    return patch_lang(fn)
interpreter._patch_lang = counted
if sys.argv[2] == "once":
    sys.path.insert(0, sys.argv[3])
    import interpreter_calls
    assert interpreter_calls.install() and interpreter_calls.install()  # a second install is a no-op
namespace = {}
exec(compile(open(sys.argv[1]).read(), "seed", "exec"), namespace)
x = torch.randn(3, 130, generator=torch.Generator().manual_seed(0))
out = namespace["run"](x)
print(json.dumps({"patches": len(patches), "out": out.tolist(), "restored": tl.core.is_builtin(tl.load)}))
'''


def _run(seed_file, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(seed_file), mode, str(ROOT / "tools" / "harness")],
                          capture_output=True, text=True, timeout=120, env={"TRITON_INTERPRET": "1", "PATH": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_helper_inside_a_reduction_no_longer_repatches_the_language_per_element(tmp_path):
    # Inductor's softmax seed reduces with triton_helpers.max2, whose combine function is a @jit
    # helper the interpreter calls once per element pair of a 130-wide row
    seed_file = tmp_path / "seed.py"
    seed_file.write_text(seed_source(json.loads((FIXTURES / "inductor" / "softmax.default.json").read_text())).source)
    as_triton = _run(seed_file, "triton")
    once = _run(seed_file, "once")
    # once for the launch, and once more for a helper module that sees a language module the
    # kernel's does not (triton.language.core); never once per call
    assert as_triton["patches"] > 100 and once["patches"] <= 3
    assert once["out"] == as_triton["out"]  # the same numbers, bit for bit
    assert once["restored"]  # and the launch leaves triton.language as it found it
