"""evalsvc: runner, statistics, task-time model, decision report and CLI."""


def tool_version() -> str:
    """This evalsvc's version, as installed ("unknown" in a source checkout that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evalsvc")
    except PackageNotFoundError:
        return "unknown"
