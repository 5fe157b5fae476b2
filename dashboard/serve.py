"""`python -m dashboard.serve run APP [streamlit options]`: Streamlit's own command line, with the
dashboard's heavy imports done before the server listens.

Streamlit runs a page's script only when a browser connects, so without this
the first person to open the dashboard after a start waits for pandas, SciPy,
Altair, SQLAlchemy and the statistics to import (seconds on a busy machine).
The server process is the one that later runs the scripts, so importing here
is importing once for all of them.
"""

from __future__ import annotations

import sys


def preload() -> None:
    """Import what every page needs; the pages find it in `sys.modules`."""
    import altair  # noqa: F401
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    import sqlalchemy  # noqa: F401

    import dashboard.analysis  # noqa: F401
    import evalsvc.decision.build  # noqa: F401
    import evalsvc.reports  # noqa: F401


def main() -> None:
    preload()
    from streamlit.web import cli

    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
