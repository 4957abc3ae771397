"""The demo wing: the whole system run once in one process (``onesided demo``).

It may import the server, the research code and the client SDK; nothing in
the server, research or analysis imports it.
"""
