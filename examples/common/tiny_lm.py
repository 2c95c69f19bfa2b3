"""A tiny causal LM as a policy over a few action words, built from a config: a
word-level tokenizer made here from a word list, a randomly initialised Llama, and
the next-token distribution renormalised over the actions. Nothing is downloaded.

`vocabulary(words)` is an example's own words plus TEMPLATE_WORDS, the fixed parts
of Reflexa's default context template (docs/trainers.md, "Teacher contexts"), so a
context the server renders tokenizes without [UNK] except where it quotes text the
example never uses.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers import models as tokenizer_models
from transformers import LlamaConfig, LlamaForCausalLM

PAD, BOS, UNK = "[PAD]", "[BOS]", "[UNK]"
_TEMPLATE = """
you are an agent working on a task choose the next action
observation result of your last system user assistant
privileged context what memory holds for states like this one learned from other attempts skills heuristics past
experience similar state taken attempt attempts succeeded failed return to go heuristic skill exemplar
hindsight step steps ahead this went on reveal after it tells happened not right answer s reward outcome failure
reason the ended had no recorded earlier omitted action withheld did reach within moves when avoid prefer
from led worked and or with by for at is in lower bound rate evidence card cards so far
"""
TEMPLATE_WORDS = _TEMPLATE.split()
_PUNCTUATION = ". , : ; ( ) [ ] - + / ' ? ! % = < > _ * \" #"
PUNCTUATION = _PUNCTUATION.split()
DIGITS = [str(i) for i in range(10)]


def vocabulary(words: Sequence[str]) -> list[str]:
    """The special tokens, then each word once (lower case), punctuation and digits."""
    return [PAD, BOS, UNK, *dict.fromkeys([w.lower() for w in words] + TEMPLATE_WORDS + PUNCTUATION + DIGITS)]


def word_tokenizer(tokens: Sequence[str]) -> Tokenizer:
    """A tokenizer of exactly `tokens` (PAD, BOS, UNK first; see `vocabulary`):
    lower-cased words split on whitespace and at each punctuation mark, numbers into
    digits, unknown words [UNK], [BOS] first when special tokens are asked for."""
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(tokenizer_models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tokenizer.add_special_tokens([PAD, BOS, UNK])
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return tokenizer


def tiny_llama(
    vocab_size: int, seed: int | None, *, width: int = 32, layers: int = 2, positions: int = 2048, **config: Any
) -> LlamaForCausalLM:
    """A randomly initialised Llama of `layers` layers of width `width`, for `positions`
    tokens at most, from a fixed seed (None: torch's generator as it stands). `config`:
    other LlamaConfig fields, over [PAD] 0, [BOS] 1 and no end token (`vocabulary`'s)."""
    if seed is not None:
        torch.manual_seed(seed)
    special = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": None}
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=positions,
            **{**special, **config},
        )
    )


class ActionPolicy:
    """The LM as a policy over the action words: its next-token distribution after the
    context, renormalised over the actions (one token each)."""

    def __init__(
        self, model: LlamaForCausalLM, tokenizer: Tokenizer, actions: Sequence[str], lock: threading.Lock | None = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.actions = tuple(actions)
        self.lock = lock or threading.Lock()
        self.action_ids = [tokenizer.token_to_id(a) for a in self.actions]
        if None in self.action_ids:
            raise ValueError(f"every action must be one word of the vocabulary: {self.actions}")
        self.pad = tokenizer.token_to_id(PAD)

    def context_ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text).ids)

    def log_softmax(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """[batch, longest, vocab]: row p of sequence b is log π(· | b[:p+1]) (right padding)."""
        longest = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), longest), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, s in enumerate(sequences):
            ids[b, : len(s)] = torch.tensor(list(s))
            mask[b, : len(s)] = 1
        return torch.log_softmax(self.model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)

    def action_logprobs(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        """[batch, actions]: log π(action | context), renormalised over the actions (with the graph)."""
        rows = self.log_softmax(contexts)
        last = torch.stack([rows[b, len(c) - 1, self.action_ids] for b, c in enumerate(contexts)])
        return torch.log_softmax(last, dim=-1)

    def sample(self, contexts: Sequence[Sequence[int]], generator: torch.Generator) -> list[int]:
        """An action index per context, sampled from the renormalised distribution."""
        with self.lock, torch.no_grad():
            last = self.action_logprobs(contexts)
        return torch.multinomial(last.exp(), 1, generator=generator)[:, 0].tolist()

    def greedy(self, contexts: Sequence[Sequence[int]]) -> list[int]:
        """The most likely action index per context."""
        with self.lock, torch.no_grad():
            return self.action_logprobs(contexts).argmax(dim=-1).tolist()
