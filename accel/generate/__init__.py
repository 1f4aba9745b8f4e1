"""Generation as a workload: a decoder language model producing tokens.

``settings`` reads a recipe's ``benchmark`` (``workload: generate``, ``prompt_tokens``,
``new_tokens``, ``batch``) and checks it against the model; ``decoders`` runs a loaded model
one token at a time (prefill, then decode steps) through its KV cache, or without one by
recomputing the sequence; ``timing`` times generations (time to first token, time per output
token, tokens/s) and compares two models in alternating rounds; ``parity`` compares their
logits teacher-forced over the reference continuation and reports where free-running greedy
decoding first diverges; ``memory`` splits memory into weights and KV cache.

Nothing here applies a pass or writes run events; the runner and the CLI call these.
"""
