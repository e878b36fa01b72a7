"""OpenRLHF's reward-function file, served by `align serve`:

    ALIGN_SERVE_URL=http://127.0.0.1:8000 python -m openrlhf.cli.train_ppo_ray ... \
        --reward.remote_url $(python -c "import align.serve.openrlhf_reward_func as m; print(m.__file__)")

OpenRLHF loads this file by path and calls `reward_func(queries, prompts, labels)` from a thread, one sample per
call; it returns {"rewards", "scores", "extra_logs"} as tensors (an abstention is NaN). Pointing
`--reward.remote_url` at http://HOST:PORT/openrlhf instead skips this file: the server speaks OpenRLHF's HTTP
contract itself. The URL and key come from $ALIGN_SERVE_URL and $ALIGN_SERVE_API_KEY. The shim:
`align.serve.adapters.openrlhf_reward_func`.
"""

from align.serve.adapters import openrlhf_reward_func as reward_func

__all__ = ["reward_func"]
