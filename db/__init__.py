"""The store: SQLAlchemy models, engine and session factory, query functions."""
