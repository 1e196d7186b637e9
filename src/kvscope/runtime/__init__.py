"""Runtime KV pressure: what the serving lines of a journal say about KV-cache capacity.

A startup's own lines say how big the KV pool is; the lines a server prints while serving
(SGLang ``Decode batch`` / ``Prefill batch`` / retractions, vLLM periodic stats / preemptions) say
whether that pool was the limit. ``kvscope.engines.serving`` turns those lines into RUNTIME events, ``accumulate``
folds them into bounded per-startup state while the journal streams past, ``summary`` and
``verdict`` turn that state into the ``runtime`` section and a plain-words finding.
"""
