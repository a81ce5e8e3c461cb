"""The HTTP layer: dependencies, wire schemas, error handlers, routes, and the middleware that
bounds bodies (``uploads``) and refuses other sites' requests (``cross_site``)."""
