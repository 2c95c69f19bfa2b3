"""An end-to-end trainer loop on the CPU: a tiny policy LM learns a toy text task by
policy gradient, with Reflexa in the loop for memory, teacher contexts, teacher
scoring and shaped per-token advantages.

    python -m examples.trainer_loop --self-contained --iterations 30
    python -m examples.trainer_loop --url http://127.0.0.1:8080 --api-key rfx_... --iterations 30

Per iteration, for every task, a rollout group of G episodes is sampled with the
policy, then, through the public client only:

1. ingest: ``create_trajectories`` (one batch, closed: ``group_id``, ``policy_version``, ``outcome``);
2. pin memory: ``create_snapshot`` (deleted at the end of the iteration);
3. teacher contexts: ``distill_contexts`` with a ``memory`` and a ``hindsight`` teacher,
   under the snapshot;
4. teacher scoring: ``teacher_logprobs`` of the action words after each step's
   teacher contexts (Reflexa asks its configured teacher endpoint);
5. the student's own log-probs of the sampled actions after the plain contexts,
   computed here;
6. ``distill_advantages`` with ``token_signal`` (SEED / on-policy distillation: beta
   times the teacher-student log-prob gap per token, on top of the outcome advantage
   of the group: Dr. GRPO by default, GRPO with ``--std``);
7. a REINFORCE update with the returned per-token advantages (no PPO ratio, no
   critic; a small entropy bonus).

It prints per iteration the mean reward, the success rate and the diagnostics of the
signal (order consistency, clip share, length correlation, …).

The task ("say the word the state names"): four panels of three coloured lamps; an
episode reads one panel, one lamp per step ("lamp 2 of 3 on panel b is red"), and
the action is the lamp's colour (red, blue, green or yellow). A wrong name ends the
episode; the step reward is 1 for a right name, the outcome reward the share of the
panel named, success all three.

The policy: a randomly initialised two-layer Llama (width 32) built from a config,
with a WordLevel tokenizer built here with ``tokenizers``; nothing is downloaded. Its
prompt at a step is the plain context Reflexa's default template renders for that
step (the task as the system message, the history, the observation; checked
against the server's every iteration, token for token), and the action is the next
token, sampled from the LM's next-token distribution renormalised over the four
colours. The teacher is read the same way: every colour is scored after each
teacher context and renormalised, so the signal compares two policies over the
same actions, each as it would sample.

The teacher, served by examples/tiny_teacher_server.py over vLLM's completions
protocol: with ``--teacher trained`` (the default) a second tiny model of the same
shape taught the panels by a hundred supervised steps before the loop starts
(on-policy distillation from a teacher that knows the task); with ``--teacher
self`` the policy itself (SEED's signal: the shift that privileged context causes
on the actions actually taken); with ``--teacher frozen`` a second tiny model,
random and never trained. The diagnostics tell them apart.

``--self-contained`` starts everything: the teacher endpoint (a thread) and Reflexa
(``reflexa serve`` on SQLite in a temporary directory, the hashing embedder, the
teacher settings pointing at the endpoint). With ``--url`` the server must already
run with its teacher pointing where this loop serves it (``--teacher-port``):

    REFLEXA_TEACHER__BASE_URL=http://127.0.0.1:8011 REFLEXA_TEACHER__MODEL=tiny reflexa serve

and ``--api-key`` is a trainer (or admin) key of ``--namespace`` (created when the key may).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, TextIO

import torch
from reflexa import Client, errors, models
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

from examples.common.searchable import wait_searchable
from examples.common.server import EmbeddedServer
from examples.common.tiny_lm import BOS, DIGITS, PAD, UNK, ActionPolicy, tiny_llama, word_tokenizer
from examples.tiny_teacher_server import TeacherEndpoint, serve_completions

# --- the environment: say the colour each lamp shows -----------------------------------------

ACTIONS = ("red", "blue", "green", "yellow")
#: Each task is a panel of three lamps of fixed colours, read one lamp per step.
PANELS = {
    "a": ("red", "blue", "green"),
    "b": ("yellow", "red", "blue"),
    "c": ("green", "yellow", "red"),
    "d": ("blue", "green", "yellow"),
}
TASKS = tuple(f"name the colour of each lamp on panel {name}" for name in PANELS)


@dataclass
class Panel:
    """One episode: name the colour of each lamp in turn; the first wrong name ends it.
    Step reward 1 for a right name; the outcome reward is the share of lamps named."""

    name: str
    named: int = 0
    done: bool = False
    wrong: str | None = None

    @property
    def lamps(self) -> tuple[str, ...]:
        return PANELS[self.name]

    def observation(self) -> str:
        # The colour comes last: the action is the next word of the context.
        return f"lamp {self.named + 1} of {len(self.lamps)} on panel {self.name} is {self.lamps[self.named]}"

    def step(self, action: str) -> tuple[str, float]:
        """(the result text, the step's reward)."""
        colour = self.lamps[self.named]
        if action != colour:
            self.done, self.wrong = True, action
            return f"wrong: the lamp is {colour}.", 0.0
        self.named += 1
        self.done = self.named == len(self.lamps)
        return "right.", 1.0

    @property
    def success(self) -> bool:
        return self.named == len(self.lamps)

    @property
    def reward(self) -> float:
        return round(self.named / len(self.lamps), 4)

    @property
    def failure_reason(self) -> str | None:
        if self.wrong is None:
            return None
        return f"named lamp {self.named + 1} {self.wrong}, but it is {self.lamps[self.named]}"


# --- the tokenizer and the tiny models ---------------------------------------------------------

# Every word of the lamp panels' texts and of the default context template's fixed
# parts (docs/trainers.md, "Teacher contexts"); anything else is [UNK]. The order
# fixes the token ids, and with them the runs docs/trainers.md reports.
_WORDS = """
you are an agent working on a task choose the next action name colour each lamp on panel right wrong named
but a b c d red blue green yellow
observation result of your last system user assistant
privileged context what memory holds for states like this one learned from other attempts skills heuristics past
experience similar state taken attempt attempts succeeded failed return to go heuristic skill exemplar
hindsight step steps ahead this went on reveal after it tells happened not right answer s reward outcome failure
reason the ended had no recorded earlier omitted action withheld did reach within moves when avoid prefer
from led worked and or with by for at is in lower bound rate
"""
_PUNCTUATION = ". , : ; ( ) [ ] - + / ' ? ! % = < > _ *"
VOCAB = [PAD, BOS, UNK, *dict.fromkeys(_WORDS.split() + _PUNCTUATION.split() + DIGITS)]


def build_tokenizer() -> Tokenizer:
    return word_tokenizer(VOCAB)


def tiny_lm(vocab_size: int, seed: int) -> LlamaForCausalLM:
    """A randomly initialised Llama: 2 layers of width 32, from a fixed seed."""
    return tiny_llama(vocab_size, seed, width=32, layers=2)


# --- the plain context, as Reflexa's default template writes it -------------------------------


def plain_context(task: str, history: Sequence[tuple[str, str, str]], observation: str) -> str:
    """The text of the plain context at a step: the task (system), each earlier step's
    observation (user, after the previous result) and action (assistant), the current
    observation. ``history``: (observation, action, result) of the earlier steps."""
    turns = [("system", f"You are an agent working on a task. Choose the next action.\nTask: {task}")]
    previous: str | None = None
    for seen, action, result in [*history, (observation, "", "")]:
        user = f"Observation: {seen}"
        turns.append(("user", user if previous is None else f"Result of your last action: {previous}\n\n{user}"))
        turns.append(("assistant", action))
        previous = result
    return "\n\n".join(f"[{role}]\n{content}" for role, content in turns[:-1])


# --- the policy ---------------------------------------------------------------------------------


class Policy(ActionPolicy):
    """The LM as a policy over the four colours."""

    def __init__(self, model: LlamaForCausalLM, tokenizer: Tokenizer, lock: threading.Lock) -> None:
        super().__init__(model, tokenizer, ACTIONS, lock)


def perfect_contexts(policy: Policy) -> list[tuple[list[int], int]]:
    """(plain context ids, the right action's index) at every step of every panel,
    read without a mistake."""
    out = []
    for task, name in zip(TASKS, PANELS, strict=True):
        env, history = Panel(name), []
        while not env.done:
            observation, colour = env.observation(), env.lamps[env.named]
            out.append(
                (
                    policy.context_ids(plain_context(task, history, observation)),
                    ACTIONS.index(colour),
                )
            )
            result, _ = env.step(colour)
            history.append((observation, colour, result))
    return out


def teach(policy: Policy, steps: int, lr: float = 0.01) -> float:
    """A few supervised steps (full-vocabulary cross-entropy of the right colour after
    the plain context at every step of every panel, one batch) make a teacher that
    knows the task. Returns its accuracy (argmax over the colours)."""
    examples = perfect_contexts(policy)
    contexts = [c for c, _ in examples]
    targets = torch.tensor([policy.action_ids[a] for _, a in examples])
    last = torch.tensor([len(c) - 1 for c in contexts])
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=lr)
    for _ in range(steps):
        rows = policy.log_softmax(contexts)[torch.arange(len(contexts)), last]
        loss = -rows[torch.arange(len(contexts)), targets].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        chosen = policy.action_logprobs(contexts).argmax(dim=-1)
    return float((chosen == torch.tensor([a for _, a in examples])).float().mean())


