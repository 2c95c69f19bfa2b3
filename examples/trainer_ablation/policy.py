"""The ablation's policy: a 2-layer Llama of width 64 from a config, with a word-level
tokenizer of the doors family's words and Reflexa's template words, acting by the
next token over the three door words."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from examples.common.tiny_lm import ActionPolicy, tiny_llama, vocabulary, word_tokenizer
from examples.trainer_ablation.doors import DOORS, LOOKS, OBJECTS

_WORDS = """
room rooms of floor lies doors door locked opens cross corridor pass all t h
similar taken result attempts succeeded return go in
"""
WORDS = [*_WORDS.split(), *DOORS, *LOOKS, *OBJECTS]
WIDTH, LAYERS = 64, 2


def tokenizer() -> Tokenizer:
    return word_tokenizer(vocabulary(WORDS))


def make_policy(seed: int) -> ActionPolicy:
    tok = tokenizer()
    return ActionPolicy(tiny_llama(tok.get_vocab_size(), seed, width=WIDTH, layers=LAYERS), tok, DOORS)


def parameters(policy: ActionPolicy) -> int:
    return sum(p.numel() for p in policy.model.parameters())


def snapshot_state(policy: ActionPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
