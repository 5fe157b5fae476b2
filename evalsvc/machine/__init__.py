"""What this machine has for a run, and setting up what the demo may install itself.

- `doctor`: the checks behind `evalsvc doctor`, each with the command that fixes it.
- `bubblewrap`: installing bubblewrap for the HumanEval sandbox when it is missing and allowed.
"""
