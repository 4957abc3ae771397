"""The old path of :mod:`aggregator.api_client` (the HTTP client of the aggregator's API), kept for
scripts that import it from here: the same objects."""

from aggregator.api_client import DEFAULT_SERVER, ApiClient, ApiRequestError

__all__ = ["DEFAULT_SERVER", "ApiClient", "ApiRequestError"]
