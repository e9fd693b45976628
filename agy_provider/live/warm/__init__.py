"""The warm pool: agys kept running between turns (`pool`), one agy's process and lifecycle
table (`agy`), the thread that reads them (`hub`), their tool bridges, registry and turns."""
