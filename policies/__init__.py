"""The policy floor, between the nodes (above) and tools and memory (below): what the planner,
executor, fixer and summarizer ask instead of prompting.

- interface.py: the typed requests and results every policy answers;
- choice.py: which policy a role gets;
- llm.py: the LLM policy: prompts rendered from the requests (prompting.py, measurement_text.py,
  the $-templates in prompts/), the chat model called through answering.py, plans and lessons
  asked with a response schema where the server takes one (structured_output.py), replies read
  as real models write them (replies.py);
- tuner.py: the no-LLM policy, which moves launch tunables (tools/tunables.py) and plans the
  source rewrites of rewrites.py.
"""
