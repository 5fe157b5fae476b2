"""Ladders: the steps of an optimization ladder, from file to launched servers to evaluated runs.

- `file`: parsing and checking a ladder file (`builtin/` holds the shipped ones).
- `launch`: starting a step's server, waiting for health, stopping its process group.
- `run`: evaluating every step of a ladder in order.
- `servers`: the record and watchdog of every server evalsvc launched.
- `watchdog`: the standalone script that stops a server whose launcher died.
"""
