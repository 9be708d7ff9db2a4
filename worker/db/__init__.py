"""PostgreSQL access: connections, migrations and the index-metadata check."""
