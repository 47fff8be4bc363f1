"""The incident store: SQLAlchemy models, lifecycle transitions and history queries."""
