"""Sources and sinks: collections, files, PySpark (arrive with their own issue)."""
