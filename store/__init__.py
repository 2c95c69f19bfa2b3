"""The store: SQLAlchemy models and the queries over them. SQL is the source of
truth; this package imports nothing else of Reflexa's."""
