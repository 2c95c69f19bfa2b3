"""Shared parts of the learning examples: the embedded server, the agents and their
memory policy, the experiment runner, statistics and plots. Everything here talks to
Reflexa only through the Python client (``from reflexa import Client``)."""
