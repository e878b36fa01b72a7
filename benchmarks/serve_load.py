"""`align serve` under load: 1, 8 and 32 concurrent clients on loopback, batched against one-at-a-time.

    .venv/bin/python benchmarks/serve_load.py                                 # the quickstart RM and a GRM judge
    .venv/bin/python benchmarks/serve_load.py --rm runs/quickstart/rm/model --clients 1,8,32 --out runs/serve_load.json
    .venv/bin/python benchmarks/serve_load.py --rewards rm --requests 256

What runs: the server is the real `align serve` in its own process (its peak memory is its own: `/info`'s
peak_rss_mb, the process's maximum resident set, model loading included); each client is a closed loop that sends
OpenRLHF's request (`POST /openrlhf`, one sample per request as its single-turn executor sends them: the chat-
templated query with special tokens, the prompt text, an empty label) through aiohttp, OpenRLHF's own client
library, and sends the next when the answer comes. Items are the suite's held-out pairs (prompt + chosen, prompt +
rejected), all distinct, with the score cache off (`--cache-size 0`), so every item is scored. Two rewards:

  rm      the quickstart RM (`align quickstart`: a LoRA Bradley-Terry RM on SmolLM2-135M-Instruct) as `scalar`
  judge   a generative judge: `grm` on SmolLM2-135M-Instruct, k = 1 sampled critique of at most --judge-tokens
          tokens per item (sampling dominates: its cost is the generation engine's)

Two modes: batched (the defaults: a 5 ms window, batches of at most 256 items) and one-at-a-time (`--max-batch 1
--batch-window-ms 0`: every request scored alone, in arrival order). Reported per cell: items/s over the timed
requests (a warm-up request per client first), p50 / p99 latency per request, the server's peak memory (and GPU
memory, where it scores on one), errors (any answer but 200, or no answer), and the batches the server scored.
Precision is the toolkit's `auto` (fp32 on a CPU without native bf16, bf16 on a GPU that has it); each line says
where the scorer ran. Timings on shared machines vary from run to run; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, machine_line  # noqa: E402
from prefalign.stats import nearest_rank  # noqa: E402

JUDGE = "builtin:smollm2-135m-instruct"


def suite_items(n: int) -> list[tuple[list[dict], str]]:
    """n distinct (prompt, response) items: the suite's held-out pairs, chosen and rejected, in order."""
    from preference_data.suite import build_suite

    out: list[tuple[list[dict], str]] = []
    for p in build_suite(seed=0).test_pairs:
        prompt = [m.to_dict() for m in p.prompt]
        for side in (p.chosen, p.rejected):
            out.append((prompt, side[-1].content))
            if len(out) == n:
                return out
    raise SystemExit(f"the suite has fewer than {n} held-out responses")


def openrlhf_bodies(items: list[tuple[list[dict], str]], tokenizer_ref: str) -> list[dict]:
    """OpenRLHF's request per item: query = decode(prompt_ids + response_ids + EOS), special tokens kept."""
    from prefalign.models.hub import load_tokenizer

    tok = load_tokenizer(tokenizer_ref)
    out = []
    for prompt, response in items:
        prompt_text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        ids = tok(prompt_text, add_special_tokens=False)["input_ids"]
        ids += tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append({"query": [tok.decode(ids, skip_special_tokens=False)], "prompts": [prompt_text], "labels": [""]})
    return out


