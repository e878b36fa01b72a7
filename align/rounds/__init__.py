"""The phases of an iterative round (`align/iterative.py` runs them): `config` (the settings), `sample` (prompts,
samples and the candidates the reward ranks), `pairs` (scores, the pair rule, a judge's verification, the kept
margins) and `train` (the round's offline training and its evaluation)."""
