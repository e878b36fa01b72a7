"""prefalign's ground floor: machinery every stage uses and that imports none of them.

The stages (`preference_data`, `reward_models`, `align`, `leaderboards`) import from here; nothing here
imports a stage (a test enforces it). `config`, `errors` and `registry` are torch-free (typed configs, errors
that say how to fix, component tables); `models` loads and saves models, decides the precision and holds the
packed forward and segment attention; `training` is the Trainer glue every trainer shares; `generation` is
the generation engine (conversations x n samples -> completions with token ids, log-probs, finish reasons).
"""
