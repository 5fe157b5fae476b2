"""The dashboard pages, run through st.navigation in dashboard/app.py.

Not named `pages/`: Streamlit treats a `pages/` folder next to the entry script as an
old-style multipage app and, on a deep link such as /disagreements?task=..., runs
the page alone without the app's navigation and sidebar.
"""
