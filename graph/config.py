"""Build a RunContext from, in rising precedence: defaults, a TOML config file, environment
variables, and CLI flags.

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
from pathlib import Path
from typing import Any

from accelopt.nodes.context import RunContext, refuse, settings_refusal
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


def load_context(config_file: Path | None = None, **flags: Any) -> tuple[RunContext, bool]:
    """Return the context and whether a model was configured anywhere (else the tuner is used)."""
    values: dict[str, Any] = {}
    role_models: dict[str, dict] = {}
    data: dict = {}
    path = config_file or settings.config_file()
    if path is None and Path("accelopt.toml").is_file():
        path = Path("accelopt.toml")
    if path is not None:
        data = _read_toml(path)
        _refuse_unknown(data, _TABLES, f"{path} (top level)")
        _refuse_unknown(data.get("run", {}), _RUN_KEYS, f"{path} [run]")
        values.update(data.get("run", {}))
        for role, table in (data.get("models") or {}).items():
            if role not in (*ROLES, "default"):
                raise ConfigError(f"{path}: unknown model role [models.{role}]: use default, {', '.join(ROLES)}")
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: models.{role} must be a table: [models.{role}] with model = \"...\"")
            check_model_settings(table, f"{path} [models.{role}]")
            role_models[role] = dict(table)
        cluster = data.get("cluster") or {}
        if set(cluster) - {"ray_address"}:
            raise ConfigError(f"{path}: unknown [cluster] setting(s): {', '.join(sorted(set(cluster) - {'ray_address'}))}"
                              " (use ray_address = \"auto\" or \"ray://host:10001\")")
        if cluster.get("ray_address"):
            values["ray_address"] = cluster["ray_address"]
    if settings.ray_address():
        values["ray_address"] = settings.ray_address()

    prices = _prices(data.get("prices") or {}, path) if path is not None else {}

    default = role_models.get("default", {})
    if settings.model():
        default["model"] = settings.model()
    if settings.base_url():
        default["base_url"] = settings.base_url()
    for role in ROLES:
        for key, value in (("model", settings.role_model(role)), ("base_url", settings.role_base_url(role))):
            if value:
                role_models.setdefault(role, {})[key] = value

    if flags.get("model"):
        default["model"] = flags["model"]
    if flags.get("base_url"):
        default["base_url"] = flags["base_url"]
    for role in ROLES:
        for key in ("model", "base_url"):
            if flags.get(f"{role}_{key}"):
                role_models.setdefault(role, {})[key] = flags[f"{role}_{key}"]
    values.update({k: v for k, v in flags.items() if k in _RUN_KEYS and v is not None})
    if flags.get("cluster") not in (None, "local", "ray"):
        raise ConfigError(f"unknown --cluster {flags['cluster']!r}: use local or ray")
    if flags.get("cluster") == "local":
        values["ray_address"] = None
    elif flags.get("cluster") == "ray" and not values.get("ray_address"):
        values["ray_address"] = "auto"

    configured = bool(default.get("model")) or any("model" in s for r, s in role_models.items() if r != "default")
    ctx = RunContext(model=default.pop("model", "tuner"), base_url=default.pop("base_url", None),
                     role_models={**({"default": default} if default else {}),
                                  **{r: s for r, s in role_models.items() if r != "default"}},
                     prices=prices, **values)
    refuse(settings_refusal(ctx))  # the checks setup makes for every entry point (nodes/context.py)
    return ctx, configured


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