# --- rollouts -----------------------------------------------------------------------------------


@dataclass
class StepRecord:
    observation: str
    action: str
    result: str
    reward: float
    done: bool
    caused_failure: bool
    context: list[int]  # the plain context's token ids (with BOS), what the policy saw


@dataclass
class Rollout:
    id: str
    task: str
    group_id: str
    env: Panel
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return self.env.reward

    def trajectory(self, iteration: int) -> dict[str, Any]:
        """The body of a stored trajectory (the create_trajectories item)."""
        steps = [
            {
                "index": i,
                "state": {"observation": s.observation},
                "action": s.action,
                "result": s.result,
                "reward": s.reward,
                "done": s.done,
                "caused_failure": s.caused_failure,
            }
            for i, s in enumerate(self.steps)
        ]
        outcome: dict[str, Any] = {"success": self.env.success, "reward": self.reward}
        if self.env.failure_reason is not None:
            outcome["failure_reason"] = self.env.failure_reason
        return {
            "id": self.id,
            "task": self.task,
            "environment": "lamps",
            "agent": "trainer-loop",
            "policy_version": f"it{iteration}",
            "group_id": self.group_id,
            "steps": steps,
            "outcome": outcome,
        }


def sample_rollouts(
    policy: Policy, run: str, iteration: int, group_size: int, generator: torch.Generator
) -> list[Rollout]:
    """G episodes per task, all stepped together (one batched forward per step)."""
    rollouts = [
        Rollout(f"{run}-it{iteration}-t{t}-r{i}", task, f"{run}-it{iteration}-t{t}", Panel(name))
        for t, (task, name) in enumerate(zip(TASKS, PANELS, strict=True))
        for i in range(group_size)
    ]
    while active := [r for r in rollouts if not r.env.done]:
        contexts = []
        for r in active:
            history = [(s.observation, s.action, s.result) for s in r.steps]
            contexts.append(policy.context_ids(plain_context(r.task, history, r.env.observation())))
        for r, context, a in zip(active, contexts, policy.sample(contexts, generator), strict=True):
            observation, action = r.env.observation(), ACTIONS[a]
            result, reward = r.env.step(action)
            failed = r.env.wrong is not None
            r.steps.append(StepRecord(observation, action, result, reward, r.env.done, failed, context))
    return rollouts


