"""Fixtures for the reflector tests: a scripted OpenAI-compatible server over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reflectors.openai_server import ScriptedLLM, serve_scripted_llm


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """A running scripted LLM server; the test fails if it left replies unused or
    made a request the script did not foresee."""
    with serve_scripted_llm() as server:
        yield server
        assert server.unused == 0, f"{server.unused} scripted replies were never requested"
        assert server.exhausted == 0, f"{server.exhausted} requests arrived after the script ran out"
