"""llama.cpp (llama-server, llama-cli, the bench tools, ik_llama.cpp, LLamaSharp, llama-cpp-python and the
runner ollama embeds): line shapes (lines.py), the KV sizing rule (rules.py), finish and findings."""

from __future__ import annotations

from kvscope.engines.base import Engine, deferred
from kvscope.engines.llamacpp.lines import LlamaCppLines

ENGINE = Engine(name="llamacpp", label="llama.cpp", lines=LlamaCppLines(),
                finish=deferred("kvscope.engines.llamacpp.finish", "finish"),
                findings=deferred("kvscope.engines.llamacpp.findings", "findings"))