class Server:
    """`align serve ARGS --port 0` in its own process; `url` once it answers /health."""

    def __init__(self, args: list[str]) -> None:
        cmd = [sys.executable, "-m", "align.cli.main", "serve", *args, "--port", "0", "--log-level", "warning"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.url = ""
        self.log: list[str] = []
        assert self.proc.stdout is not None
        while not self.url:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("align serve exited before serving:\n" + "".join(self.log[-30:]))
            self.log.append(line)
            if " on http://" in line:
                self.url = line.split(" on ", 1)[1].split()[0]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def load(url: str, bodies: list[dict], clients: int) -> dict:
    """`clients` closed loops sharing the bodies (each body sent once); latency per request and errors."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=1800)
    latencies: list[float] = []
    errors: list[str] = []
    queue = list(reversed(bodies))
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:

        async def post(body: dict) -> None:
            t = time.perf_counter()
            try:
                async with session.post(url + "/openrlhf", json=body) as r:
                    answer = await r.json()
                    if r.status != 200 or not answer.get("rewards"):
                        errors.append(f"HTTP {r.status}: {str(answer)[:200]}")
            except Exception as e:  # a dropped connection, a timeout: counted, never hidden
                errors.append(f"{type(e).__name__}: {e}")
            latencies.append(time.perf_counter() - t)

        async def client() -> None:
            while queue:
                await post(queue.pop())

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        seconds = time.perf_counter() - t0
    latencies.sort()
    return {
        "requests": len(bodies),
        "seconds": seconds,
        "items_per_s": len(bodies) / seconds,
        "p50_ms": 1000 * nearest_rank(latencies, 50),
        "p99_ms": 1000 * nearest_rank(latencies, 99),
        "errors": len(errors),
        "error_examples": errors[:3],
    }


def cell(serve_args: list[str], bodies: list[dict], clients: int, batched: bool) -> dict:
    mode = [] if batched else ["--max-batch", "1", "--batch-window-ms", "0"]
    server = Server([*serve_args, "--cache-size", "0", *mode])
    try:
        warm = bodies[:clients]
        asyncio.run(load(server.url, warm, clients))  # warm-up: first calls pay for lazy initialisation
        before = json.loads(urllib.request.urlopen(server.url + "/info", timeout=60).read())["counters"]
        out = asyncio.run(load(server.url, bodies[clients:], clients))
        info = json.loads(urllib.request.urlopen(server.url + "/info", timeout=60).read())
    finally:
        server.stop()
    after = info["counters"]
    out["batches"] = after["batches"] - before["batches"]
    out["largest_batch"] = after["largest_batch"]
    out["peak_rss_mb"] = info["peak_rss_mb"]
    out["peak_gpu_mb"] = info.get("peak_gpu_mb")
    out["runs_on"] = [
        f"{c['name']}: {c.get('scorer', {}).get('device', '?')} {c.get('scorer', {}).get('dtype', '?')}"
        for c in info["reward"]["components"]
    ]
    out["null_rewards"] = after["null_rewards"] - before["null_rewards"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rm", default=str(ROOT / "runs" / "quickstart" / "rm" / "model"), help="the quickstart RM")
    ap.add_argument("--rewards", default="rm,judge", help="rm, judge or both (comma-separated)")
    ap.add_argument("--clients", default="1,8,32", help="concurrent clients (comma-separated)")
    ap.add_argument("--requests", type=int, default=128, help="timed requests per cell for the RM")
    ap.add_argument("--judge-requests", type=int, default=32, help="timed requests per cell for the judge")
    ap.add_argument("--judge-tokens", type=int, default=64, help="the judge's longest critique, in tokens")
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    rewards = args.rewards.split(",")
    if "rm" in rewards and not Path(args.rm).exists():
        raise SystemExit(
            f"--rm {args.rm}: not found; run `align quickstart` first (its RM is runs/quickstart/rm/model)"
        )
    judge = json.dumps({"type": "grm", "model": JUDGE, "k": 1, "max_new_tokens": args.judge_tokens})
    setups = {
        "rm": (["--model", args.rm, "--scorer", "scalar"], args.requests, args.rm),
        "judge": (["--scorer", judge], args.judge_requests, JUDGE),
    }
    print(f"machine: {machine_line()}")
    results = []
    for name in rewards:
        serve_args, n, tokenizer = setups[name]
        bodies = openrlhf_bodies(suite_items(n + max(clients)), tokenizer)
        for c in clients:
            row: dict = {"reward": name, "clients": c}
            for batched in (True, False):
                r = cell(serve_args, bodies[: n + c], c, batched)
                row["batched" if batched else "one_at_a_time"] = r
                mode = "batched" if batched else "one-at-a-time"
                gpu = f" (GPU {r['peak_gpu_mb']:.0f} MB)" if r["peak_gpu_mb"] is not None else ""
                print(
                    f"{name:<5} {c:>3} clients {mode:<13} {r['items_per_s']:7.2f} items/s  p50 {r['p50_ms']:8.0f} ms  "
                    f"p99 {r['p99_ms']:8.0f} ms  peak {r['peak_rss_mb']:6.0f} MB{gpu}  errors {r['errors']}  "
                    f"batches {r['batches']} (largest {r['largest_batch']})  on {r['runs_on']}",
                    flush=True,
                )
            row["speedup"] = row["batched"]["items_per_s"] / row["one_at_a_time"]["items_per_s"]
            results.append(row)
    print()
    print(
        "| reward | clients | batched items/s | p50 / p99 ms | one-at-a-time items/s | p50 / p99 ms | speedup | "
        "peak MB (batched / one) | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in results:
        b, o = row["batched"], row["one_at_a_time"]
        print(
            f"| {row['reward']} | {row['clients']} | {b['items_per_s']:.2f} | {b['p50_ms']:.0f} / {b['p99_ms']:.0f} | "
            f"{o['items_per_s']:.2f} | {o['p50_ms']:.0f} / {o['p99_ms']:.0f} | {row['speedup']:.2f}x | "
            f"{b['peak_rss_mb']:.0f} / {o['peak_rss_mb']:.0f} | {b['errors'] + o['errors']} |"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"machine": machine_line(), "results": results}, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
