"""The role's chat model as the LLM policy calls it: what a reply carries besides its text folded
into the text (so that the run cache replays it), a response schema when one is asked for, and
the call labelled so that the graph's messages stream sees it from inside the candidate subgraph."""

from __future__ import annotations

from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from openai import LengthFinishReasonError

from accelopt.policies.replies import encode_reply, reply_of
from accelopt.tools.llm import read_reply


class AnsweringModel(BaseChatModel):
    """The role's chat model, with what call_model's text would drop (finish_reason, tool calls,
    reasoning that came in a field of its own) folded into the reply's text, so that the run
    cache replays it too; and with a response schema when one is asked for. It passes the call
    and its config straight through (no run of its own in a trace: the model's run is the one).
    Under a budget, tools/llm.call_model gives it `read_up_to`: the reply is streamed and read no
    further than the call's reservation (tools/llm.read_reply)."""

    reads_replies: ClassVar[bool] = True  # call_model passes read_up_to and prompt_tokens

    inner: BaseChatModel
    response_format: dict[str, Any] | None = None

    @property
    def _llm_type(self) -> str:
        return "accelopt-answering"

    def invoke(self, input: LanguageModelInput, config: RunnableConfig | None = None, *,
               stop: list[str] | None = None, read_up_to: int | None = None, prompt_tokens: int = 0,
               **kwargs: Any) -> AIMessage:
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        try:
            message = read_reply(self.inner, input, streamed_to_the_graph(config), up_to=read_up_to,
                                 prompt_tokens=prompt_tokens, stop=stop, **kwargs)
        except LengthFinishReasonError as exc:  # openai's parse() raises on a cut-off schema reply
            message = _cut_off_message(exc.completion)
        return AIMessage(content=encode_reply(reply_of(message)), usage_metadata=message.usage_metadata,
                         response_metadata=message.response_metadata)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.invoke(messages, stop=stop, **kwargs))])


def streamed_to_the_graph(config: RunnableConfig | None) -> RunnableConfig | None:
    """The model call's config, so that `graph.stream(..., stream_mode="messages")` sees its chunks
    from whichever node makes it. LangGraph's messages stream drops a model call made inside a
    subgraph (the executor's and fixer's, in the `candidate` subgraph) unless the graph is
    streamed with `subgraphs=True`; while such a stream listens, the call is labelled with its
    node's own namespace (metadata `langgraph_checkpoint_ns`; `checkpoint_ns` keeps the full one),
    so its chunks reach the stream with the node's name and the call's role, candidate and
    iteration. Anything else (graph.invoke, a stream with subgraphs, no stream) gets the config as
    it is; the call itself (request, reply, retries, ledger) is the same either way."""
    try:
        from langchain_core.callbacks import BaseCallbackManager
        from langchain_core.runnables.config import ensure_config
        from langgraph.pregel._messages import StreamMessagesHandler, graph_namespace

        callbacks = ensure_config(config).get("callbacks")
        if not isinstance(callbacks, BaseCallbackManager):
            return config
        seen = {**callbacks.metadata, **((config or {}).get("metadata") or {})}
        if "langgraph_checkpoint_ns" not in seen:
            return config  # not in a graph's node
        ns = graph_namespace(seen)
        dropping = [h for h in callbacks.handlers if isinstance(h, StreamMessagesHandler)
                    and not h.subgraphs and ns and ns != h.parent_ns]
        if not dropping:
            return config
        own = str(seen["langgraph_checkpoint_ns"]).split("|")[len(ns):]  # the node's segment(s) below the graph's
        within = list(dropping[0].parent_ns or ())
        metadata = {**((config or {}).get("metadata") or {}), "langgraph_checkpoint_ns": "|".join(within + own)}
        return {**(config or {}), "metadata": metadata}
    except Exception:  # noqa: BLE001 - another LangGraph's internals: the call goes on unstreamed, as before
        return config


def _cut_off_message(completion: Any) -> AIMessage:
    """The reply inside openai's LengthFinishReasonError, with its token counts."""
    choices = getattr(completion, "choices", None) or []
    content = (choices[0].message.content or "") if choices else ""
    usage = getattr(completion, "usage", None)
    metadata = None  # no counts from the server: tools/llm.py estimates them
    if usage is not None:
        tokens_in, tokens_out = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        details = getattr(usage, "completion_tokens_details", None)
        metadata = UsageMetadata(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out,
                                 output_token_details={"reasoning": int(getattr(details, "reasoning_tokens", 0) or 0)})
    return AIMessage(content=content, usage_metadata=metadata, response_metadata={"finish_reason": "length"})
