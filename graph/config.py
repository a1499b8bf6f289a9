"""Build a RunContext from, in rising precedence: defaults, a TOML config file, environment
variables, and the door's own input: the CLI's flags (`load_context`), or the context a caller of
`graph.invoke`, `langgraph dev` (the SDK, Studio) or MCP (`settings`) gave (`resolve_context`,
applied by graph/doors.py). Every door resolves alike; run.json's `sources` says, per setting,
where its value came from (default, the config file's path, $ACCELOPT_..., flag, or context).

accelopt.toml:
    [run]
    beams = 2
    iterations = 4
    [models.default]
    model = "vllm:openai/gpt-oss-120b"
    base_url = "http://gpu-box:8000/v1"
    reasoning_effort = "medium"
    max_attempts = 4       # per call; transient errors (429, 5xx, timeouts) are retried
    timeout_s = 300
    [models.executor]      # every field not set here is [models.default]'s
    model = "vllm:Qwen/Qwen3-Coder-480B-A35B-Instruct"
    base_url = "http://gpu-box:8001/v1"
    input_price = 0.2      # $ per 1M tokens, if you want self-hosted time priced
    [prices]               # $ per 1M tokens [input, output], by model label or name prefix
    "gpt-4.1" = [2.0, 8.0]
    "vllm:openai/gpt-oss-120b" = [0.1, 0.5]

Environment (read through tools/settings.py): ACCELOPT_MODEL, ACCELOPT_BASE_URL, ACCELOPT_<ROLE>_MODEL,
ACCELOPT_<ROLE>_BASE_URL, ACCELOPT_CONFIG, ACCELOPT_RAY_ADDRESS ([cluster] ray_address = "auto"; `--cluster
ray`: evaluation on a Ray cluster, tools/harness/ray_pool.py). Flags: model, base_url, <role>_model,
<role>_base_url and RunContext's fields.

A role's settings inherit [models.default] field by field (nodes/context.inherit). The context
built is checked as every run's is (nodes/context.settings_refusal: types, minimums, the models'
settings), so a bad value is a ConfigError here, in one line, before any work.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelopt.nodes.context import RunContext, refuse, run_setting_names, settings_refusal
from accelopt.nodes.schedule import DEFAULT_SCHEDULE
from accelopt.tools import settings
from accelopt.tools.llm_spec import (
    ROLES,
    ConfigError,
    check_model_settings,
    unknown_key,
)

_RUN_KEYS = {f.name for f in dataclasses.fields(RunContext)} - {"role_models", "chat_models", "model", "base_url",
                                                                 "prices"}
_TABLES = {"run", "models", "cluster", "prices"}


def _refuse_unknown(table: dict, valid: set[str], where: str) -> None:
    """A key no setting reads is a typo that would otherwise run on silently: refuse it, with the
    closest valid key."""
    for key in table:
        if key not in valid:
            raise ConfigError(unknown_key(key, valid, where))


@dataclass
class _Layers:
    """The settings as each source left them, and which source set each (run.json `sources`)."""

    values: dict[str, Any] = field(default_factory=dict)
    default: dict[str, Any] = field(default_factory=dict)         # [models.default]: model, base_url, ...
    role_models: dict[str, dict] = field(default_factory=dict)
    prices: dict[str, list[float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=lambda: dict.fromkeys(run_setting_names(), "default"))

    def role(self, role: str, key: str, value: Any, source: str) -> None:
        if role == "default":
            self.default[key] = value
            self.sources[key] = source
        else:
            self.role_models.setdefault(role, {})[key] = value
            self.sources["role_models"] = source


def _file_layer(layers: _Layers, path: Path) -> None:
    """accelopt.toml (or $ACCELOPT_CONFIG): [run], [models.*], [cluster], [prices]."""
    data = _read_toml(path)
    _refuse_unknown(data, _TABLES, f"{path} (top level)")
    _refuse_unknown(data.get("run", {}), _RUN_KEYS, f"{path} [run]")
    layers.values.update(data.get("run", {}))
    layers.sources.update(dict.fromkeys(data.get("run", {}), str(path)))
    for role, table in (data.get("models") or {}).items():
        if role not in (*ROLES, "default"):
            raise ConfigError(f"{path}: unknown model role [models.{role}]: use default, {', '.join(ROLES)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: models.{role} must be a table: [models.{role}] with model = \"...\"")
        check_model_settings(table, f"{path} [models.{role}]")
        for key, value in table.items():
            layers.role(role, key, value, str(path))
    cluster = data.get("cluster") or {}
    if set(cluster) - {"ray_address"}:
        raise ConfigError(f"{path}: unknown [cluster] setting(s): {', '.join(sorted(set(cluster) - {'ray_address'}))}"
                          " (use ray_address = \"auto\" or \"ray://host:10001\")")
    if cluster.get("ray_address"):
        layers.values["ray_address"] = cluster["ray_address"]
        layers.sources["ray_address"] = str(path)
    if data.get("prices"):
        layers.prices = _prices(data["prices"], path)
        layers.sources["prices"] = str(path)


def _env_layer(layers: _Layers) -> None:
    """The ACCELOPT_* variables (under `langgraph dev`, .env's too: the server loads it)."""
    if settings.ray_address():
        layers.values["ray_address"] = settings.ray_address()
        layers.sources["ray_address"] = f"${settings.RAY_ADDRESS}"
    for key, value, name in (("model", settings.model(), settings.MODEL),
                             ("base_url", settings.base_url(), settings.BASE_URL)):
        if value:
            layers.role("default", key, value, f"${name}")
    for role in ROLES:
        for key, value in (("model", settings.role_model(role)), ("base_url", settings.role_base_url(role))):
            if value:
                layers.role(role, key, value, f"${'ACCELOPT_' + role.upper() + '_' + key.upper()}")


def _flag_layer(layers: _Layers, flags: dict[str, Any], door: str) -> None:
    """The CLI's flags (a flag not given is None: an earlier source decides)."""
    for key in ("model", "base_url"):
        if flags.get(key):
            layers.role("default", key, flags[key], door)
    for role in ROLES:
        for key in ("model", "base_url"):
            if flags.get(f"{role}_{key}"):
                layers.role(role, key, flags[f"{role}_{key}"], door)
    given = {k: v for k, v in flags.items() if k in _RUN_KEYS and v is not None}
    layers.values.update(given)
    layers.sources.update(dict.fromkeys(given, door))
    if flags.get("cluster") not in (None, "local", "ray"):
        raise ConfigError(f"unknown --cluster {flags['cluster']!r}: use local or ray")
    if flags.get("cluster") == "local":
        layers.values["ray_address"] = None
    elif flags.get("cluster") == "ray" and not layers.values.get("ray_address"):
        layers.values["ray_address"] = "auto"
    if flags.get("cluster"):
        layers.sources["ray_address"] = door


def _layers(config_file: Path | None) -> _Layers:
    """Defaults, then accelopt.toml (or $ACCELOPT_CONFIG, or --config), then the environment."""
    layers = _Layers()
    path = config_file or settings.config_file()
    if path is None and Path("accelopt.toml").is_file():
        path = Path("accelopt.toml")
    if path is not None:
        _file_layer(layers, path)
    _env_layer(layers)
    return layers


def _context(layers: _Layers) -> RunContext:
    """The context the layers make, with its sources (a plan review without a schedule named runs
    beam: RunContext's own rule, said here as the schedule's source)."""
    default = dict(layers.default)
    ctx = RunContext(model=default.pop("model", "tuner"), base_url=default.pop("base_url", None),
                     role_models={**({"default": default} if default else {}), **layers.role_models},
                     prices=layers.prices, **layers.values)
    sources = dict(layers.sources)
    if sources["schedule"] == "default" and ctx.schedule != DEFAULT_SCHEDULE:
        sources["schedule"] = f"default (review_plans: {ctx.schedule})"
    return ctx.with_sources(sources)


def load_context(config_file: Path | None = None, **flags: Any) -> tuple[RunContext, bool]:
    """The CLI's context: defaults, accelopt.toml, the environment, then its flags; and whether a
    model was configured anywhere (else the tuner is used). Refused in one line if it cannot run."""
    layers = _layers(config_file)
    _flag_layer(layers, flags, "flag")
    configured = bool(layers.default.get("model")) or any("model" in s for s in layers.role_models.values())
    ctx = _context(layers)
    refuse(settings_refusal(ctx))  # the checks setup makes for every entry point (nodes/context.py)
    return ctx, configured


def resolve_context(given: Mapping[str, Any] | RunContext | None, door: str = "context") -> RunContext:
    """Every other door's context, resolved as the CLI's is: defaults, accelopt.toml, the environment,
    then the keys the caller named (a dict's keys, or the fields a RunContext was built with), each
    over the earlier sources; role_models and prices merge role by role and model by model. A
    context resolved already (the CLI's) is taken as it is. Checked by setup, as every run's is."""
    if isinstance(given, RunContext) and given.sources():
        return given
    named = ({k: getattr(given, k) for k in given.given_fields()} if isinstance(given, RunContext)
             else dict(given or {}))
    layers = _layers(None)
    for key, value in named.items():
        if key == "model" or key == "base_url":
            layers.role("default", key, value, door)
        elif key == "role_models" and isinstance(value, dict):
            for role, table in value.items():
                for setting, text in (table or {}).items():
                    layers.role(role, setting, text, door)
            layers.sources[key] = door
        elif key == "prices" and isinstance(value, dict):
            layers.prices = {**layers.prices, **value}
            layers.sources[key] = door
        else:
            layers.values[key] = value
            layers.sources[key] = door
    return _context(layers)


def budget_warnings(ctx: RunContext) -> list[str]:
    """What a budget cannot see, said at the start: with a $ budget, roles whose model has no price
    (their calls count as $0, so the budget never stops them)."""
    if ctx.max_cost_usd is None:
        return []
    unpriced: dict[str, list[str]] = {}
    for role in ROLES:
        spec = ctx.model_spec(role)
        if spec.provider != "tuner" and not spec.priced():
            unpriced.setdefault(spec.label(), []).append(role)
    return [f"--max-cost ${ctx.max_cost_usd:g}: {label} ({', '.join(roles)}) has no price, so its calls count as $0 "
            f'and the $ budget cannot stop them; price it with [prices] "{label}" = [input, output] ($ per 1M tokens)'
            for label, roles in unpriced.items()]


def _prices(table: dict, path: Path) -> dict[str, list[float]]:
    """[prices] "model" = [input, output] in $ per 1M tokens."""
    out = {}
    for model, pair in table.items():
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, (int, float)) and p >= 0
                                                                  for p in pair)):
            raise ConfigError(f'{path}: [prices] "{model}" must be [input, output] in $ per 1M tokens, e.g. [0.4, 1.6]')
        out[model] = [float(pair[0]), float(pair[1])]
    return out


def _read_toml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None