# --- one training iteration ---------------------------------------------------------------------

TEACHERS = [
    {"kind": "memory", "k": 3, "max_chars": 600},
    {"kind": "hindsight", "horizon": 1},
]
TEACHER_NAMES = ("memory", "hindsight@1")
MAX_ITEMS = 1000  # teacher items per request (the server's teacher.max_items, by default)


@dataclass
class Scored:
    """One trajectory on the token axis: one token per step, the sampled action word
    (every token the student's own: mask 1)."""

    rollout: Rollout
    tokens: list[int]
    teacher: dict[str, list[float]] = field(default_factory=dict)  # per teacher name, per token

    @property
    def mask(self) -> list[int]:
        return [1] * len(self.tokens)

    @property
    def token_steps(self) -> list[int]:
        return list(range(len(self.tokens)))


@dataclass
class StudentPass:
    """The student after the plain contexts: per trajectory the log-probs of its
    tokens as sampled (renormalised over the actions: the signal's student side),
    the same per step with the graph (the update's), and the mean entropy of the
    action distribution."""

    logprobs: list[list[float]]
    sampled: list[torch.Tensor]  # per trajectory, one entry per step
    entropy: torch.Tensor  # mean over every step of the batch


@dataclass
class Trainer:
    client: Client
    namespace: str
    policy: Policy
    optimizer: torch.optim.Optimizer
    args: argparse.Namespace
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    generator: torch.Generator = field(default_factory=torch.Generator)
    history: list[dict[str, Any]] = field(default_factory=list)

    def iteration(self, n: int) -> dict[str, Any]:
        started = time.monotonic()
        rollouts = sample_rollouts(self.policy, self.run, n, self.args.group_size, self.generator)

        # 1. ingest the groups, closed, in one atomic batch
        self.client.create_trajectories(self.namespace, [r.trajectory(n) for r in rollouts])
        # Indexing is asynchronous: wait until the batch is searchable, so that the snapshot
        # holds it (a retrieve waits for this client's own writes: read-your-writes).
        wait_searchable(self.client, self.namespace, TASKS[0])
        # 2. pin memory for everything this iteration reads
        snapshot = self.client.create_snapshot(self.namespace, f"{self.run}-it{n}").id
        try:
            # 3. the plain and teacher contexts of every step
            contexts = self.client.distill_contexts(
                self.namespace,
                [r.id for r in rollouts],
                TEACHERS,
                snapshot=snapshot,
                # Earlier attempts at the same task are the experience memory offers; the
                # rollout itself and its siblings stay out (the default guards).
                leakage={"allow_same_task": True},
                include=["text"],
            )
        finally:
            self.client.delete_snapshot(self.namespace, snapshot)
        scored = [
            self._scored(r, answer, contexts.template_version)
            for r, answer in zip(rollouts, contexts.trajectories, strict=True)
        ]
        # 4. the teacher's log-probs of every action word after each step's teacher contexts
        self._teacher_logprobs(scored, contexts)
        # 5. the student's own after the plain contexts (with the graph, for the update)
        student = self._student(scored)
        # 6. shaped advantages: the group's outcome advantage plus beta x the teacher-student gap
        groups = self._groups(scored, student)
        params = {"beta": self.args.beta, "clip": self.args.clip, "std": self.args.std}
        signal = self.client.distill_advantages(
            "token_signal", groups, params={**params, "teacher": self.args.signal_teacher}
        )
        other_name = next(t for t in TEACHER_NAMES if t != self.args.signal_teacher)
        other = self.client.distill_advantages("token_signal", groups, params={**params, "teacher": other_name})
        # 7. REINFORCE with the per-token advantages on the sampled action tokens
        change = self._update(scored, signal, student)

        applicable = {
            name: sum(ctx.teachers[name].applicable for t in contexts.trajectories for ctx in t.steps)
            / sum(len(t.steps) for t in contexts.trajectories)
            for name in TEACHER_NAMES
        }
        batch, second = signal.diagnostics.batch, other.diagnostics.batch
        record = {
            "iteration": n,
            "reward": sum(r.reward for r in rollouts) / len(rollouts),
            "success": sum(r.env.success for r in rollouts) / len(rollouts),
            "steps": sum(len(r.steps) for r in rollouts) / len(rollouts),
            "order_consistency": batch.order_consistency,
            "order_pairs": batch.order_pairs,
            "clipped_tokens_share": batch.clipped_tokens_share,
            "length_correlation": batch.length_correlation,
            "token_reward_mean": batch.token_reward.mean if batch.token_reward else None,
            "advantage_std": batch.advantages.std if batch.advantages else None,
            "sign_flips": batch.sign_flips,
            "other_teacher": other_name,
            "other_order_consistency": second.order_consistency,
            "other_length_correlation": second.length_correlation,
            "applicable": applicable,
            "entropy": float(student.entropy.detach()),
            "parameter_change": change,
            "seconds": time.monotonic() - started,
        }
        self.history.append(record)
        return record

    def _scored(self, rollout: Rollout, answer: models.TrajectoryContexts, template: str) -> Scored:
        """The rollout's tokens, its plain contexts checked against what the policy saw."""
        if answer.id != rollout.id or len(answer.steps) != len(rollout.steps):
            raise RuntimeError(f"contexts for {answer.id} do not match the rollout {rollout.id}")
        for i, (step, ctx) in enumerate(zip(rollout.steps, answer.steps, strict=True)):
            if self.policy.context_ids(ctx.plain.text or "") != step.context:
                raise RuntimeError(
                    f"the server's plain context of {rollout.id} step {i} ({template}) is not the prompt the "
                    f"policy saw:\n{ctx.plain.text!r}\nvs\n{self.policy.tokenizer.decode(step.context)!r}"
                )
        return Scored(rollout, [self.policy.action_ids[ACTIONS.index(step.action)] for step in rollout.steps])

    def _teacher_logprobs(self, scored: list[Scored], contexts: models.ContextsResult) -> None:
        """The teacher as a policy over the same actions as the student: at every step,
        under each teacher context, every action word is scored (one item each) and the
        log-probs renormalised over the actions; the sampled action's is the signal's."""
        items: list[dict[str, Any]] = []
        for s, answer in zip(scored, contexts.trajectories, strict=True):
            for i, ctx in enumerate(answer.steps):
                for name in TEACHER_NAMES:
                    for action in self.policy.action_ids:
                        # A context read from distill_contexts goes as it is (its text is sent).
                        items.append(
                            {
                                "id": f"{s.rollout.id}:{i}:{name}:{action}",
                                "context": ctx.teachers[name],
                                "continuation": [action],
                            }
                        )
        scores: list[float] = []
        for start in range(0, len(items), MAX_ITEMS):
            answer = self.client.teacher_logprobs(self.namespace, items[start : start + MAX_ITEMS])
            scores += [item.logprobs[0] for item in answer.items]
        per_action = torch.log_softmax(torch.tensor(scores).view(-1, len(TEACHER_NAMES), len(ACTIONS)), dim=-1)
        k = 0
        for s in scored:
            for token in s.tokens:
                sampled = self.policy.action_ids.index(token)
                for j, name in enumerate(TEACHER_NAMES):
                    s.teacher.setdefault(name, []).append(min(0.0, float(per_action[k, j, sampled])))
                k += 1

    def _student(self, scored: list[Scored]) -> StudentPass:
        """One batched forward over every step's plain context."""
        with self.policy.lock:
            logprobs = self.policy.action_logprobs([step.context for s in scored for step in s.rollout.steps])
        entropy = -(logprobs.exp() * logprobs).sum(dim=-1).mean()
        sampled = logprobs[
            torch.arange(len(logprobs)),
            torch.tensor([self.policy.action_ids.index(t) for s in scored for t in s.tokens]),
        ]
        per_trajectory: list[list[float]] = []
        per_step: list[torch.Tensor] = []
        k = 0
        for s in scored:
            mine = sampled[k : k + len(s.tokens)]
            per_trajectory.append([min(0.0, lp) for lp in mine.tolist()])
            per_step.append(mine)
            k += len(s.tokens)
        return StudentPass(per_trajectory, per_step, entropy)

    def _groups(self, scored: list[Scored], student: StudentPass) -> list[dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for s, own in zip(scored, student.logprobs, strict=True):
            groups.setdefault(s.rollout.group_id, []).append(
                {
                    "id": s.rollout.id,
                    "reward": s.rollout.reward,
                    "token_steps": s.token_steps,
                    "mask": s.mask,
                    "logprobs": {"student": own, "teacher": s.teacher},
                }
            )
        return [{"group_id": g, "trajectories": t} for g, t in groups.items()]

    def _update(self, scored: list[Scored], answer: models.AdvantagesResponse, student: StudentPass) -> float:
        """loss = -mean over the sampled action tokens of A_t log π(a_t | context),
        minus the entropy bonus; one Adam step. Returns |Δθ|."""
        before = torch.nn.utils.parameters_to_vector(self.policy.model.parameters()).detach().clone()
        terms, count = [], 0
        for s, result, logprobs in zip(scored, answer.trajectories, student.sampled, strict=True):
            if result.id != s.rollout.id:
                raise RuntimeError(f"advantages for {result.id} where {s.rollout.id} was expected")
            advantages = torch.tensor([a for a, m in zip(result.advantages, s.mask, strict=True) if m])
            terms.append((advantages * logprobs).sum())
            count += len(advantages)
        loss = -torch.stack(terms).sum() / max(count, 1) - self.args.entropy_coef * student.entropy
        with self.policy.lock:
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), 1.0)
            self.optimizer.step()
        after = torch.nn.utils.parameters_to_vector(self.policy.model.parameters()).detach()
        return float((after - before).norm())


