"""Stage 4: RM benchmarks, their scoring rules, result records and the rendered leaderboard.

rules.py       pure scoring rules and aggregation weights, as the official benchmark code defines them
loaders.py     official files (JSON, JSONL, parquet, hub id) -> validated examples
benchmarks.py  the BENCHMARKS table: loader, per-example rule, aggregation, accepted scorer kinds
runner.py      run_benchmark(): dedupe, batch, cache, score with any scorer kind, write a record
records.py     the Record a run writes (scores, counts, scorer, versions, git commit, date)
render.py      render(): Markdown, static HTML and PNG leaderboards from records
"""
