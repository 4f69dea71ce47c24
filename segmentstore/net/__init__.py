"""The network: the wire protocol and its command registry, request handlers, the server, its settings."""
