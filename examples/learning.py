"""Run a learning experiment and write its curves (JSON, markdown table, PNG).

    python -m examples.learning --env babyai-goto --regime pool --seeds 3 --episodes 60

Without ``--url`` it starts its own Reflexa (``reflexa serve`` on a temporary data
directory); with ``--url`` and ``--api-key`` (an admin key: it makes a namespace
and an agent key per run) it uses that server.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from reflexa import Client

from examples.common.llm_policy import llm_agent_factory
from examples.common.plot import plot_curves
from examples.common.progress import Progress
from examples.common.runner import REGIMES, AgentFactory, Experiment, run
from examples.common.server import EmbeddedServer
from examples.common.stats import curve, table, text_curve
from examples.envs import ENVS, make_env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.learning", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=ENVS, default="babyai-goto")
    p.add_argument("--level", help="BabyAI level id (babyai-goto); default BabyAI-GoToLocal-v0")
    p.add_argument("--view", choices=("scene", "target"), default="scene", help="BabyAI state description")
    p.add_argument("--max-steps", type=int, help="step limit per episode (default: the environment module's)")
    p.add_argument("--regime", choices=REGIMES, default="pool")
    p.add_argument("--split", choices=("train", "dev", "test"), default="train")
    p.add_argument("--seeds", type=int, default=3, help="independent runs (fresh memory each)")
    p.add_argument("--episodes", type=int, default=60, help="episodes per run")
    p.add_argument("--pool-size", type=int, default=5, help="worlds in the pool regime")
    p.add_argument("--block", type=int, default=10, help="episodes per point of the curve")
    p.add_argument(
        "--agents",
        default="reflexa,memoryless,random",
        help="comma-separated: reflexa, reflexa-acted (credits only the exemplars it acted on), memoryless, "
        "random, reflexa-llm (needs --llm-base-url)",
    )
    p.add_argument("--state-text", default="observation", help="namespace state_text fields, e.g. task,observation")
    p.add_argument("--internal-weight", type=float, help="namespace ranking.internal_weight")
    p.add_argument(
        "--utility-weight",
        type=float,
        help="namespace ranking.utility_weight (default: not sent, the server's 0.5); for ablations",
    )
    p.add_argument(
        "--lexical-weight",
        type=float,
        help="namespace ranking.lexical_weight (default: not sent, the server's `calibrated`); for ablations",
    )
    p.add_argument("--url", help="an existing Reflexa server (default: start one)")
    p.add_argument("--api-key", help="its admin key")
    p.add_argument("--llm-base-url", help="OpenAI-compatible endpoint for the reflexa-llm agent")
    p.add_argument("--llm-model", default="gpt-4o-mini")
    p.add_argument("--llm-api-key", default="not-needed")
    p.add_argument("--out", type=Path, default=Path("examples/results"), help="where the JSON, table and PNG go")
    p.add_argument("--plot", type=Path, help="PNG path (default: <out>/<name>.png)")
    return p.parse_args(argv)


def namespace_settings(args: argparse.Namespace) -> dict:
    """State text as asked; ranking on the server's defaults unless a flag overrides one."""
    settings: dict = {"state_text": {"fields": args.state_text.split(",")}}
    ranking = {
        name: value
        for name, value in (
            ("utility_weight", args.utility_weight),
            ("internal_weight", args.internal_weight),
            ("lexical_weight", args.lexical_weight),
        )
        if value is not None
    }
    if ranking:
        settings["ranking"] = ranking
    return settings


def run_name(args: argparse.Namespace) -> str:
    view = f"-{args.view}" if args.env == "babyai-goto" else ""
    return f"{args.env}{view}-{args.regime}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    agents = tuple(a.strip() for a in args.agents.split(",") if a.strip())
    exp = Experiment(
        env_name=run_name(args),
        regime=args.regime,
        seeds=args.seeds,
        episodes=args.episodes,
        pool_size=args.pool_size,
        split=args.split,
        agents=agents,
        settings=namespace_settings(args),
    )
    extra = {}
    if "reflexa-llm" in agents:
        if not args.llm_base_url:
            raise SystemExit("the reflexa-llm agent needs --llm-base-url")
        extra["reflexa-llm"] = llm_agent_factory(args.llm_base_url, args.llm_model, args.llm_api_key)
    server = None
    needs_server = any(a.startswith("reflexa") for a in agents)
    if needs_server and not args.url:
        print("starting an embedded Reflexa ...", file=sys.stderr)
        server = EmbeddedServer().start()
        args.url, args.api_key = server.url, server.admin_key
    env = make_env(args.env, view=args.view, level=args.level, max_steps=args.max_steps)
    admin = Client(args.url, api_key=args.api_key) if needs_server else None
    factory = AgentFactory(admin, args.url, exp.settings, extra)
    started = time.monotonic()
    progress = Progress(exp.seeds * exp.episodes * len(agents))
    try:
        results = run(exp, env, factory, progress)
        ranking = factory.rankings()
    finally:
        progress.close()
        factory.close()
        if admin is not None:
            admin.close()
        env.close()
        if server is not None:
            server.stop()
    elapsed = time.monotonic() - started
    curves = [curve(a, results[a], args.block) for a in agents]
    report(args, exp, results, curves, elapsed, argv, ranking)
    return 0


def report(args, exp, results, curves, elapsed, argv, ranking) -> None:  # type: ignore[no-untyped-def]
    name = run_name(args)
    command = "python -m examples.learning " + shlex.join(argv if argv is not None else sys.argv[1:])
    title = f"{name} ({exp.split} worlds{f', pool of {exp.pool_size}' if exp.regime == 'pool' else ', each new'})"
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot_curves(curves, title, args.plot or args.out / f"{name}.png")
    md = f"{title}\n\n`{command}` ({elapsed:.0f} s)\n\n{table(curves)}\n"
    (args.out / f"{name}.md").write_text(md)
    raw = {
        "command": command,
        "experiment": asdict(exp),
        "elapsed_seconds": round(elapsed, 1),
        "results": {a: [[asdict(e) for e in r] for r in runs] for a, runs in results.items()},
        "curves": [asdict(c) for c in curves],
        "ranking": ranking,  # per Reflexa namespace: its lexical weight setting and last calibration
    }
    (args.out / f"{name}.json").write_text(json.dumps(raw, indent=1))
    print(f"\n{title}: success rate per {args.block} episodes (mean over {exp.seeds} runs)\n")
    print(text_curve(curves))
    print(f"\n{table(curves)}\n\nplot: {png}   ({elapsed:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
