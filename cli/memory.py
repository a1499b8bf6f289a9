"""`accelopt memory ...`: look after the insight store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelopt.memory.embedder import DEFAULT_EMBEDDER, MemoryStoreError

if TYPE_CHECKING:  # the store (numpy, Chroma) is imported by the commands, not by `--help`
    from accelopt.memory.store import InsightStore

app = typer.Typer(no_args_is_help=True, help="List, search, share and prune the optimization memory.")
console = Console()


def fail(message: str, code: int = 2) -> NoReturn:
    """One error line on stderr, no markup parsing (messages hold [brackets] and paths), then exit."""
    Console(stderr=True).print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True, highlight=False)
    raise typer.Exit(code)

MemoryDir = Annotated[Path | None, typer.Option("--memory", help="Store directory (default: user data dir)")]
MemoryUrl = Annotated[str | None, typer.Option("--memory-url", help="Chroma server, e.g. http://host:8000")]
EmbedderOpt = Annotated[str, typer.Option("--embedder", help="Sentence-transformers model (offline)")]


def _open(memory: Path | None, memory_url: str | None, embedder: str, create: bool = False,
          embed: bool = True) -> InsightStore:
    """The store at --memory (which must exist unless `create`), --memory-url, or the default location.
    `embed=False`: commands that only read do not check the embedding model's files."""
    from accelopt.memory.store import InsightStore, require_store_dir

    try:
        if memory and not memory_url and not create:
            require_store_dir(memory, "check the path; `accelopt memory import FILE --memory DIR` creates a store")
        return InsightStore(memory, url=memory_url, embedder=embedder, check_embedder=embed)
    except MemoryStoreError as e:
        fail(str(e))


def _table(rows) -> Table:
    table = Table("id", "kind", "speedup", "support", "recalls", "task", "title")
    for insight, meta in rows:
        table.add_row(insight.id, insight.kind, f"{insight.evidence.speedup:.2f}x", str(insight.support),
                      str(meta.get("recalls", 0)), insight.evidence.task, insight.title)
    return table


WIDE = 110  # a terminal this wide shows insights as a table; a narrower one (80 columns, a pipe) as blocks


def _print_insights(rows) -> None:
    """A table where it fits whole; else one block per insight, its id whole on the first line
    (`accelopt memory show ID` takes it as printed) and its title below: a seven-column table at 80
    columns cut the ids with an ellipsis."""
    if console.width >= WIDE:
        console.print(_table(rows))
        return
    for insight, meta in rows:
        console.print(f"{insight.id}  {insight.kind}  {insight.evidence.speedup:.2f}x  support {insight.support}  "
                      f"recalls {meta.get('recalls', 0)}  {insight.evidence.task}", markup=False, highlight=False)
        console.print(f"  {insight.title}", markup=False, highlight=False)


@app.command("list")
def list_(memory: MemoryDir = None, memory_url: MemoryUrl = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER,
          limit: int = 50) -> None:
    """Insights, strongest evidence first."""
    store = _open(memory, memory_url, embedder, embed=False)
    rows = sorted(store.all(), key=lambda r: -r[1]["strength"])
    if not rows:  # an empty store says so, rather than printing nothing
        console.print(f"no insights in {store.location}: a GPU run learns them (`accelopt optimize`), or "
                      "`accelopt memory import FILE` brings some")
        return
    _print_insights(rows[:limit])


