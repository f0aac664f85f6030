"""``python -m llama_cpp.server``, except that every request is evaluated from
an empty context: the test server's answer to a request depends on that
request alone (tests/test_order_independence.py).

The stock server keeps the previous request's tokens in its KV cache and
evaluates only the part of the next prompt that differs. The logits of the
same prompt then come from other batch shapes, which differ in the last bits
and now and then change a sampled token (seen: a prompt asked twice in a row
answered "B" once and "A. The patient’s closest relatives …" otherwise). The
project's own llama.cpp backend avoids this in its own way (medaudit.llm.
llamacpp: stem from position 0, then suffix); for the tests' server, which
compares runs made in different orders, the simplest sure way is no reuse.

Run as a script with llama_cpp.server's own arguments.
"""
from __future__ import annotations

import llama_cpp
from llama_cpp.server.__main__ import main

_generate = llama_cpp.Llama.generate


def _generate_from_empty(self, tokens, *args, **kwargs):
    self.reset()            # n_tokens = 0: no cached prefix, and Llama.eval drops the KV cache from there
    return _generate(self, tokens, *args, **kwargs)


llama_cpp.Llama.generate = _generate_from_empty

if __name__ == "__main__":
    main()
