"""verl's custom reward function, served by `align serve`:

    reward.custom_reward_function.path=pkg://align.serve.verl_reward
    reward.custom_reward_function.name=compute_score            (or compute_score_async)
    +reward.custom_reward_function.reward_kwargs.url=http://127.0.0.1:8000
    +reward.custom_reward_function.reward_kwargs.abstain_score=0.0   (optional: what an abstention scores)

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` and reads
`{"score": float, **extra}` (extra to its reward_extra_info). The prompt comes from `extra_info` (`prompt`,
`raw_prompt` or `question`: verl passes none itself); a string ground_truth is the reference answer. The URL and
key also come from $ALIGN_SERVE_URL and $ALIGN_SERVE_API_KEY. The shim: `align.serve.adapters`.
"""

from align.serve.adapters import verl_compute_score as compute_score
from align.serve.adapters import verl_compute_score_async as compute_score_async

__all__ = ["compute_score", "compute_score_async"]
