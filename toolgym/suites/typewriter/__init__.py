"""The typewriters of the LangChain tool-usage benchmark: the paper is the state."""

from pathlib import Path

from toolgym import Benchmark, Generator, Suite
from toolgym.suites.typewriter.environment import Typewriter1, Typewriter26

_DATA = Path(__file__).parent / "datasets"
_GRADERS = ("final_state", "steps_exact", "step_ratio")

SUITE = Suite(
    name="typewriter",
    benchmarks=[
        Benchmark(
            environment=cls,
            graders=_GRADERS,
            datasets=_DATA / cls.name,
            from_langchain=cls.from_langchain,
            generator=Generator(cls.generate, cls.default_levels, "string length"),
            description=(cls.__doc__ or "").split("\n")[0],
        )
        for cls in (Typewriter1, Typewriter26)
    ],
)