@app.command()
def search(query: str, memory: MemoryDir = None, memory_url: MemoryUrl = None,
           embedder: EmbedderOpt = DEFAULT_EMBEDDER,
           backend: str = typer.Option("triton", help="triton or nki"),
           k: int = typer.Option(5, "--k", "-k", help="How many insights to return"),
           timer: str = typer.Option("auto", help="auto (this machine's: cuda_event with a GPU, else "
                                                  "interpreter_wall), cuda_event or interpreter_wall")) -> None:
    """Recall as the planner would on this machine: by meaning, re-ranked by evidence, diverse."""
    if timer == "auto":
        from accelopt.tools.harness.runner import gpu_count

        timer = "cuda_event" if gpu_count() else "interpreter_wall"
    store = _open(memory, memory_url, embedder)
    hits = store.recall(query, backend=backend, timer=timer, k=k)
    if not hits:
        other = "interpreter_wall" if timer == "cuda_event" else "cuda_event"
        console.print(f"no {backend} lessons timed with {timer} match (of {store.count()} in {store.location}); "
                      f"--timer {other} searches the others")
        return
    _print_insights([(h, {"recalls": "-"}) for h in hits])


@app.command()
def show(insight_id: str, memory: MemoryDir = None, memory_url: MemoryUrl = None,
         embedder: EmbedderOpt = DEFAULT_EMBEDDER) -> None:
    """One insight, whole, as JSON."""
    store = _open(memory, memory_url, embedder, embed=False)
    insight = store.get(insight_id)
    if insight is None:  # a mistyped id is bad input: exit 2, with where the ids are
        where = f" --memory-url {memory_url}" if memory_url else f" --memory {memory}" if memory else ""
        fail(f"no insight {insight_id!r} in {store.location}: `accelopt memory list{where}` shows the ids")
    console.print_json(insight.model_dump_json())


@app.command("export")
def export_(file: Path, memory: MemoryDir = None, memory_url: MemoryUrl = None,
            embedder: EmbedderOpt = DEFAULT_EMBEDDER) -> None:
    """Write every insight to a JSONL file, to share with a team."""
    console.print(f"exported {_open(memory, memory_url, embedder).export_jsonl(file)} insights to {file}")


@app.command("import")
def import_(file: Path, memory: MemoryDir = None, memory_url: MemoryUrl = None,
            embedder: EmbedderOpt = DEFAULT_EMBEDDER) -> None:
    """Add the insights of a JSONL file (near-duplicates merge); a new --memory DIR is created."""
    created = bool(memory and not memory_url and not memory.exists())
    store = _open(memory, memory_url, embedder, create=True)
    if created:
        console.print(f"created a new memory store at {memory}")
    try:
        count = store.import_jsonl(file)
    except (MemoryStoreError, OSError) as e:
        fail(str(e))
    console.print(f"imported {count} insights; the store holds {store.count()}")


@app.command()
def prune(memory: MemoryDir = None, memory_url: MemoryUrl = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER,
          keep: int = typer.Option(..., help="How many insights to keep (weakest, least recalled go first)")) -> None:
    """Shrink the store to KEEP insights by the eviction rule."""
    store = _open(memory, memory_url, embedder)
    store.flush()
    evicted = store.prune(keep)
    console.print(f"pruned {evicted} insights; {store.count()} remain")


@app.command()
def stats(memory: MemoryDir = None, memory_url: MemoryUrl = None, embedder: EmbedderOpt = DEFAULT_EMBEDDER,
          as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of tables")] = False) -> None:
    """Counts by backend, kind, task, hardware and timer, and where the store lives."""
    store = _open(memory, memory_url, embedder, embed=False)
    rows = store.all()
    out: dict = {"insights": len(rows), "location": store.location}
    for key in ("backend", "kind", "task", "hardware", "timer"):
        counts: dict[str, int] = {}
        for _, meta in rows:
            counts[meta[key]] = counts.get(meta[key], 0) + 1
        out[key] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    if as_json:
        console.print_json(json.dumps(out))
        return
    n = out["insights"]
    count = "no insights" if n == 0 else f"{n} insight{'s' if n != 1 else ''}"
    console.print(Text.assemble((count, "bold"), f" in {out['location']}"), highlight=False)
    for key in ("backend", "kind", "task", "hardware", "timer"):
        if out[key]:
            table = Table(key, "insights", title=f"by {key}", title_justify="left")
            for value, count in out[key].items():
                table.add_row(str(value), str(count))
            console.print(table)
