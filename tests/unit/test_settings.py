"""Settings are read in one place (tools/settings.py), and README's table is that module's.

The source check reads every module of the house with ast: a read of an ACCELOPT_ variable
anywhere else fails, and so does a read whose variable cannot be named from the source (a
computed name, or the whole environment copied), outside the child-environment builders listed
here."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt.tools import settings
from accelopt.tools.settings import ConfigError
from tests.conftest import ROOT
from tests.unit.test_floors import _modules

SETTINGS_PY = "tools/settings.py"

# Where the environment is read by a name the source does not spell, or copied whole: each builds
# the environment of a child process (or is one, taking what it was given). Not settings.
CHILD_ENVIRONMENTS = {
    ("tools/harness/pool.py", "scrubbed_env"): "the judge's: the few variables a kernel may see",
    ("tools/harness/judge_sandboxes.py", "Sandbox.__init__"): "a sandbox's: the judge's own, with its HOME and caches",
    ("tools/harness/zygote.py", "_child"): "a forked sandbox takes the environment the judge sent",
    ("tools/backends/nki.py", "run_worker"): "the NKI worker's: this one, pinned to a NeuronCore",
    ("evals/bench_realworld.py", "run_probes"): "a probe's: this one, with its own Triton cache",
    ("evals/bench_full_run.py", "traced_env"): "a benchmarked run's: this one, traced to a stand-in endpoint",
    ("evals/check_process.py", "checkout_env"): "a process of another checkout's: this one, that checkout first on PYTHONPATH",
}
# ACCELOPT_ reads left in modules others are moving while this was written; route each through
# tools/settings.py (the function named) and delete its line.
NOT_YET_ROUTED: dict[str, str] = {}


# ---------------------------------------------------------------- the source check

def _dotted(path: Path) -> str:
    return "accelopt." + ".".join(path.relative_to(ROOT).with_suffix("").parts)


class _Module:
    """One module's top-level constants and the names it imports from ours."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                          for t in node.targets if isinstance(t, ast.Name)}
        self.modules: dict[str, str] = {}            # alias -> module
        self.names: dict[str, tuple[str, str]] = {}  # alias -> (module, name)
        self.os_names, self.environ_names, self.getenv_names = set(), set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "os":
                        self.os_names.add(a.asname or "os")
                    elif a.asname:
                        self.modules[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if node.module == "os":
                        {"environ": self.environ_names, "getenv": self.getenv_names}.get(a.name, set()).add(
                            a.asname or a.name)
                    else:  # a submodule or a name: both are looked up
                        self.modules[a.asname or a.name] = f"{node.module}.{a.name}"
                        self.names[a.asname or a.name] = (node.module, a.name)


def _resolve(expr: ast.expr, module: _Module, table: dict[str, _Module], depth: int = 0) -> str | None:
    """The variable an expression names, "PREFIX*" for an f-string, None when the source cannot say."""
    if depth > 8:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        head = ""
        for part in expr.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return head + "*"
            head += part.value
        return head
    if isinstance(expr, ast.Name):
        if expr.id in module.constants:
            return _resolve(module.constants[expr.id], module, table, depth + 1)
        source, name = module.names.get(expr.id, ("", ""))
        if source in table and name in table[source].constants:
            return _resolve(table[source].constants[name], table[source], table, depth + 1)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        source = module.modules.get(expr.value.id, "")
        if source in table and expr.attr in table[source].constants:
            return _resolve(table[source].constants[expr.attr], table[source], table, depth + 1)
    return None


def _owners(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the qualified name of the function it is in ("" at module level)."""
    owners: dict[int, str] = {}

    def visit(node: ast.AST, owner: str) -> None:
        owners[id(node)] = owner
        for child in ast.iter_child_nodes(node):
            named = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            visit(child, f"{owner}.{child.name}".lstrip(".") if named else owner)  # type: ignore[attr-defined]
    visit(tree, "")
    return owners


def environment_reads(module: _Module, table: dict[str, _Module]) -> list[tuple[int, str, str | None]]:
    """(line, function, variable) for each read of the environment; variable None where the source
    cannot name it, or where the environment is used whole (copied, cleared, passed on)."""
    def is_environ(node: ast.AST) -> bool:
        return ((isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
                 and node.value.id in module.os_names)
                or (isinstance(node, ast.Name) and node.id in module.environ_names))

    owners, reads, handled = _owners(module.tree), [], set()
    for node in ast.walk(module.tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_environ(node.func.value):
            if node.func.attr in ("get", "setdefault", "pop", "__getitem__", "__contains__") and node.args:
                key = node.args[0]
                handled.add(id(node.func.value))
        elif isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "getenv"
                 and isinstance(node.func.value, ast.Name) and node.func.value.id in module.os_names)
                or (isinstance(node.func, ast.Name) and node.func.id in module.getenv_names)):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            handled.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                key = node.slice
        elif (isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn))
              and is_environ(node.comparators[0])):
            key = node.left
            handled.add(id(node.comparators[0]))
        if key is not None:
            reads.append((node.lineno, owners[id(node)], _resolve(key, module, table)))
    for node in ast.walk(module.tree):
        if is_environ(node) and id(node) not in handled:
            reads.append((node.lineno, owners[id(node)], None))  # type: ignore[attr-defined]
    return reads


def _table(paths: list[Path]) -> dict[str, _Module]:
    return {_dotted(p): _Module(ast.parse(p.read_text())) for p in paths}


def _house() -> tuple[dict[str, Path], dict[str, _Module]]:
    paths = {_dotted(p): p for _, p in _modules()}
    return paths, _table(list(paths.values()))


def test_only_the_settings_module_reads_accelopt_variables():
    paths, table = _house()
    wrong, pending, builders = [], set(), set()
    for dotted, module in table.items():
        where = paths[dotted].relative_to(ROOT).as_posix()
        if where == SETTINGS_PY:
            continue
        for line, owner, name in environment_reads(module, table):
            if name is None:
                if (where, owner) in CHILD_ENVIRONMENTS:
                    builders.add((where, owner))
                else:
                    wrong.append(f"{where}:{line} ({owner or 'module'}) reads the environment by a name the source "
                                 "does not spell, or whole: read a setting through tools/settings.py, or list a "
                                 "child-environment builder in CHILD_ENVIRONMENTS")
            elif name.startswith("ACCELOPT_") or (name.endswith("*") and "ACCELOPT_".startswith(name[:-1])):
                if name in NOT_YET_ROUTED:
                    pending.add(name)
                else:
                    wrong.append(f"{where}:{line} reads {name}: read it through tools/settings.py")
    assert not wrong, "\n".join(wrong)
    stale = [f"{k}: {NOT_YET_ROUTED[k]}" for k in NOT_YET_ROUTED if k not in pending]
    stale += [f"{w} {o}" for w, o in CHILD_ENVIRONMENTS if (w, o) not in builders]
    assert not stale, "listed here but no longer found (delete the entries):\n" + "\n".join(stale)


def test_the_source_check_sees_each_kind_of_read(tmp_path):
    """The check above reads real code (a test that cannot fail is a defect)."""
    (tmp_path / "names.py").write_text('ROOT_ENV = "ACCELOPT_ROOT"\n')
    (tmp_path / "bad.py").write_text(
        "import os as o\nfrom os import environ, getenv\nfrom accelopt.names import ROOT_ENV\n"
        "import accelopt.names as n\nLOCAL = 'ACCELOPT_LOCAL'\n"
        "def f(role):\n"
        "    a = o.environ.get('ACCELOPT_A'); b = o.environ['ACCELOPT_B']; c = 'ACCELOPT_C' in environ\n"
        "    d = getenv(LOCAL); e = environ.get(ROOT_ENV); g = o.environ.get(n.ROOT_ENV)\n"
        "    h = o.environ.get(f'ACCELOPT_{role}_MODEL'); i = o.environ.get(role)\n"
        "    o.environ['ACCELOPT_SET'] = '1'; j = o.environ.get('HOME')\n"
        "class K:\n    def m(self):\n        return dict(o.environ)\n")
    table = {"accelopt.names": _Module(ast.parse((tmp_path / "names.py").read_text())),
             "accelopt.bad": _Module(ast.parse((tmp_path / "bad.py").read_text()))}
    found = [(owner, name) for _, owner, name in environment_reads(table["accelopt.bad"], table)]
    assert sorted(found, key=str) == sorted(
        [("f", "ACCELOPT_A"), ("f", "ACCELOPT_B"), ("f", "ACCELOPT_C"), ("f", "ACCELOPT_LOCAL"),
         ("f", "ACCELOPT_ROOT"), ("f", "ACCELOPT_ROOT"), ("f", "ACCELOPT_*"), ("f", None), ("f", "HOME"),
         ("K.m", None)], key=str)


# ---------------------------------------------------------------- the README table

def _readme_table() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Settings", 1)
    assert len(section) == 2, "README.md has no '## Settings' section"
    lines = section[1].split("\n## ", 1)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [line.rstrip() for line in lines[start:end]]


def test_readme_table_is_the_settings_module():
    assert _readme_table() == settings.markdown_table().splitlines(), (
        "README.md's Settings table differs from tools/settings.py: paste `python -m accelopt.tools.settings`")


def test_every_setting_reads_what_it_documents(monkeypatch):
    """Each documented reader reads its own variables and nothing else (roles as ACCELOPT_<ROLE>_...)."""
    read: list[str] = []
    monkeypatch.setattr(settings, "_given", lambda name: read.append(name))
    readers = {name: fn for name, fn in vars(settings).items() if callable(fn) and getattr(fn, "__module__", "")
               == settings.__name__ and not name.startswith("_") and name not in (
                   "Setting", "ConfigError", "markdown_table", "as_given", "api_key_names")}
    assert len(readers) == len(settings.SETTINGS)
    seen = set()
    for fn in readers.values():
        read.clear()
        fn(*(["planner"] if fn in (settings.role_model, settings.role_base_url) else []))
        documented = [s for s in settings.SETTINGS if " ".join((fn.__doc__ or "").split()) == s.meaning]
        assert len(documented) == 1, fn.__name__
        names = {re.sub("PLANNER", "<ROLE>", n) for n in read}
        assert names == set(documented[0].names), fn.__name__
        seen |= names
    assert seen == {n for s in settings.SETTINGS for n in s.names}


# ---------------------------------------------------------------- what each setting takes

def test_empty_is_unset_and_values_are_read_at_each_call(monkeypatch):
    for name in ("ACCELOPT_CONFIG", "ACCELOPT_MODEL", "ACCELOPT_RUNS_DIR", "ACCELOPT_DEVICE", "ACCELOPT_TRAINIUM",
                 "ACCELOPT_NEURON_CORES", "ACCELOPT_RAY_CPU_SLOTS", "ACCELOPT_UNCONFINED", "ACCELOPT_STRUCTURED_OUTPUT"):
        monkeypatch.setenv(name, "")
    assert (settings.config_file(), settings.model(), settings.runs_dir(), settings.device()) == (
        None, None, Path("runs"), None)
    assert (settings.trainium(), settings.neuron_cores(), settings.ray_cpu_slots()) == ("trn1", None, None)
    assert (settings.unconfined(), settings.structured_output()) == (False, True)
    monkeypatch.setenv("ACCELOPT_RUNS_DIR", "/srv/runs")
    monkeypatch.setenv("ACCELOPT_PLANNER_BASE_URL", "http://gpu-box:8002/v1")
    assert settings.runs_dir() == Path("/srv/runs")
    assert settings.role_base_url("planner") == "http://gpu-box:8002/v1" and settings.role_base_url("fixer") is None


@pytest.mark.parametrize("value, unconfined", [("1", True), ("true", True), ("YES", True), ("0", False),
                                               ("false", False), ("off", False)])
def test_flags(monkeypatch, value, unconfined):
    monkeypatch.setenv("ACCELOPT_UNCONFINED", value)
    monkeypatch.setenv("ACCELOPT_STRUCTURED_OUTPUT", value)
    assert settings.unconfined() is unconfined and settings.structured_output() is unconfined


@pytest.mark.parametrize("name, value, reader", [
    ("ACCELOPT_UNCONFINED", "maybe", settings.unconfined),
    ("ACCELOPT_STRUCTURED_OUTPUT", "json", settings.structured_output),
    ("ACCELOPT_DEVICE", "gpu", settings.device),
    ("ACCELOPT_RAY_CPU_SLOTS", "-1", settings.ray_cpu_slots),
    ("ACCELOPT_RAY_CPU_SLOTS", "four", settings.ray_cpu_slots),
    ("ACCELOPT_NEURON_CORES", "5-2", settings.neuron_cores),
    ("ACCELOPT_NEURON_CORES", "a,b", settings.neuron_cores)])
def test_a_value_a_setting_cannot_use_names_the_variable(monkeypatch, name, value, reader):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"{name}={value!r}"):
        reader()


def test_parsed_values(monkeypatch):
    monkeypatch.setenv("ACCELOPT_NEURON_CORES", "0-3, 8")
    monkeypatch.setenv("ACCELOPT_RAY_CPU_SLOTS", "0")
    monkeypatch.setenv("ACCELOPT_DEVICE", "cpu")
    assert settings.neuron_cores() == [0, 1, 2, 3, 8] and settings.ray_cpu_slots() is None
    assert settings.device() == "cpu"
    monkeypatch.setenv("ACCELOPT_RAY_CPU_SLOTS", "4")
    assert settings.ray_cpu_slots() == 4


def test_cuda_visible_devices_keeps_empty(monkeypatch):
    """CUDA reads an empty list as no GPU: not the same as unset."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert settings.cuda_visible_devices() == ""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert settings.cuda_visible_devices() is None


def test_api_key_and_records(monkeypatch):
    monkeypatch.delenv("ACCELOPT_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("MY_KEY", "")
    assert settings.api_key() == ("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("ACCELOPT_API_KEY", "sk-ours")
    assert settings.api_key() == ("ACCELOPT_API_KEY", "sk-ours")
    assert settings.api_key("MY_KEY") is None  # a named variable replaces ours, and empty is unset
    monkeypatch.setenv("ACCELOPT_TRAINIUM", "")
    assert settings.as_given("ACCELOPT_TRAINIUM") == ""  # the run cache keys on the text as set
    with pytest.raises(KeyError):
        settings.as_given("HOME")


def test_confine_loaded_by_path_reads_the_settings_file(tmp_path):
    """The judge and the template load confine.py by path and import nothing of the package;
    confine loads settings.py the same way there."""
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('accelopt_confine', {str(ROOT / 'tools/harness/confine.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['accelopt_confine'] = m; spec.loader.exec_module(m)\n"
            "print(m.unconfined(), m.bwrap_binary(), 'accelopt' in sys.modules, m.settings.__name__)\n")
    env = {"PATH": os.environ.get("PATH", ""), "ACCELOPT_UNCONFINED": "1", "ACCELOPT_BWRAP": "/opt/bwrap"}
    out = subprocess.run([sys.executable, "-I", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["True", "/opt/bwrap", "False", "accelopt_settings"], out.stderr
