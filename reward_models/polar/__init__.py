"""POLAR: pre-trained policy discriminators as reward models (arXiv 2507.05197; reference `reward-models.md` §3).

A POLAR reward model scores a candidate answer against a reference answer: high when the candidate looks like it
came from the same policy as the reference. Files, in reading order:

  format.py   the input sequence (ref <|reward|> candidate <|reward_end|>), truncation, the added tokens
  pool.py     the policy pool (kind polar_pool): policies x prompts -> trajectories cached with their policy
  data.py     training rows: (A, A, B) triples from a pool, (prompt, reference, chosen, rejected) pairs
  train.py    pre-training and fine-tuning (kind polar_train, stage pretrain | finetune)
  options.py  the `polar` scorer's options
  scorer.py   the `polar` scorer (kind "reference")

Recipes: configs/polar_pool_suite.yaml -> configs/polar_pretrain_suite.yaml -> configs/polar_finetune_suite.yaml,
each run by `align rm train --config ...`.
"""
