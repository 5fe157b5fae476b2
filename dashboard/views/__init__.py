"""The dashboard pages, run by st.navigation in dashboard/app.py (not a Streamlit `pages/` folder, so deep links
always go through the app's navigation)."""
