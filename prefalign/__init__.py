"""prefalign's ground floor: machinery every stage uses and that imports none of them.

The stages (`preference_data`, `reward_models`, `align`, `leaderboards`) import from here; nothing here
imports a stage (a test enforces it). `errors` holds the user-facing error types; `generation` is the
generation engine (conversations x n samples -> completions with token ids, log-probs, finish reasons).
"""
