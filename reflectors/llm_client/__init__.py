"""The LLM layer of the reflectors: settings, the JSON-completion client, token
budgets, the answer schemas, and the errors that tell the worker whether to retry.

Reflectors use it as:

    result = client.complete_json(prompt.render(**values), HeuristicsOut,
                                  namespace=job.namespace, purpose=prompt.id,
                                  context={"step_indexes": [...]})
"""

from reflectors.llm_client.answers import Message
from reflectors.llm_client.budget import InMemoryTokenBudget, Reservation, SqlTokenBudget, TokenBudget, estimate_tokens
from reflectors.llm_client.client import LLMClient, LLMResult
from reflectors.llm_client.errors import LLMBudgetExceeded, LLMError, LLMOutputError, LLMRequestError, LLMUnavailable
from reflectors.llm_client.json_schema import response_format, strict_json_schema
from service.settings import LLMSettings

__all__ = [
    "InMemoryTokenBudget",
    "LLMBudgetExceeded",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
    "LLMRequestError",
    "LLMResult",
    "LLMSettings",
    "LLMUnavailable",
    "Message",
    "Reservation",
    "SqlTokenBudget",
    "TokenBudget",
    "estimate_tokens",
    "response_format",
    "strict_json_schema",
]
