"""The LINQ-like operator library, built on the vertex API (arrives with its own issue)."""
