"""Chat messages from the shared-history form of teacher contexts.

``distill_contexts(..., include=["parts"])`` states each trajectory's turns once
(:attr:`TrajectoryContexts.history`) instead of repeating the history in every step's
messages; :func:`step_messages` rebuilds a step's messages, plain or under a teacher,
equal to what ``include=["messages"]`` returns for it.
"""

from __future__ import annotations

from reflexa.errors import InvalidInput
from reflexa.models import StepContexts, TrajectoryContexts

Message = dict[str, str]  # {"role": ..., "content": ...}


def step_messages(trajectory: TrajectoryContexts, step: StepContexts, teacher: str | None = None) -> list[Message]:
    """The messages of ``step`` (one of ``trajectory.steps``): the plain context, or
    the context of teacher ``teacher`` (a key of ``step.teachers``)."""
    parts = trajectory.history
    if parts is None:
        raise InvalidInput("this answer has no shared history: ask with include=['parts']", field="include")
    system = parts.system
    if teacher is not None:
        if teacher not in step.teachers:
            raise InvalidInput(f"step {step.index} has no teacher {teacher!r}", field="teacher")
        chosen = step.teachers[teacher].system
        if chosen is None:
            raise InvalidInput(
                "this answer has no teacher system messages: ask with include=['parts']", field="include"
            )
        system = chosen
    first = step.plain.omitted_steps
    if not parts.start <= first <= step.index < parts.start + len(parts.users):
        raise InvalidInput(
            f"step {step.index} (from step {first}) is outside the history sent "
            f"(steps {parts.start} to {parts.start + len(parts.users) - 1})",
            field="history",
        )
    out: list[Message] = [{"role": "system", "content": system}]
    for j in range(first - parts.start, step.index - parts.start):
        out.append({"role": "user", "content": parts.users[j]})
        out.append({"role": "assistant", "content": parts.assistants[j]})
    out.append({"role": "user", "content": parts.users[step.index - parts.start]})
    if step.plain.marker is not None:
        out[1] = {"role": "user", "content": f"{step.plain.marker}\n\n{out[1]['content']}"}
    return out
