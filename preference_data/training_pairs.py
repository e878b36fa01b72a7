"""The pairs a training recipe trains and evaluates on: the training source and its held-out part, loaded and
tokenized with the run's length policy (`reward_models.rm_train`, `align.train`).

The held-out pairs come from the same data config with the `eval` section's source (when given), split and
limit (`prefalign.training.config.HeldOutSection`); `split: none` skips them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefalign.errors import UserError
from prefalign.training.config import HeldOutSection, LengthPolicy

from .report import DataReport
from .sources import DataConfig, load, load_pairs
from .tokenize import ResponseEnd, TokenizedPair, TokenizeReport, tokenize_pairs


@dataclass
class TrainingPairs:
    train: list[TokenizedPair]
    eval: list[TokenizedPair]  # empty with `eval.split: none`
    data: DataReport  # what loading the training source read and dropped
    tokenization: TokenizeReport  # what tokenizing the training pairs kept, cut and dropped
    eval_tokenization: dict[str, Any]  # the held-out pairs' TokenizeReport as a dict ({} without them)

    def reports(self) -> dict[str, Any]:
        """The run's data report (`RecipeRun.save_data_report`)."""
        return {
            "data": self.data.to_dict(),
            "tokenization": self.tokenization.to_dict(),
            "eval_tokenization": self.eval_tokenization,
        }


def load_training_pairs(
    data: DataConfig,
    held_out: HeldOutSection,
    tokenizer: Any,
    max_length: int | None,
    policy: LengthPolicy,
    response_end: ResponseEnd = "eos",
) -> TrainingPairs:
    """Training and held-out pairs, tokenized; an error when no training pair is left after tokenization."""
    train_raw, data_report = load_pairs(data)
    train, tok_report = tokenize_pairs(train_raw, tokenizer, max_length, policy, response_end=response_end)
    if not train:
        raise UserError(
            f"no training pairs left after tokenization (max_length={max_length}, "
            f"policy={policy}): {tok_report.summary()}"
        )
    held: list[TokenizedPair] = []
    held_tok: dict[str, Any] = {}
    if held_out.split != "none":
        held_raw = load(held_out.data_config(data)).pairs
        held, held_rep = tokenize_pairs(held_raw, tokenizer, max_length, policy, response_end=response_end)
        held_tok = held_rep.to_dict()
    return TrainingPairs(train, held, data_report, tok_report, held_tok)


__all__ = ["TrainingPairs", "load_training_pairs"]
