"""The log-likelihood agent: scores given continuations with token log-probabilities instead
of letting the model write (ViLLM-Eval's and lm-evaluation-harness's ``loglikelihood`` mode).

* multiple choice (``metadata.task == "choice"``): every option's continuation
  (``metadata.continuations``) is scored after the prompt; the most probable option is the
  answer, and all log-probabilities go on the answer sheet for the graders;
* last word (``metadata.task == "last_word"``): the target continuation
  (``metadata.continuation``) is scored; its token log-probabilities (for perplexity) and
  whether it is the greedy continuation (for accuracy) go on the answer sheet.

The prompt is the example's input as raw text (no chat template, no system message). When the
``--model`` provider returns no prompt log-probabilities (a chat-only API), the run warns and
this agent falls back to answer extraction: it behaves as the ``direct`` agent.
"""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

from toolgym.agents import Episode, register_agent
from toolgym.agents.direct import DirectAgent
from toolgym.environments import SupportsSubmit
from toolgym.logprobs import LogprobScorer, build_scorer
from toolgym.providers import ModelSettings, build_model
from toolgym.records import ModelStep


@dataclass(frozen=True)
class Backend:
    """What :meth:`LoglikAgent.make_model` built: a scorer, or a chat model to fall back to.

    Attributes:
        scorer: The log-probability backend, or ``None``.
        chat: The chat model used for answer extraction when there is no scorer.
        note: How the run scores, or why it fell back.
    """

    scorer: LogprobScorer | None
    chat: Any = None
    note: str = ""


@register_agent("loglik")
class LoglikAgent(DirectAgent):
    """Scores given continuations (the options, or the target word) by token log-probability
    instead of letting the model write; the module docstring has the details.

    Args:
        model: A :class:`Backend`, a :class:`~toolgym.logprobs.LogprobScorer`, or a chat model
            (which means answer extraction).
    """

    def __init__(self, model: Any = None, model_spec: str | None = None, max_steps: int = 40,
                 max_repeats: int | None = None) -> None:
        if isinstance(model, Backend):
            backend = model
        elif isinstance(model, LogprobScorer):
            backend = Backend(model, None, f"log-likelihood via {model.name}")
        else:
            backend = Backend(None, model, "answer extraction (a chat model was given)")
        super().__init__(model=backend.chat, model_spec=model_spec, max_steps=max_steps, max_repeats=max_repeats)
        self.backend = backend

    @classmethod
    def make_model(cls, spec: str, settings: ModelSettings) -> Backend:
        """The scorer for ``spec``; for a provider without prompt log-probabilities, warn and
        build its chat model instead (answer extraction).

        Raises:
            UnknownNameError / ValueError: when neither can be built.
        """
        scorer, note = build_scorer(spec, settings)
        if scorer is not None:
            return Backend(scorer, None, note)
        warnings.warn(f"loglik: {note}; falling back to answer extraction", stacklevel=2)
        return Backend(None, build_model(spec, settings), f"answer extraction (fallback: {note})")

    def describe(self) -> dict[str, Any]:
        return super().describe() | {
            "scoring": "loglik" if self.backend.scorer is not None else "answer_extraction",
            "scoring_note": self.backend.note,
        }

    async def play(self, episode: Episode) -> None:
        scorer = self.backend.scorer
        if scorer is None:
            await self.answer(episode)
            return
        example = episode.example
        if not isinstance(episode.env, SupportsSubmit):
            raise ValueError(f"environment {episode.env.name!r} has no answer sheet for log-likelihoods")
        if not isinstance(example.input, str):
            raise ValueError(f"example {example.id!r}: log-likelihood scoring needs a text prompt, not a chat history")
        task = example.metadata.get("task")
        start = time.perf_counter()
        if task == "choice":
            continuations: dict[str, str] = example.metadata.get("continuations") or {}
            if not continuations:
                raise ValueError(f"example {example.id!r} has no metadata.continuations to score")
            choices = {}
            for letter, text in continuations.items():
                result = await asyncio.to_thread(scorer.score, example.input, text)
                choices[letter] = {"logprobs": list(result.logprobs), "chars": len(text), "greedy": result.greedy}
            chosen = max(choices, key=lambda k: math.fsum(choices[k]["logprobs"]))
            episode.env.submit(scoring="loglik", backend=scorer.name, choices=choices)
            summary = ", ".join(f"{k} {math.fsum(v['logprobs']):.2f}" for k, v in choices.items())
            text = f"{chosen} (log-probabilities: {summary})"
            episode.final_answer = chosen
        elif task == "last_word":
            continuation = example.metadata.get("continuation")
            if not continuation:
                raise ValueError(f"example {example.id!r} has no metadata.continuation to score")
            result = await asyncio.to_thread(scorer.score, example.input, continuation)
            episode.env.submit(
                scoring="loglik", backend=scorer.name, logprobs=list(result.logprobs),
                greedy=result.greedy, tokens=list(result.tokens),
            )
            text = (
                f"target {continuation!r} is {'' if result.greedy else 'not '}the greedy continuation; "
                f"log-probability {result.total:.3f} over {result.n_tokens} tokens"
            )
        else:
            raise ValueError(f"example {example.id!r}: metadata.task {task!r} is not 'choice' or 'last_word'")
        episode.record_model(ModelStep(text=text, latency_s=time.perf_counter() - start))
