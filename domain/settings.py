"""Per-namespace settings: what every namespace can tune, with its defaults, and
how stored settings are read back. The API validates them on create; the workers
and the retrieval path read them through `parse_settings`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from domain.schemas import RequestModel

StateField = Literal["task", "observation", "data"]
# The lexical weight a `calibrated` namespace ranks with before its first calibration: in
# the range (0.5-0.8) where hybrid matches or beats every other mode on every near-query
# set of bench/retrieval/quality.py, at its low end (docs/retrieval.md).
UNCALIBRATED_LEXICAL_WEIGHT = 0.5


class StateTextSettings(RequestModel):
    """How a state becomes the text that is embedded and matched (docs/retrieval.md).
    The agent's internal state is embedded separately, never folded in here."""

    fields: list[StateField] = Field(
        default_factory=lambda: ["observation", "data"],
        min_length=1,
        description="what goes into the state text, in order: the task, the observation text, "
        "the structured state data (as sorted `key: value` lines)",
    )
    max_chars: int = Field(2000, ge=100, le=100_000, description="state text is cut to this before embedding")


class RankingSettings(RequestModel):
    """Weights of the retrieval ranking (docs/retrieval.md)."""

    internal_weight: float = Field(
        0.3, ge=0.0, le=1.0, description="weight of the internal-state match when query and item both have one"
    )
    utility_weight: float = Field(
        0.5, ge=0.0, le=2.0, description="how far utility moves an item within the similarity band"
    )
    lexical_weight: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["calibrated"] = Field(
        "calibrated",
        description="share of the lexical match (overlap of the state texts' words and near word pairs, "
        "numbers and short words included) in an item's relevance: (1 - w) * dense cosine + w * lexical; "
        "the lexical index also adds its own best matches to the candidates; 0 turns both off. "
        "`calibrated`: the weight the namespace's own near-duplicate states choose, refreshed as it grows "
        f"(docs/retrieval.md), {UNCALIBRATED_LEXICAL_WEIGHT} until it has enough of them",
    )
    similarity_band: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="utility and recency reorder only items whose similarities are within this of each other; "
        "an exact match of the query state always ranks above every other item (docs/retrieval.md)",
    )
    recency_weight: float = Field(0.1, ge=0.0, le=1.0, description="share of the score that decays with age")
    recency_half_life_days: float = Field(30.0, gt=0.0, description="age at which recency counts half")


class CreditSettings(RequestModel):
    """How a reported outcome is shared among what a retrieval served (docs/retrieval.md)."""

    unnamed_top_k: int = Field(
        3,
        ge=0,
        le=100,
        description="an outcome that names no item_ids (and an episode closing over its retrievals) credits only "
        "the served items ranked in the top this-many: an agent acts on what ranks first, not on all 100 look-alikes "
        "of a context; 0 credits every served item",
    )
    holdout_rate: float = Field(
        0.0,
        ge=0.0,
        le=0.5,
        description="share of the episodes from which each item that would be served is withheld at random, to "
        "estimate its causal effect on success (never an exact match, never under a snapshot); 0 = off",
    )


class ContrastiveSettings(RequestModel):
    """The offline contrastive-heuristics reflector (docs/reflection.md)."""

    enabled: bool = True
    similarity: float = Field(0.85, ge=0.5, le=1.0, description="cosine that puts two states in one neighbourhood")
    min_support: int = Field(5, ge=1, description="attempts an action needs before it becomes a heuristic")
    min_confidence: float = Field(0.5, ge=0.0, le=1.0, description="Wilson lower bound the rate must reach")
    min_lift: float = Field(0.2, ge=0.0, le=1.0, description="how much better a 'prefer' action must do")


class EvidenceCardSettings(RequestModel):
    enabled: bool = True
    groups: int = Field(3, ge=1, le=100, description="latest rollout groups a task's card draws on")


LLMReflector = Literal["heuristics", "skills", "rubrics", "golden_negatives"]


