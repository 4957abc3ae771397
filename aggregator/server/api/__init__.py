"""HTTP API views, one module per resource; :mod:`aggregator.server.routes` lists them."""
