"""Token log-probabilities from a llama.cpp model (llama-cpp-python), with the key/value cache
of the shared prompt prefix kept between calls.

Only the positions whose next token is scored ask llama.cpp for logits, so the model is loaded
without ``logits_all`` (which would hold n_ctx × vocabulary floats). The tokens already in the
cache are compared with the next text's tokens and only the differing suffix is evaluated: a
five-shot prompt shared by many questions is evaluated once, and the four options of a
question cost only their own tokens.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgym.logprobs import ContinuationScore, register_scorer
from toolgym.providers import ModelSettings

if TYPE_CHECKING:
    import numpy as np

DEFAULT_N_CTX = 8192  # five-shot EXAMS prompts are at most about 1,100 tokens


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities from one row of logits (numerically stable)."""
    import numpy as np  # installed with llama-cpp-python; not a core dependency
    shifted = logits.astype(np.float64) - float(np.max(logits))
    return shifted - np.log(np.sum(np.exp(shifted)))


class LlamaCppScorer:
    """:class:`~toolgym.logprobs.LogprobScorer` over a ``llama_cpp.Llama``.

    Safe to call from several threads (calls are serialised: one llama.cpp context). The
    ``Llama`` object's own record of the evaluated tokens (``input_ids[:n_tokens]``) is the
    cache's truth and is kept up to date, so the same object can also serve a chat model
    (whose ``create_completion`` reuses the cache the same way).

    Args:
        llama: A loaded ``llama_cpp.Llama`` (``logits_all`` not needed).
        lock: The lock guarding every call into ``llama`` (shared with other users of the same
            object); default: a lock of this scorer's own.

    Attributes:
        evaluated_tokens: Tokens run through the model so far.
        reused_tokens: Tokens taken from the cache instead of being evaluated.
    """

    name = "llama.cpp"

    def __init__(self, llama: Any, lock: Any = None) -> None:
        self.llama = llama
        self._lock = lock if lock is not None else threading.Lock()
        self.evaluated_tokens = 0
        self.reused_tokens = 0

    def tokenize(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens, split where the whole text's tokens pass the
        context's (as lm-evaluation-harness does); if tokenising the whole text merges the
        boundary, the continuation is tokenised on its own."""
        ctx = self.llama.tokenize(context.encode("utf-8"), add_bos=True, special=False) if context else []
        whole = self.llama.tokenize((context + continuation).encode("utf-8"), add_bos=True, special=False)
        if whole[: len(ctx)] == ctx and len(whole) > len(ctx):
            cont = whole[len(ctx) :]
        else:
            cont = self.llama.tokenize(continuation.encode("utf-8"), add_bos=False, special=False)
        if not ctx:  # the first token needs something to be predicted from
            start = self.llama.token_bos()
            ctx = [start if start >= 0 else self.llama.token_eos()]
        return ctx, cont

    def score(self, context: str, continuation: str) -> ContinuationScore:
        """Log-probabilities of ``continuation``'s tokens after ``context``.

        Raises:
            ValueError: for an empty continuation or a text longer than the context window.
            RuntimeError: when llama.cpp fails to decode.
        """
        import numpy as np

        if not continuation:
            raise ValueError("empty continuation")
        with self._lock:
            ctx, cont = self.tokenize(context, continuation)
            full = ctx + cont
            n_ctx = min(self.llama.n_ctx(), len(self.llama.input_ids))  # llama.cpp may round n_ctx up
            if len(full) > n_ctx:
                raise ValueError(f"prompt and continuation are {len(full)} tokens, over the context window of {n_ctx}")
            wanted = range(len(ctx) - 1, len(full) - 1)  # positions whose next token is scored
            rows = self._evaluate(full, first_wanted=wanted.start)
            logprobs, greedy = [], True
            for pos in wanted:
                lp = log_softmax(rows[pos])
                nxt = full[pos + 1]
                logprobs.append(float(lp[nxt]))
                greedy = greedy and int(np.argmax(lp)) == nxt
            pieces = tuple(
                self.llama.detokenize([t]).decode("utf-8", errors="replace") for t in cont
            )
            return ContinuationScore(tuple(logprobs), greedy, pieces)

    def _evaluate(self, tokens: list[int], first_wanted: int) -> dict[int, np.ndarray]:
        """Bring the cache to ``tokens`` and return the logits of every position from
        ``first_wanted`` to the second-to-last one (position → logits row)."""
        import llama_cpp
        import numpy as np

        llama = self.llama
        cached = llama.input_ids[: llama.n_tokens].tolist()  # tokens whose keys/values are cached
        keep = min(common_prefix(cached, tokens), first_wanted)
        self.reused_tokens += keep
        llama._ctx.kv_cache_seq_rm(-1, keep, -1)
        llama.n_tokens = keep
        batch = llama._batch.batch
        n_batch = llama.n_batch
        n_vocab = llama.n_vocab()
        rows: dict[int, np.ndarray] = {}
        try:
            for start in range(keep, len(tokens), n_batch):
                chunk = tokens[start : start + n_batch]
                outputs = []
                for i, tok in enumerate(chunk):
                    pos = start + i
                    want = first_wanted <= pos < len(tokens) - 1
                    batch.token[i] = tok
                    batch.pos[i] = pos
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = want
                    if want:
                        outputs.append((i, pos))
                batch.n_tokens = len(chunk)
                llama._ctx.decode(llama._batch)
                for i, pos in outputs:
                    ptr = llama_cpp.llama_get_logits_ith(llama._ctx.ctx, i)
                    rows[pos] = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()
                self.evaluated_tokens += len(chunk)
                # Llama's own bookkeeping: what the next call (or generate()) can reuse
                llama.input_ids[start : start + len(chunk)] = chunk
                llama.n_tokens = start + len(chunk)
        except Exception:
            llama._ctx.kv_cache_clear()
            llama.n_tokens = 0
            raise
        return rows


@register_scorer("local")
def local_scorer(name: str, settings: ModelSettings) -> LlamaCppScorer:
    """``local``: the bundled model; ``local:PATH``: another GGUF file. Loaded (and shared
    with the local chat model) by :func:`toolgym.providers.local.load_llama`;
    ``settings.extra`` may set ``n_ctx``, ``n_threads`` and ``cache`` as for that provider.

    Raises:
        ValueError: when the local provider (llama-cpp-python, the weights) is missing.
        FileNotFoundError: ``PATH`` does not exist.
    """
    try:
        from toolgym.providers.local import LLAMA_LOCK, load_llama
    except ImportError as exc:
        raise ValueError(f"the local model provider is not available: {exc}") from None
    llama = load_llama(
        Path(name).expanduser() if name else None,
        n_ctx=int(settings.extra.get("n_ctx", DEFAULT_N_CTX)),
        n_threads=settings.extra.get("n_threads"),
        cache=settings.extra.get("cache"),
    )
    return LlamaCppScorer(llama, lock=LLAMA_LOCK)
