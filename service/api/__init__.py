"""The HTTP layer: dependencies, wire schemas, error handlers, routes."""