class LLMReflectionSettings(RequestModel):
    """The LLM reflectors (docs/reflection.md). They run only when the server has an
    LLM configured (`REFLEXA_LLM__BASE_URL`); these settings choose what they do per
    namespace."""

    enabled: bool = Field(True, description="run the LLM reflectors in this namespace (when an LLM is configured)")
    reflectors: list[LLMReflector] = Field(
        default_factory=lambda: ["heuristics", "skills", "rubrics", "golden_negatives"],
        description="which LLM reflectors run: heuristics (every closed attempt), skills (successes), "
        "rubrics (tasks with mixed outcomes), golden_negatives (failed attempts with metadata.expert = true)",
    )
    dedup_similarity: float = Field(
        0.92,
        ge=0.5,
        le=1.0,
        description="cosine at or above which a new heuristic or skill is the same as an existing one: its "
        "evidence is merged into it (an automatic UPVOTE, no LLM call)",
    )
    maintenance_similarity: float = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="cosine at or above which existing heuristics are shown to the pool-maintenance prompt as "
        "neighbours of a new one (ADD / EDIT / UPVOTE / DOWNVOTE); with none, the new one is added",
    )
    max_neighbours: int = Field(5, ge=1, le=20, description="most existing heuristics shown to pool maintenance")
    activation: Literal["evidence", "operator"] = Field(
        "evidence",
        description="evidence: a candidate becomes active when its importance reaches activation_importance; "
        "operator: only an operator's approval (PATCH status active) activates",
    )
    activation_importance: int = Field(
        3,
        ge=1,
        le=1000,
        description="importance (1 when added, +1 per UPVOTE / EDIT / merged duplicate, -1 per DOWNVOTE) at which "
        "a candidate becomes active; for a rubric, the attempts it was written from",
    )
    rubric_attempts: int = Field(
        8, ge=2, le=32, description="most attempts of a task shown to the rubrics prompt (successes and failures)"
    )
    rubric_min_new_attempts: int = Field(
        2, ge=1, le=100, description="attempts not yet behind a task's rubric needed before it is rewritten"
    )
    max_prompt_steps: int = Field(
        60, ge=4, le=1000, description="most steps of one trajectory shown to a prompt (first and last kept)"
    )

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> LLMReflectionSettings:
        if self.maintenance_similarity > self.dedup_similarity:
            raise ValueError("maintenance_similarity must not exceed dedup_similarity")
        return self


class ReflectionSettings(RequestModel):
    contrastive: ContrastiveSettings = Field(default_factory=ContrastiveSettings)
    evidence_cards: EvidenceCardSettings = Field(default_factory=EvidenceCardSettings)
    llm: LLMReflectionSettings = Field(default_factory=LLMReflectionSettings)


class DistillSettings(RequestModel):
    """Teacher contexts for on-policy distillation (docs/trainers.md)."""

    tokenizer_file: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="a Hugging Face `tokenizers` tokenizer.json on the server (the student's tokenizer): when set, "
        "teachers may ask for max_tokens and every context reports its tokens",
    )


class NamespaceSettings(RequestModel):
    """Per-namespace behaviour; every field has a default, unknown fields are refused."""

    gamma: float = Field(0.95, ge=0.0, le=1.0, description="discount for return-to-go")
    state_text: StateTextSettings = Field(default_factory=StateTextSettings)
    ranking: RankingSettings = Field(default_factory=RankingSettings)
    credit: CreditSettings = Field(default_factory=CreditSettings)
    reflection: ReflectionSettings = Field(default_factory=ReflectionSettings)
    distill: DistillSettings = Field(default_factory=DistillSettings)


def parse_settings(stored: dict[str, Any]) -> NamespaceSettings:
    """Stored settings with today's defaults filled in (older rows lack newer fields)."""
    return NamespaceSettings.model_validate(stored, strict=False)


def ranking_settings(stored: dict[str, Any], calibrated_lexical_weight: float | None) -> NamespaceSettings:
    """The settings a retrieval ranks with: a `calibrated` lexical weight resolved to
    the namespace's calibrated weight, or UNCALIBRATED_LEXICAL_WEIGHT before it has one."""
    settings = parse_settings(stored)
    if settings.ranking.lexical_weight == "calibrated":
        settings.ranking.lexical_weight = (
            UNCALIBRATED_LEXICAL_WEIGHT if calibrated_lexical_weight is None else calibrated_lexical_weight
        )
    return settings
