"""`align serve`: any scorer of the one interface, or a composed reward, behind HTTP for the engines users scale out
on (OpenRLHF's remote RM contract, the vLLM /classify shape verl's RM path posts, TRL reward functions), with the
adapters each engine loads. Contracts: `contracts.py`; the server: `app.py` (the `serve` extra: FastAPI, uvicorn).

    settings.py            ServeSettings: the verb's flags (torch- and server-free)
    contracts.py           each contract's request and response, checked field by field
    templates.py           chat-templated text back into messages (OpenRLHF's query, verl's /classify input)
    scoring.py             ServedReward: the one scorer call, items -> components -> rewards
    state.py               the composition in the server: running normalisation, multipliers, when they update
    batching.py            dynamic batching (a short window), the score cache
    app.py                 the FastAPI app and its endpoints; BackgroundServer for tests and benchmarks
    run.py                 `align serve`: build, refuse what is unsafe, run uvicorn
    adapters.py            TRL reward functions, verl compute_score, OpenRLHF reward_func (no server imports)
    verl_reward.py         the module verl loads (pkg://align.serve.verl_reward)
    openrlhf_reward_func.py  the file OpenRLHF loads (--reward.remote_url PATH)

Nothing is imported here, so `import align.serve.adapters` needs neither torch nor the HTTP stack.
"""