COLUMNS = (
    ("it", 3),
    ("reward", 6),
    ("success", 7),
    ("steps", 5),
    ("order", 5),
    ("pairs", 5),
    ("clip", 5),
    ("len_r", 6),
    ("r_mean", 7),
    ("A_std", 5),
    ("flips", 5),
    ("order2", 6),
    ("len_r2", 6),
    ("mem", 4),
    ("H", 4),
    ("s", 4),
)
HEADER = " ".join(f"{name:>{width}}" for name, width in COLUMNS)


def format_record(r: dict[str, Any]) -> str:
    """One row of the table; n/a where a diagnostic is undefined (no sibling pair, a constant side)."""

    def f(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    values = (
        str(r["iteration"]),
        f(r["reward"], 3),
        f(r["success"], 2),
        f(r["steps"], 2),
        f(r["order_consistency"], 2),
        str(r["order_pairs"] or 0),
        f(r["clipped_tokens_share"], 2),
        f(r["length_correlation"], 2),
        f(r["token_reward_mean"], 3),
        f(r["advantage_std"], 2),
        str(r["sign_flips"]),
        f(r["other_order_consistency"], 2),
        f(r["other_length_correlation"], 2),
        f(r["applicable"]["memory"], 2),
        f(r["entropy"], 2),
        f(r["seconds"], 1),
    )
    return " ".join(f"{v:>{width}}" for v, (_, width) in zip(values, COLUMNS, strict=True))


LEGEND = (
    "reward, success, steps: means over the iteration's rollouts; order: order consistency of the applied signal "
    "(token_signal with the {signal} teacher) over the sibling pairs with different rewards (0.5 = chance); "
    "clip: share of tokens whose r_t was clipped; len_r: Pearson r of summed signal and length; r_mean: mean "
    "r_t; A_std: std of the advantages; flips: tokens whose advantage has the opposite sign of A; order2, len_r2: "
    "the same for the {other} teacher (diagnostics only); mem: share of steps memory had something for; H: the "
    "policy's mean action entropy (nats); s: seconds"
)


# --- wiring -------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    history: list[dict[str, Any]]
    parameter_change: float  # |θ_end - θ_start|
    namespace: str
    teacher: TeacherEndpoint


@contextmanager
def _reflexa(args: argparse.Namespace, teacher: TeacherEndpoint, tokenizer_file: Path) -> Iterator[Client]:
    """A trainer's client of the namespace: on a server started here, or on --url."""
    with ExitStack() as stack:
        if args.self_contained:
            env = {
                "REFLEXA_EMBEDDING__BACKEND": "hashing",
                "REFLEXA_TEACHER__BASE_URL": teacher.url,
                "REFLEXA_TEACHER__MODEL": teacher.model_name,
                "REFLEXA_TEACHER__TOKENIZER_FILE": str(tokenizer_file),
                "REFLEXA_TEACHER__RETRY_BACKOFF_SECONDS": "0.05",
            }
            server = stack.enter_context(EmbeddedServer(env=env, startup_timeout=120))
            with Client(server.url, server.admin_key) as admin:
                admin.create_namespace(args.namespace)
                key = admin.create_key("trainer", [args.namespace], description="examples.trainer_loop").key
            url = server.url
        else:
            url, key = args.url, args.api_key
            with Client(url, key) as setup:
                try:
                    setup.create_namespace(args.namespace)
                except errors.Forbidden:  # a trainer key: the namespace must exist
                    setup.get_namespace(args.namespace)
        yield stack.enter_context(Client(url, key, namespace=args.namespace, timeout=120))


def train(args: argparse.Namespace, out: TextIO | None = None) -> TrainResult:
    """Run the loop, printing the table to ``out`` (default stdout)."""
    out = out or sys.stdout
    torch.set_num_threads(max(1, args.threads))
    tokenizer = build_tokenizer()
    model = tiny_lm(tokenizer.get_vocab_size(), args.seed)
    lock = threading.Lock()
    policy = Policy(model, tokenizer, lock)
    teacher_model, taught = model, None
    if args.teacher != "self":
        teacher_model = tiny_lm(tokenizer.get_vocab_size(), args.seed + 1)
        if args.teacher == "trained":
            taught = teach(Policy(teacher_model, tokenizer, lock), args.teacher_steps)
        teacher_model.eval()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(TemporaryDirectory(prefix="reflexa-trainer-loop-")))
        tokenizer_file = tmp / "tokenizer.json"
        tokenizer.save(str(tokenizer_file))
        port = 0 if args.self_contained else args.teacher_port
        teacher = stack.enter_context(serve_completions(teacher_model, tokenizer, port=port, lock=lock))
        client = stack.enter_context(_reflexa(args, teacher, tokenizer_file))
        trainer = Trainer(client, args.namespace, policy, optimizer, args)
        trainer.generator.manual_seed(args.seed)
        size = sum(p.numel() for p in model.parameters())
        other = next(t for t in TEACHER_NAMES if t != args.signal_teacher)
        print(
            f"policy: tiny Llama ({size} parameters, vocabulary {len(VOCAB)}); teacher: {args.teacher}"
            + (f" ({args.teacher_steps} supervised steps, accuracy {taught:.2f})" if taught is not None else "")
            + f", served at "
            f"{teacher.url}; Reflexa at {client.config.base_url}, namespace {args.namespace}; {len(TASKS)} tasks x "
            f"G={args.group_size}; signal: token_signal[{args.signal_teacher}], beta {args.beta}, clip {args.clip}, "
            f"{'GRPO' if args.std else 'Dr. GRPO'} outcome advantages",
            file=out,
        )
        print(textwrap.fill(LEGEND.format(signal=args.signal_teacher, other=other), 120), file=out)
        print(HEADER, file=out, flush=True)
        for n in range(1, args.iterations + 1):
            print(format_record(trainer.iteration(n)), file=out, flush=True)
        end = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        return TrainResult(trainer.history, float((end - start).norm()), args.namespace, teacher)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.trainer_loop", description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--self-contained", action="store_true", help="start Reflexa and the teacher endpoint here")
    where.add_argument("--url", help="a running Reflexa whose teacher.base_url points at --teacher-port")
    p.add_argument("--api-key", help="with --url: a trainer (or admin) key of --namespace")
    p.add_argument("--namespace", help="default: trainer-loop-<random> (self-contained), trainer-loop (--url)")
    p.add_argument("--teacher-port", type=int, default=8011, help="with --url: where the teacher endpoint listens")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--group-size", type=int, default=8, help="rollouts per task per iteration (G)")
    p.add_argument(
        "--teacher",
        choices=("trained", "self", "frozen"),
        default="trained",
        help="trained: a second tiny model taught the panels by a few supervised steps first; self: the policy "
        "itself (SEED); frozen: a second tiny model, random and never trained",
    )
    p.add_argument("--teacher-steps", type=int, default=100, help="supervised steps of the trained teacher")
    p.add_argument("--signal-teacher", choices=TEACHER_NAMES, default="memory", help="whose gap shapes the update")
    p.add_argument("--beta", type=float, default=1.0, help="token_signal's beta")
    p.add_argument("--clip", type=float, default=1.0, help="token_signal's clip of r_t to [-c, c]")
    p.add_argument("--std", action="store_true", help="GRPO's std normalisation (default: Dr. GRPO, centred only)")
    p.add_argument("--entropy-coef", type=float, default=0.02, help="entropy bonus of the action distribution")
    p.add_argument("--lr", type=float, default=0.005, help="Adam's learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = p.parse_args(argv)
    if args.url and not args.api_key:
        p.error("--url needs --api-key")
    if not 2 <= args.group_size <= 64:
        p.error("--group-size must be within 2..64 (the outcome advantage is relative to the siblings)")
    if args.namespace is None:
        args.namespace = f"trainer-loop-{uuid.uuid4().hex[:8]}" if args.self_contained else "trainer-loop"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    result = train(parse_args(argv))
    if result.history:
        first, last = result.history[0], result.history[-1]
        print(
            f"done: {len(result.history)} iterations; reward {first['reward']:.3f} -> {last['reward']:.3f}, "
            f"success {first['success']:.2f} -> {last['success']:.2f}; |θ_end - θ_start| {result.parameter_change:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
