"""The embedded CPU engine (llama.cpp serving SmolLM2), built and served for the demo ladder.

- `embedded`: building the engine in its own virtual environment and what the ladder needs from it.
- `demo`: the demo: that ladder built, evaluated on a few items per task, timed and compared.
- `bubblewrap`: installing bubblewrap for the demo's HumanEval sandbox when it is missing and allowed.
"""
