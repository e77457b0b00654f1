"""Judge client throughput: N completions x K jurors against the loopback server with a fixed reply latency.

The server runs in its own process (as a real judge server would), so the client's figures are its own.
For each concurrency it prints the wall time of one ``grade`` call (one training step's judging), the
ideal ``N * K / concurrency * latency`` (every slot busy all the time, zero overhead), their ratio,
the most requests the server saw at once, and the client's CPU seconds (what bounds it on a busy CPU).

    python benchmarks/judge_throughput.py                       # 256 x 3 calls, 100 ms each
    python benchmarks/judge_throughput.py --concurrency 8 64 256
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from lit_grpo.tasks.phyx.judge import ACCURACY, JudgeConfig, JudgeItem
from lit_grpo.tasks.phyx.judge.client import OpenAIJudge
from lit_grpo.testing.loopback import LoopbackJudgeServer, votes_by_seed


def _serve(conn, latency: float) -> None:
    with LoopbackJudgeServer(votes_by_seed([{"correctness": 2}], delay_s=latency)) as server:
        conn.send(server.base_url)
        conn.recv()  # run until told to stop
        conn.send((len(server.requests), server.max_in_flight))


def run(completions: int, judges: int, latency: float, concurrency: int) -> dict[str, float]:
    """Figures of one ``grade`` call of ``completions`` distinct items with K=``judges``."""
    ours, theirs = mp.get_context("fork").Pipe()
    server = mp.get_context("fork").Process(target=_serve, args=(theirs, latency), daemon=True)
    server.start()
    base_url = ours.recv()
    items = [JudgeItem(question=f"Problem {i}", gold_answer="7.55 N", completion=f"<answer>{i} N</answer>")
             for i in range(completions)]
    judge = OpenAIJudge(JudgeConfig(base_url=base_url, api_key_env=None, num_judges=judges,
                                    concurrency=concurrency, timeout_s=30.0))
    cpu, start = time.process_time(), time.perf_counter()
    votes = judge.grade(items, ACCURACY)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    judge.close()
    ours.send("stop")
    requests, peak = ours.recv()
    server.join()
    if requests != completions * judges or any(v != {"correctness": 2} for row in votes for v in row):
        raise RuntimeError(f"expected {completions * judges} answered calls, the server saw {requests}")
    return {"wall_s": wall, "ideal_s": completions * judges / concurrency * latency, "peak": peak, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=256)
    parser.add_argument("--judges", type=int, default=3, help="jury size K")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds the server waits before each reply")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32, 64, 128])
    args = parser.parse_args()
    calls = args.completions * args.judges
    print(f"{args.completions} completions x K={args.judges} = {calls} calls, {args.latency * 1000:g} ms per reply; "
          f"ideal = {calls} / concurrency x {args.latency:g} s")
    print(f"{'concurrency':>11} {'wall_s':>7} {'ideal_s':>7} {'wall/ideal':>10} {'peak':>5} {'calls/s':>7} "
          f"{'client_cpu_s':>12}")
    for c in args.concurrency:
        r = run(args.completions, args.judges, args.latency, c)
        print(f"{c:>11} {r['wall_s']:>7.2f} {r['ideal_s']:>7.2f} {r['wall_s'] / r['ideal_s']:>10.2f} {r['peak']:>5} "
              f"{calls / r['wall_s']:>7.0f} {r['cpu_s']:>12.2f}")


if __name__ == "__main__":
    main()
