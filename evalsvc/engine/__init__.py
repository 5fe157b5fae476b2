"""The embedded CPU engine (llama.cpp serving SmolLM2), built and served for the demo ladder.

- `embedded`: building the engine in its own virtual environment and what the ladder needs from it.
"""
